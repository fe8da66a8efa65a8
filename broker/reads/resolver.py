"""Partition-log entries back into the Kafka batches they stand for, whatever holds the bytes.

Each entry kind that stands for a batch has a resolver in `RESOLVERS`; a new tier (KIP-405
remote segments, say) adds its kind and resolver there, and every reader (Fetch, ListOffsets,
the replica read service) serves it. A RECORDS entry is the batch itself. A COORDINATES entry
is the batch's authoritative 61-byte header (offsets, leader epoch, any LogAppendTime stamp as
committed) plus where the bytes are; its batch is that header followed by the WAL object's
bytes after the first 61. All entries of one kind in one call are resolved together, so
batches of one WAL object share coalesced GETs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from ..log.coordinates import decode_ref
from ..diskless.reader import ReadFailure, WalReader
from ..log import EntryKind, LogEntry
from ..protocol.batch import BATCH_HEADER_SIZE

Pieces = list[memoryview | bytes]  # a batch as buffers to concatenate
Outcome = Pieces | ReadFailure


class ReadSources(Protocol):
    """Where batch bytes that are not in the partition log come from (the broker's readers)."""

    @property
    def wal_reader(self) -> WalReader: ...


KindResolver = Callable[[ReadSources, Sequence[LogEntry]], Awaitable[list[Outcome]]]


async def _records(sources: ReadSources, entries: Sequence[LogEntry]) -> list[Outcome]:
    return [[entry.data] for entry in entries]


async def _coordinates(sources: ReadSources, entries: Sequence[LogEntry]) -> list[Outcome]:
    bodies = await sources.wal_reader.read_each([decode_ref(entry.payload) for entry in entries])
    return [
        body if isinstance(body, Exception) else [entry.data[:BATCH_HEADER_SIZE], body[BATCH_HEADER_SIZE:]]
        for entry, body in zip(entries, bodies)
    ]


RESOLVERS: dict[EntryKind, KindResolver] = {
    EntryKind.RECORDS: _records,
    EntryKind.COORDINATES: _coordinates,
    EntryKind.REMOTE_SEGMENT: _records,  # a control batch: served, and skipped by clients
    EntryKind.MODE: _records,  # likewise
}
SERVED_KINDS = frozenset(RESOLVERS)  # the entry kinds that stand for batches a reader serves


async def batch_pieces(sources: ReadSources, entries: Sequence[LogEntry]) -> list[Outcome]:
    """One outcome per entry, in order: the buffers of its batch (empty for kinds that are
    not batches), or the reader's error for a batch that could not be read (ObjectStoreError,
    WalReadError). A failure touches only the entries whose bytes it concerns."""
    positions: dict[EntryKind, list[int]] = {}
    for position, entry in enumerate(entries):
        if entry.kind in RESOLVERS:
            positions.setdefault(entry.kind, []).append(position)
    outcomes: list[Outcome] = [[] for _entry in entries]
    for kind, at in positions.items():
        for position, outcome in zip(at, await RESOLVERS[kind](sources, [entries[p] for p in at])):
            outcomes[position] = outcome
    return outcomes
