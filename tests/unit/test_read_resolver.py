"""Entries back into batch bytes (reads/resolver.py): one resolver per entry kind, entries of
one kind resolved together, outcomes in entry order, a failure confined to its entries."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Sequence

import pytest

from broker.log.coordinates import decode_ref, encode_ref, make_ref
from broker.log import EntryKind, LogEntry
from broker.protocol.batch import BATCH_HEADER_SIZE, parse_header
from broker.reads import resolver
from broker.reads.resolver import SERVED_KINDS, batch_pieces
from tests.unit.test_partition import batch


class FakeWalReader:
    """Serves every ref as a body of its length filled with a byte, except object "gone"."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    async def read_each(self, refs: Sequence) -> list:  # type: ignore[type-arg]
        self.calls.append([ref.object_id for ref in refs])
        return [
            KeyError(ref.object_id) if ref.object_id == "gone" else memoryview(b"\x07" * ref.length) for ref in refs
        ]


def records_entry(seq: int) -> LogEntry:
    data = batch(seq)
    return LogEntry(EntryKind.RECORDS, parse_header(data), data)


def coordinates_entry(seq: int, object_id: str) -> LogEntry:
    head = bytes(batch(seq)[:BATCH_HEADER_SIZE])
    data = memoryview(head + encode_ref(make_ref(object_id, 0, 100)))
    return LogEntry(EntryKind.COORDINATES, parse_header(data), data)


def test_every_kind_a_reader_serves_has_a_resolver() -> None:
    served = {
        EntryKind.RECORDS,
        EntryKind.COORDINATES,
        EntryKind.REMOTE_SEGMENT,
        EntryKind.MODE,
    }  # markers: control batches
    assert SERVED_KINDS == served == set(resolver.RESOLVERS)


def test_mixed_kinds_resolve_in_order_with_one_wal_read_and_failures_confined() -> None:
    reader = FakeWalReader()
    entries = [coordinates_entry(0, "a"), records_entry(2), coordinates_entry(4, "gone"), coordinates_entry(6, "a")]
    outcomes = asyncio.run(batch_pieces(SimpleNamespace(wal_reader=reader), entries))
    assert reader.calls == [["a", "gone", "a"]], "all coordinates of a call are read together"
    assert outcomes[0] == [entries[0].data[:BATCH_HEADER_SIZE], memoryview(b"\x07" * (100 - BATCH_HEADER_SIZE))]
    assert outcomes[1] == [entries[1].data]
    assert isinstance(outcomes[2], KeyError) and not isinstance(outcomes[3], Exception)
    assert decode_ref(entries[3].payload).object_id == "a"


def test_no_wal_read_without_coordinates_and_a_kind_without_resolver_is_no_batch() -> None:
    reader = FakeWalReader()
    marker = SimpleNamespace(kind=99)
    entries = [records_entry(0), marker]
    assert asyncio.run(batch_pieces(SimpleNamespace(wal_reader=reader), entries)) == [[entries[0].data], []]  # type: ignore[list-item]
    assert reader.calls == []


def test_a_new_kind_plugs_in_through_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    async def tiered(sources, entries):  # type: ignore[no-untyped-def]
        return [[b"tiered:%d" % entry.kind] for entry in entries]

    monkeypatch.setitem(resolver.RESOLVERS, 99, tiered)  # type: ignore[index]
    entries = [SimpleNamespace(kind=99), records_entry(0)]
    outcomes = asyncio.run(batch_pieces(SimpleNamespace(wal_reader=FakeWalReader()), entries))  # type: ignore[arg-type]
    assert outcomes == [[b"tiered:99"], [entries[1].data]]  # type: ignore[union-attr]
