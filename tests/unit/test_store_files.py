"""The embedded metadata store's files (broker/metadata/store_files.py): a change costs a
journal record, not a rewrite of the whole state (issue 28: 2 MB per change at 6,700
partitions), and whatever was acknowledged survives a crash at any byte of an append."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pytest

from broker.clock import SystemClock
from broker.metadata.local import LocalMetadataStore
from broker.metadata import store_files
from broker.metadata.store import KeyValue
from broker.metadata.store_files import JOURNAL_SUFFIX, StoreFiles

VALUE = b"v" * 300  # about a partition state's size


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def open_store(path: Path) -> LocalMetadataStore:
    return LocalMetadataStore(path, SystemClock())


async def contents(path: Path) -> dict[str, bytes]:
    store = await open_store(path)
    try:
        return {kv.key: kv.value for kv in await store.list("")}
    finally:
        await store.close()


def journal(path: Path) -> Path:
    return path.with_name(path.name + JOURNAL_SUFFIX)


def test_a_change_appends_a_record_in_proportion_to_itself(tmp_path: Path) -> None:
    path = tmp_path / "store.json"

    async def scenario() -> None:
        store = await open_store(path)
        for i in range(600):  # a 0.2 MB state
            await store.put(f"partitions/{i:05d}", VALUE)
        snapshot_before = path.stat().st_size
        journal_before = journal(path).stat().st_size
        await store.put("partitions/00007", b"x" * 300)
        assert journal(path).stat().st_size - journal_before < 400, "one record, not the whole state"
        assert path.stat().st_size == snapshot_before, "the snapshot is not rewritten"
        await store.delete("partitions/00008")
        await store.close()

    run(scenario())
    got = run(contents(path))
    assert len(got) == 599 and got["partitions/00007"] == b"x" * 300 and "partitions/00008" not in got


def test_the_journal_is_folded_into_the_snapshot_once_it_outgrows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.json"
    monkeypatch.setattr(store_files, "COMPACT_MIN_BYTES", 32 << 10)

    async def scenario() -> None:
        store = await open_store(path)
        for i in range(200):  # 64 KiB of records, over a 16 KiB snapshot
            await store.put(f"k{i % 50}", VALUE + str(i).encode())
            assert journal(path).stat().st_size <= max(32 << 10, path.stat().st_size) + 400
        assert path.stat().st_size > 50 * len(VALUE), "folded into the snapshot"
        await store.close()

    run(scenario())
    got = run(contents(path))
    assert len(got) == 50 and all(value.startswith(VALUE) for value in got.values())


def test_a_crash_at_any_byte_of_an_append_keeps_every_acknowledged_change(tmp_path: Path) -> None:
    path = tmp_path / "store.json"

    async def write() -> None:
        store = await open_store(path)
        for i in range(5):
            await store.put(f"k{i}", f"acknowledged-{i}".encode())
        await store.close()

    run(write())
    whole = journal(path).read_bytes()
    run(write_one_more(path))
    longer = journal(path).read_bytes()
    for cut in range(len(whole), len(longer)):  # the sixth append, torn at every byte
        journal(path).write_bytes(longer[:cut])
        got = run(contents(path))
        assert got == {f"k{i}": f"acknowledged-{i}".encode() for i in range(5)}, cut
        assert journal(path).stat().st_size == len(whole), "cut back to the last whole record"
    corrupt = bytearray(longer)
    corrupt[-1] ^= 0xFF  # a whole record whose checksum fails
    journal(path).write_bytes(bytes(corrupt))
    assert "k5" not in run(contents(path))
    run(write_one_more(path))  # appends go on after the cut
    assert run(contents(path))["k5"] == b"sixth"


async def write_one_more(path: Path) -> None:
    store = await open_store(path)
    await store.put("k5", b"sixth")
    await store.close()


def test_a_crash_between_the_snapshot_and_emptying_the_journal_replays_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    files = StoreFiles(path)
    revision, entries = files.load()
    for rev in range(1, 4):
        entries[f"k{rev}"] = KeyValue(f"k{rev}", b"v", rev)
        files.append(rev, [entries[f"k{rev}"]], [], entries)
    stale_journal = journal(path).read_bytes()
    files.compact(3, entries)
    files.close()
    journal(path).write_bytes(stale_journal)  # the journal was not emptied yet
    again = StoreFiles(path)
    assert again.load() == (3, entries)
    entries.pop("k1")
    again.append(4, [], ["k1"], entries)
    again.close()
    assert StoreFiles(path).load() == (4, entries)


def test_a_version_1_store_is_read_and_rewritten_as_version_2(tmp_path: Path) -> None:
    """What brokers before the journal wrote: the whole store in one file, version 1."""
    path = tmp_path / "store.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "revision": 7,
                "entries": {"cluster": {"key": "cluster", "value": "YWJj", "revision": 3}},
            }
        )
    )
    assert run(contents(path)) == {"cluster": b"abc"}
    assert json.loads(path.read_text())["version"] == 2, "an older broker now refuses the directory"
    path.write_text(json.dumps({"version": 3, "revision": 1, "entries": {}}))
    with pytest.raises(ValueError, match="metadata format version 3 is not supported"):
        run(contents(path))


def test_snapshot_and_journal_records_decode_with_their_schemas(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    run(write_one_more(path))
    snapshot = msgspec.json.decode(path.read_bytes())
    assert snapshot == {"version": 2, "revision": 0, "entries": {}}
    assert journal(path).stat().st_size > 8
