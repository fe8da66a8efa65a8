"""A topic's mode (diskless.enable) is fixed when it is created, survives changes of
diskless.default and restarts, and topics stored before diskless topics existed stay classic."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.config import load_config
from broker.metadata import records
from broker.metadata.local import LocalMetadataStore
from broker.protocol.errors import ApiError, ErrorCode
from broker.topics import TopicCatalog


def catalog(tmp_path: Path, **settings: str) -> TopicCatalog:
    config = load_config(environ={}, overrides={"data.dir": str(tmp_path), **settings})
    return TopicCatalog(LocalMetadataStore(tmp_path / "store.json"), config)


def test_mode_is_recorded_at_creation_and_kept_when_the_default_changes(tmp_path: Path) -> None:
    async def scenario() -> None:
        first = catalog(tmp_path)
        await first.load()
        diskless = await first.create(first.prepare("d", 1, {}), {0: [0]})
        classic = await first.create(first.prepare("c", 1, {"diskless.enable": "false"}), {0: [0]})
        assert diskless.settings.diskless and diskless.configs["diskless.enable"] == "true"
        assert not classic.settings.diskless and classic.settings.log.size_by_batch_bytes is False
        later = catalog(tmp_path, **{"diskless.default": "false"})
        await later.load()
        assert later.get("d").settings.diskless and not later.get("c").settings.diskless
        assert not (await later.create(later.prepare("new", 1, {}), {0: [0]})).settings.diskless

    asyncio.run(scenario())


def test_changing_the_mode_is_refused_and_other_changes_keep_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        topics = catalog(tmp_path)
        await topics.load()
        await topics.create(topics.prepare("d", 1, {}), {0: [0]})
        with pytest.raises(ApiError) as info:
            await topics.set_configs("d", {"diskless.enable": "false"})
        assert info.value.code == ErrorCode.INVALID_CONFIG and "not supported yet" in info.value.message
        updated = await topics.set_configs("d", {"retention.ms": "1000"})  # AlterConfigs without the key
        assert updated.settings.diskless and updated.settings.log.retention_ms == 1000
        with pytest.raises(ApiError):
            topics.check_configs("d", {"diskless.enable": "maybe"})

    asyncio.run(scenario())


def test_topics_stored_before_diskless_existed_load_as_classic(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = LocalMetadataStore(tmp_path / "store.json")
        old = records.TopicRecord(records.RECORD_VERSION, "old", "00000000-0000-0000-0000-000000000001", 1, {}, False)
        await store.put(records.topic_key("old"), records.encode(old), expected_revision=0)
        topics = catalog(tmp_path)
        await topics.load()
        assert not topics.get("old").settings.diskless

    asyncio.run(scenario())
