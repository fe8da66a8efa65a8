"""A topic's mode (diskless.enable) is recorded when it is created, survives changes of
diskless.default and restarts, changes only when set explicitly (an online switch, which
remembers the creation mode), and topics stored before diskless topics existed stay classic."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from broker.clock import SystemClock
from broker.config import load_config
from broker.metadata import records
from broker.metadata.local import LocalMetadataStore
from broker.protocol.errors import ApiError, ErrorCode
from broker.topics import TopicCatalog


def catalog(tmp_path: Path, **settings: str) -> TopicCatalog:
    config = load_config(environ={}, overrides={"data.dir": str(tmp_path), **settings})
    return TopicCatalog(LocalMetadataStore(tmp_path / "store.json", SystemClock()), config, new_uuid=uuid.uuid4)


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


def test_changing_the_mode_switches_the_topic_and_remembers_the_creation_mode(tmp_path: Path) -> None:
    async def scenario() -> None:
        topics = catalog(tmp_path)
        await topics.load()
        await topics.create(topics.prepare("d", 1, {}), {0: [0]})
        updated = await topics.set_configs("d", {"retention.ms": "1000"})  # AlterConfigs without the key
        assert updated.settings.diskless and updated.settings.log.retention_ms == 1000
        switched = await topics.set_configs("d", {"diskless.enable": "false"})
        assert not switched.settings.diskless and switched.born_diskless  # partitions without a marker: diskless
        reloaded = catalog(tmp_path)
        await reloaded.load()
        assert not reloaded.get("d").settings.diskless and reloaded.get("d").born_diskless
        with pytest.raises(ApiError):
            topics.check_configs("d", {"diskless.enable": "maybe"})

    asyncio.run(scenario())


def test_a_topic_stored_before_switching_existed_was_created_in_its_current_mode(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = LocalMetadataStore(tmp_path / "store.json", SystemClock())
        configs = {"diskless.enable": "true"}
        old = records.TopicRecord(records.RECORD_VERSION, "old", "00000000-0000-0000-0000-000000000002", 1, configs)
        await store.put(records.topic_key("old"), records.encode(old), expected_revision=0)
        topics = catalog(tmp_path)
        await topics.load()
        switched = await topics.set_configs("old", {"diskless.enable": "false"})
        assert switched.born_diskless and not switched.settings.diskless
        stored = records.decode((await topics.store.get(records.topic_key("old"))).value, records.TopicRecord)
        assert stored.created_diskless is True

    asyncio.run(scenario())


def test_internal_topics_stay_classic(tmp_path: Path) -> None:
    async def scenario() -> None:
        topics = catalog(tmp_path)
        await topics.load()
        prepared = topics.prepare("__consumer_offsets", 1, {"diskless.enable": "false"})
        prepared.internal = True
        await topics.create(prepared, {0: [0]})
        with pytest.raises(ApiError) as info:
            await topics.set_configs("__consumer_offsets", {"diskless.enable": "true"})
        assert info.value.code == ErrorCode.INVALID_CONFIG

    asyncio.run(scenario())


def test_topics_stored_before_diskless_existed_load_as_classic(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = LocalMetadataStore(tmp_path / "store.json", SystemClock())
        old = records.TopicRecord(records.RECORD_VERSION, "old", "00000000-0000-0000-0000-000000000001", 1, {}, False)
        await store.put(records.topic_key("old"), records.encode(old), expected_revision=0)
        topics = catalog(tmp_path)
        await topics.load()
        assert not topics.get("old").settings.diskless

    asyncio.run(scenario())
