"""Located batches back into the Kafka batches they stand for, whatever holds the bytes.

Each kind of located read has a resolver: partition-log entries by their entry kind in
`RESOLVERS`, spans of storage below the log (the tiered `TieredSpan`) in `SPAN_RESOLVERS`; a new tier adds its kind and resolver there, and every
reader (Fetch, ListOffsets, the replica read service, all through reads/partition_reader.py)
serves it. Partition-log entries are resolved by their entry kind:
a RECORDS entry is the batch itself; a COORDINATES entry is the batch's authoritative 61-byte
header (offsets, leader epoch, any LogAppendTime stamp as committed) plus where the bytes are,
its batch that header followed by the WAL object's bytes after the first 61. A `TieredSpan`
(offsets below the local log, KIP-405) is a range of a tiered segment, resolved to the whole
batches it holds from the store (broker/tiering/reader.py). All items of one kind in one call are
resolved together, so batches of one WAL object share coalesced GETs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from ..wal.reader import ReadFailure, WalReader
from ..log import EntryKind, LogEntry
from ..log.coordinates import decode_ref
from ..log.remote_segments import RemoteSegment
from ..tiering.reader import TieredReader
from ..protocol.batch import BATCH_HEADER_SIZE

Pieces = list[memoryview | bytes]  # a batch (a tiered span: its batches) as buffers to concatenate
Outcome = Pieces | ReadFailure

TIERED = "tiered"  # the kind of a TieredSpan: not a partition-log entry kind, nothing on disk


class ReadSources(Protocol):
    """Where batch bytes that are not in the partition log come from (the broker's readers)."""

    @property
    def wal_reader(self) -> WalReader: ...

    @property
    def tiered_reader(self) -> TieredReader: ...


@dataclass(frozen=True, slots=True)
class TieredSpan:
    """Batches of a tiered segment from the one holding `offset`, KIP-74-sized to `limit`
    (the first whole when `first_whole`), below `upper` when set (read_committed: the last
    stable offset)."""

    kind: ClassVar[Hashable] = TIERED
    topic_id: str
    index: int
    segment: RemoteSegment
    offset: int
    limit: int
    first_whole: bool
    upper: int | None


KindResolver = Callable[[ReadSources, Sequence[Any]], Awaitable[list[Outcome]]]


async def _records(sources: ReadSources, entries: Sequence[LogEntry]) -> list[Outcome]:
    return [[entry.data] for entry in entries]


async def _coordinates(sources: ReadSources, entries: Sequence[LogEntry]) -> list[Outcome]:
    bodies = await sources.wal_reader.read_each([decode_ref(entry.payload) for entry in entries])
    return [
        body if isinstance(body, Exception) else [entry.data[:BATCH_HEADER_SIZE], body[BATCH_HEADER_SIZE:]]
        for entry, body in zip(entries, bodies)
    ]


async def _tiered(sources: ReadSources, spans: Sequence[TieredSpan]) -> list[Outcome]:
    return [await _tiered_span(sources.tiered_reader, span) for span in spans]


async def _tiered_span(reader: TieredReader, span: TieredSpan) -> Outcome:
    """One span's batches, one buffer each (whole batches: their headers parse)."""
    try:
        batches = await reader.read(span.topic_id, span.index, span.segment, span.offset, max(span.limit, 0))
    except Exception as exc:  # noqa: BLE001 - the store's errors or a damaged segment: this span only
        return exc
    if span.upper is not None:
        batches = [b for b in batches if b[0].base_offset < span.upper]
    if batches and not span.first_whole and batches[0][0].size > span.limit:
        batches = []
    return [view for _header, view in batches]


RESOLVERS: dict[EntryKind, KindResolver] = {  # partition-log entries, by their entry kind
    EntryKind.RECORDS: _records,
    EntryKind.COORDINATES: _coordinates,
    EntryKind.REMOTE_SEGMENT: _records,  # a control batch: served, and skipped by clients
    EntryKind.MODE: _records,  # likewise
}
SERVED_KINDS = frozenset(RESOLVERS)  # the entry kinds that stand for batches a reader serves
SPAN_RESOLVERS: dict[Hashable, KindResolver] = {TIERED: _tiered}  # spans of what lies below the log


def _resolver(kind: Hashable) -> KindResolver | None:
    return RESOLVERS.get(kind) or SPAN_RESOLVERS.get(kind)  # type: ignore[call-overload]


async def batch_pieces(sources: ReadSources, items: Sequence[LogEntry | TieredSpan]) -> list[Outcome]:
    """One outcome per item, in order: the buffers of its batch or batches (empty for entry
    kinds that are not batches), or the reader's error for what could not be read
    (ObjectStoreError, WalReadError, TieredReadError). A failure touches only the items whose
    bytes it concerns."""
    positions: dict[Hashable, tuple[KindResolver, list[int]]] = {}
    for position, item in enumerate(items):
        resolve = _resolver(item.kind)
        if resolve is not None:
            positions.setdefault(item.kind, (resolve, []))[1].append(position)
    outcomes: list[Outcome] = [[] for _item in items]
    for resolve, at in positions.values():
        for position, outcome in zip(at, await resolve(sources, [items[p] for p in at])):
            outcomes[position] = outcome
    return outcomes
