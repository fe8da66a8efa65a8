"""One partition's read, wherever its batches are: the one read path of Fetch, the replica
read service and ListOffsets' tiered lookups (Kafka's ReplicaManager.readFromLog over
UnifiedLog; Inkless's Reader under its FetchHandler).

`PartitionReader.read` chooses the source of a partition's batches itself: the answer a
replica elsewhere sent (reads/remote.py, for a partition this broker does not host, or hosts
as a follower that does not hold the offset), else the hosted replica (replica_policy.py):
its local log, or below it the tiered segment holding the offset. It fences by leader epoch
(fencing.py), computes the isolation bound once (the last stable offset for
read_committed, else the high watermark), sizes by KIP-74 (the first batch whole when
`first_whole`, then nothing past `max_bytes`) and lists the aborted transactions a
read_committed reader must be told of. The answer, `PartitionRead`, says where the batches
are (partition-log entries, or a `TieredSpan`); `resolve` reads the bytes for many reads at
once through the resolver registry (resolver.py: WAL objects with coalesced GETs, tiered
segments from the store), so a new tier is a new kind with its resolver here, not a handler
change. Reading bytes after locating them lets Fetch size the whole request on the
entries' headers first, as Kafka slices its log before sending.

A batch that cannot be read (its object missing or damaged) ends its partition's answer
there: the batches before it are served, and a partition with none gets the reader's error
through wire_error (KAFKA_STORAGE_ERROR, retriable).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..log import LogEntry, OffsetOutOfRangeError
from ..log.remote_segments import RemoteSegment
from ..partition_ids import TopicIdPartition
from ..protocol.batch import parse_header
from ..protocol.errors import ApiError, ErrorCode
from ..wire_errors import wire_error
from .fencing import check_leader_epoch
from .remote import RemoteAnswers, RemoteRead, RemoteSite, Wanted, read_remote
from .replica_policy import fetch_replica, fetches_elsewhere, is_authoritative
from .resolver import SERVED_KINDS, ReadSources, TieredSpan, batch_pieces

if TYPE_CHECKING:
    from ..partition import Partition
    from ..topics import Topic

READ_COMMITTED = 1  # isolation level
Aborted = tuple[int, int, int]  # an aborted transaction: producer id, first offset, last offset
logger = logging.getLogger(__name__)


class ReaderSite(RemoteSite, ReadSources, Protocol):
    """What the reader uses of the broker: the replica policy's view, the RPC pool for reads
    elsewhere, and the WAL and tiered readers for the bytes."""


@dataclass(frozen=True, slots=True)
class ReadTarget:
    """A partition as the asker names it (`current_leader_epoch` < 0: not fenced)."""

    topic: Topic
    index: int
    current_leader_epoch: int = -1


@dataclass(slots=True)
class PartitionRead:
    """One partition's answer: its offsets, where its batches are (`entries` of a partition
    log or a tiered `span`, never both), the aborted transactions for read_committed (None
    for read_uncommitted) and, once resolved, `records`; or an `error`."""

    index: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    entries: list[LogEntry] = field(default_factory=list)
    span: TieredSpan | None = None
    aborted: list[Aborted] | None = None
    wait_key: Hashable | None = None  # a hosted replica's: an append there may wake a long poll
    error: ApiError | None = None
    records: bytes = b""
    replica: Partition | None = None  # hosted: a span's aborted transactions come from its indexes
    replica_aborted: list[Aborted] = field(default_factory=list)  # else from the remote answer

    @property
    def size(self) -> int:
        """What the read counts against a request's byte budget (a span: an upper bound, its
        batches are sized when read)."""
        if self.entries:
            return sum(e.header.size for e in self.entries)
        return max(self.span.limit, 1) if self.span is not None else 0

    @property
    def found(self) -> bool:
        """Whether there are batches to resolve."""
        return bool(self.entries) or self.span is not None


class PartitionReader:
    def __init__(self, site: ReaderSite, remote: RemoteAnswers | None = None) -> None:
        self._site = site
        self._remote = remote or {}  # answers of replicas elsewhere, by (topic name, partition)

    def elsewhere(self, topic: Topic, index: int, offset: int, max_bytes: int, isolation: int) -> Wanted | None:
        """The remote read to ask for when this broker cannot serve the partition itself
        (replica_policy.fetches_elsewhere), else None."""
        if not fetches_elsewhere(self._site, topic, index, offset):
            return None
        return (topic.name, index, str(topic.topic_id), offset, max_bytes, isolation)

    async def read_elsewhere(self, wanted: list[Wanted], max_wait_ms: int) -> RemoteAnswers:
        """The replicas' answers for `wanted` (long-polled there up to `max_wait_ms`)."""
        return await read_remote(self._site, wanted, max_wait_ms)

    def read(self, target: ReadTarget, offset: int, max_bytes: int, isolation: int, first_whole: bool) -> PartitionRead:
        """Locate the partition's batches from `offset` (bytes come with `resolve`)."""
        replica: Partition | None = None
        try:
            answer = self._remote.get((target.topic.name, target.index))
            if answer is not None:
                return self._answered(target, answer, offset, max_bytes, isolation, first_whole)
            replica = fetch_replica(self._site, target.topic, target.index)
            check_leader_epoch(target.current_leader_epoch, replica.leader_epoch)
            return read_replica(replica, offset, max_bytes, isolation, first_whole)
        except OffsetOutOfRangeError:
            return failed(target.index, ApiError(ErrorCode.OFFSET_OUT_OF_RANGE), replica)
        except ApiError as exc:
            return failed(target.index, exc)

    def _answered(
        self, target: ReadTarget, answer: RemoteRead, offset: int, limit: int, isolation: int, first_whole: bool
    ) -> PartitionRead:
        """A read from what a replica elsewhere answered, fenced by the epoch this broker
        knows as a replica would be, and sized against this request's budget."""
        topic, index = target.topic, target.index
        state = self._site.view.partitions.get(TopicIdPartition.of(topic.topic_id, index))
        if state is not None:
            check_leader_epoch(target.current_leader_epoch, state.record.leader_epoch)
        if answer.error_code:
            raise ApiError(ErrorCode(answer.error_code), "remote replica read failed")
        stable = answer.last_stable_offset if answer.last_stable_offset >= 0 else answer.high_watermark
        upper = isolation_bound(isolation, stable, answer.high_watermark)
        span = None
        if answer.tiered is not None:  # read the segment here, in this broker's AZ
            span = _span(str(topic.topic_id), index, answer.tiered, offset, limit, first_whole, isolation, upper)
        entries = [e for e in within(answer.entries, limit, first_whole) if e.base_offset < upper]
        aborted = None
        if isolation == READ_COMMITTED:
            aborted = starting_below(answer.aborted, entries[-1].last_offset + 1) if entries else []
        return PartitionRead(
            index,
            answer.high_watermark,
            stable,
            answer.log_start_offset,
            *_served(entries, span),
            aborted,
            replica_aborted=answer.aborted,
        )

    async def resolve(self, reads: Sequence[PartitionRead]) -> None:
        """Fill each read's `records` (or `error`): entries all together (batches of one WAL
        object share GETs), each tiered span concurrently with them."""
        spans = asyncio.gather(*(self._resolve_span(read) for read in reads if read.span is not None))
        local = [read for read in reads if read.entries]
        outcomes = iter(await batch_pieces(self._site, [e for read in local for e in read.entries]))
        await spans
        for read in local:
            served: list[memoryview | bytes] = []
            failure: Exception | None = None
            for outcome in (next(outcomes) for _entry in read.entries):
                if failure is not None:
                    continue
                if isinstance(outcome, Exception):
                    failure = outcome
                else:
                    served += outcome
            if failure is not None and not served:
                logger.warning("fetch of partition %d could not read its WAL object: %s", read.index, failure)
                read.error = wire_error(failure)
            read.records = b"".join(served)

    async def _resolve_span(self, read: PartitionRead) -> None:
        """A tiered span's batches, with the aborted transactions of what it serves for
        read_committed; a failure fails this partition only."""
        assert read.span is not None
        try:
            [pieces] = await batch_pieces(self._site, [read.span])
            if isinstance(pieces, Exception):
                raise pieces
            if read.aborted is not None and pieces:
                read.aborted = await self._span_aborted(read, parse_header(pieces[-1]).last_offset + 1)
        except Exception as exc:  # noqa: BLE001 - the store's errors or a damaged segment: this partition only
            logger.warning(
                "fetch of partition %d could not read tiered segment %s: %s",
                read.index,
                read.span.segment.segment_id,
                exc,
            )
            read.error = wire_error(exc)
            return
        read.records = b"".join(pieces)

    async def _span_aborted(self, read: PartitionRead, upper: int) -> list[Aborted]:
        """The aborted transactions overlapping [offset, upper): from the hosted replica's
        tiered and local indexes, or from what the replica answered (for the whole segment:
        only those that start below `upper`)."""
        assert read.span is not None
        if read.replica is None:
            return starting_below(read.replica_aborted, upper)
        found = await self._site.tiered_reader.aborted_transactions(read.replica, read.span.offset, upper)
        return [(t.producer_id, t.first_offset, t.last_offset) for t in found]

    async def tiered_batches(
        self, replica: Partition, segment: RemoteSegment, offset: int, max_bytes: int
    ) -> list[memoryview | bytes]:
        """The whole batches of `segment` from the one holding `offset`, up to `max_bytes`
        (the first whole), one buffer each; raises the reader's error."""
        span = TieredSpan(replica.topic_id, replica.index, segment, offset, max_bytes, True, None)
        [pieces] = await batch_pieces(self._site, [span])
        if isinstance(pieces, Exception):
            raise pieces
        return pieces


def read_replica(replica: Partition, offset: int, max_bytes: int, isolation: int, first_whole: bool) -> PartitionRead:
    """A read of a hosted replica: its local log, or the tiered segment holding `offset`
    below it. A follower whose log no longer holds the offset (truncated since the fetch
    began) serves nothing rather than OFFSET_OUT_OF_RANGE (OffsetOutOfRangeError, raised by
    the leader only): only the leader may say that, and the next fetch asks it."""
    log = replica.log
    stable = replica.last_stable_offset
    upper = isolation_bound(isolation, stable, log.high_watermark)
    segment = below_local_log(replica, offset)
    span = None
    entries: list[LogEntry] = []
    if segment is not None:
        span = _span(replica.topic_id, replica.index, segment, offset, max_bytes, first_whole, isolation, upper)
    else:
        entries = _read_local(replica, offset, max_bytes, first_whole, upper)
    aborted = None
    if isolation == READ_COMMITTED:
        aborted = (
            [
                (t.producer_id, t.first_offset, t.last_offset)
                for t in replica.aborted_transactions(offset, entries[-1].last_offset + 1)
            ]
            if entries
            else []
        )
    return PartitionRead(
        replica.index,
        log.high_watermark,
        stable,
        replica.log_start_offset,
        *_served(entries, span),
        aborted,
        wait_key=replica.key,
        replica=replica,
    )


def isolation_bound(isolation: int, stable: int, high_watermark: int) -> int:
    """Where a reader's view of the log ends: the last stable offset for read_committed,
    else the high watermark (Kafka's `FetchIsolation`)."""
    return stable if isolation == READ_COMMITTED else high_watermark


def below_local_log(replica: Partition, offset: int) -> RemoteSegment | None:
    """The tiered segment holding `offset`, if the offset is below the replica's local log."""
    if offset >= replica.log.log_start_offset:
        return None
    return replica.remote_segments.segment_for(offset)


def failed(index: int, error: ApiError, replica: Partition | None = None) -> PartitionRead:
    """An error answer, with the hosted replica's offsets when there is one."""
    if replica is None:
        return PartitionRead(index, error=error)
    return PartitionRead(
        index, replica.log.high_watermark, replica.last_stable_offset, replica.log_start_offset, error=error
    )


def starting_below(aborted: list[Aborted], upper: int) -> list[Aborted]:
    """A replica's aborted transactions that start below `upper`: it answered for a range
    that may reach further than what is served."""
    return [txn for txn in aborted if txn[1] < upper]


def within(entries: list[LogEntry], limit: int, first_whole: bool) -> list[LogEntry]:
    """KIP-74 sizing of entries a replica sent: the first whole when `first_whole`, then
    nothing past `limit` (the replica sized them by its own, per-partition limit)."""
    taken: list[LogEntry] = []
    size = 0
    for entry in entries:
        if size + entry.header.size > limit and not (first_whole and not taken):
            break
        taken.append(entry)
        size += entry.header.size
    return taken


def _span(
    topic_id: str,
    index: int,
    segment: RemoteSegment,
    offset: int,
    limit: int,
    first_whole: bool,
    isolation: int,
    upper: int,
) -> TieredSpan:
    """A tiered read, cut at the isolation bound for read_committed only (the segment lies
    below the local log, whose start a follower's high watermark may not have reached)."""
    return TieredSpan(
        topic_id, index, segment, offset, limit, first_whole, upper if isolation == READ_COMMITTED else None
    )


def _served(entries: list[LogEntry], span: TieredSpan | None) -> tuple[list[LogEntry], TieredSpan | None]:
    """The entries that stand for batches, or else the span."""
    served = [e for e in entries if e.kind in SERVED_KINDS]
    return served, None if served else span


def _read_local(replica: Partition, offset: int, limit: int, first_whole: bool, upper: int) -> list[LogEntry]:
    """Entries below `upper` from `offset`, sized by KIP-74."""
    log = replica.log
    try:
        if first_whole:
            return log.read(offset, max(limit, 0), upper)
        if limit <= 0:
            return []
        entries = log.read(offset, limit, upper)
    except OffsetOutOfRangeError:
        if not is_authoritative(replica):
            return []
        raise
    return [] if entries and entries[0].header.size > limit else entries
