"""Fetch: read committed entries (below the high watermark) of each partition, long
polling until `min_bytes` are available or `max_wait_ms` passes; an append wakes parked
fetches at once. Sizes follow KIP-74: the first batch of the response is returned whole
even above `partition_max_bytes`/`max_bytes` so consumers always progress; after that both
limits are hard. Fetch sessions (KIP-227) are declined with session id 0, which makes
clients send full fetches, as the protocol allows.

Diskless entries are resolved after the sizing pass, all partitions together, so batches of
one WAL object are read with coalesced ranged GETs through the object cache. Each batch is
served as the entry's header (baseOffset, partitionLeaderEpoch and any LogAppendTime stamp as
committed) followed by the object's bytes after the first 61.

isolation_level READ_COMMITTED (1) reads up to the partition's last stable offset instead of
its high watermark, and answers the aborted transactions overlapping the returned range
(the partition's aborted-transaction index, log/txn_index.py, and below the local log the
tiered segments' indexes, offload/reader.py); every replica that serves fetches keeps its
own LSO (from its producer state and the high watermark it knows), and a replica read for a
broker without a replica carries both (reads/read_service.py).
Transaction markers are ordinary control batches in the log: served, and skipped by clients.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Hashable

from kafka.protocol.consumer import FetchRequest, FetchResponse

from ..context import HandlerContext
from ..log import LogEntry, OffsetOutOfRangeError
from ..log.remote_segments import RemoteSegment
from ..partition_ids import TopicIdPartition
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from ..reads.fencing import check_leader_epoch
from ..reads.replica_policy import fetch_replica, fetches_elsewhere, is_authoritative
from ..reads.resolver import SERVED_KINDS, batch_pieces
from .common import resolve_topic
from ..reads.remote import RemoteRead, Wanted, read_remote
from .registry import api
from ..wire_errors import wire_error

if TYPE_CHECKING:
    from ..partition import Partition
    from ..topics import Topic

_Topic = FetchResponse.FetchableTopicResponse
_Partition = _Topic.PartitionData
_Aborted = _Partition.AbortedTransaction
READ_COMMITTED = 1
logger = logging.getLogger(__name__)


@api(ApiKey.FETCH)
async def handle(broker: HandlerContext, header: RequestHeader, request: FetchRequest) -> FetchResponse:
    if header.api_version >= 11:
        broker.router.racks.remember(header.peer, request.rack_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
    wanted_remote = _remote_partitions(broker, request)
    only_remote = len(wanted_remote) == sum(len(t.partitions) for t in request.topics)
    remote: dict[tuple[str, int], RemoteRead] | None = None
    while True:
        if wanted_remote and remote is None:  # a lone remote read long-polls at the replica
            wait_ms = int(max(deadline - loop.time(), 0) * 1000) if only_remote else 0
            remote = await read_remote(broker, wanted_remote, wait_ms)
        topics, total_bytes, has_error, keys, found = _read_all(broker, request, remote or {})
        remaining = deadline - loop.time()
        if total_bytes >= request.min_bytes or has_error or remaining <= 0 or broker.stopping or only_remote:
            await _resolve(broker, found)
            broker.metrics.fetched_bytes.inc(total_bytes)
            return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
        if wanted_remote:
            remote = await _wait_mixed(broker, wanted_remote, keys, remaining)
        else:
            await broker.waiters.wait(keys, remaining)


async def _wait_mixed(
    broker: HandlerContext, wanted_remote: list[Wanted], keys: list[Hashable], remaining: float
) -> dict[tuple[str, int], RemoteRead] | None:
    """Long-poll the remote partitions at their replicas while waiting for local appends:
    whichever comes first wakes the fetch, so a commit on either side reaches a tailing
    consumer at once. Returns the remote answer if it came first (None: read them again)."""
    polled = asyncio.ensure_future(read_remote(broker, wanted_remote, int(remaining * 1000)))
    local = asyncio.ensure_future(broker.waiters.wait(keys, remaining))
    try:
        await asyncio.wait((polled, local), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (polled, local):
            if not task.done():
                task.cancel()
    return polled.result() if polled.done() and not polled.cancelled() else None


def _remote_partitions(broker: HandlerContext, request: FetchRequest) -> list[Wanted]:
    """Partitions of the request that this broker cannot serve itself (reads/replica_policy.py)."""
    wanted = []
    for fetch_topic in request.topics:
        try:
            topic = resolve_topic(broker, fetch_topic.topic, fetch_topic.topic_id)
        except ApiError:
            continue
        for p in fetch_topic.partitions:
            if fetches_elsewhere(broker, topic, p.partition, p.fetch_offset):
                wanted.append(
                    (
                        topic.name,
                        p.partition,
                        str(topic.topic_id),
                        p.fetch_offset,
                        p.partition_max_bytes,
                        request.isolation_level,
                    )
                )
    return wanted


# (partition response, its entries or its tiered read): records filled in by _resolve
Found = list[tuple[Any, "list[LogEntry] | TieredRead"]]


async def _resolve(broker: HandlerContext, found: Found) -> None:
    """Fill each partition's records: classic entries as stored, diskless ones from WAL objects,
    offsets below the local log from tiered segments. A batch that cannot be read (its object
    missing or damaged) ends its partition's answer there: the batches before it are served,
    and a partition with none gets KAFKA_STORAGE_ERROR (retriable); every other partition is
    served as usual."""
    tiered = [(response, read) for response, read in found if isinstance(read, TieredRead)]
    local = [(response, entries) for response, entries in found if not isinstance(entries, TieredRead)]
    reads = asyncio.gather(*(_read_tiered(broker, response, read) for response, read in tiered))
    outcomes = iter(await batch_pieces(broker, [e for _response, entries in local for e in entries]))
    await reads
    for response, entries in local:
        served: list[memoryview | bytes] = []
        failure: Exception | None = None
        for outcome in (next(outcomes) for _entry in entries):
            if failure is not None:
                continue
            if isinstance(outcome, Exception):
                failure = outcome
            else:
                served += outcome
        if failure is not None and not served:
            logger.warning("fetch of partition %d could not read its WAL object: %s", response.partition_index, failure)
            response.error_code = wire_error(failure).code
        response.records = b"".join(served)


def _read_all(
    broker: HandlerContext,
    request: FetchRequest,
    remote: dict[tuple[str, int], RemoteRead],
) -> tuple[list[Any], int, bool, list[Hashable], Found]:
    """Every partition's entries (local, or as a remote replica sent them), sized by KIP-74
    across the request; errors per partition."""
    budget = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    total = 0
    has_error = False
    first_batch_pending = True
    read_committed = request.isolation_level == READ_COMMITTED
    keys: list[Hashable] = []
    topics: list[Any] = []
    found: Found = []
    for fetch_topic in request.topics:
        partitions = []
        topic: Topic | None
        try:
            topic = resolve_topic(broker, fetch_topic.topic, fetch_topic.topic_id)
            topic_error = None
        except ApiError as exc:
            topic, topic_error = None, exc
        for fetch_partition in fetch_topic.partitions:
            index = fetch_partition.partition
            partition: Partition | None = None
            tiered: TieredRead | None = None
            aborted: list[tuple[int, int]] = []
            try:
                if topic is None:
                    raise topic_error or ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown topic")
                limit = min(fetch_partition.partition_max_bytes, budget - total)
                read = remote.get((topic.name, index))
                if read is not None:
                    state = broker.view.partitions.get(TopicIdPartition.of(topic.topic_id, index))
                    if state is not None:  # fenced by the epoch this broker knows, as a replica would be
                        check_leader_epoch(fetch_partition.current_leader_epoch, state.record.leader_epoch)
                    if read.error_code:  # answered by a replica elsewhere
                        raise ApiError(ErrorCode(read.error_code), "remote replica read failed")
                    entries = _within(read.entries, limit, first_batch_pending)
                    high_watermark, log_start_offset = read.high_watermark, read.log_start_offset
                    stable = read.last_stable_offset if read.last_stable_offset >= 0 else high_watermark
                    if read.tiered is not None:  # read the segment here, in this broker's AZ
                        tiered = TieredRead(
                            str(topic.topic_id),
                            index,
                            read.tiered,
                            fetch_partition.fetch_offset,
                            limit,
                            first_batch_pending,
                            stable if read_committed else None,
                            aborted=read.aborted,
                        )
                    if read_committed:
                        entries = [e for e in entries if e.base_offset < stable]
                        if entries:
                            upper = entries[-1].last_offset + 1
                            aborted = _starting_below(read.aborted, upper)
                else:
                    partition = fetch_replica(broker, topic, index)
                    check_leader_epoch(fetch_partition.current_leader_epoch, partition.leader_epoch)
                    stable = partition.last_stable_offset
                    tiered = _tiered(
                        partition,
                        fetch_partition.fetch_offset,
                        limit,
                        first_batch_pending,
                        stable if read_committed else None,
                    )
                    entries = (
                        []
                        if tiered
                        else _read_local(
                            partition,
                            fetch_partition.fetch_offset,
                            limit,
                            first_batch_pending,
                            stable if read_committed else partition.log.high_watermark,
                        )
                    )
                    high_watermark, log_start_offset = partition.log.high_watermark, partition.log_start_offset
                    if read_committed and entries:
                        aborted = [
                            (t.producer_id, t.first_offset)
                            for t in partition.aborted_transactions(
                                fetch_partition.fetch_offset, entries[-1].last_offset + 1
                            )
                        ]
                    keys.append(partition.key)
            except OffsetOutOfRangeError:
                has_error = True
                partitions.append(_error(index, ErrorCode.OFFSET_OUT_OF_RANGE, partition))
                continue
            except ApiError as exc:
                has_error = True
                partitions.append(_error(index, exc.code, None))
                continue
            entries = [e for e in entries if e.kind in SERVED_KINDS]
            if entries:
                first_batch_pending = False
                total += sum(e.header.size for e in entries)
            elif tiered is not None:
                first_batch_pending = False
                total += max(limit, 1)  # an upper bound: the batches are sized when read
            response = _Partition(
                partition_index=index,
                error_code=0,
                high_watermark=high_watermark,
                last_stable_offset=stable,
                log_start_offset=log_start_offset,
                aborted_transactions=[_Aborted(producer_id=p, first_offset=f) for p, f in aborted]
                if read_committed
                else None,
                preferred_read_replica=-1,
                records=b"",
            )
            partitions.append(response)
            if entries:
                found.append((response, entries))
            elif tiered is not None:
                found.append((response, tiered))
        topics.append(_Topic(topic=fetch_topic.topic, topic_id=fetch_topic.topic_id, partitions=partitions))
    return topics, total, has_error, keys, found


@dataclass(frozen=True, slots=True)
class TieredRead:
    """A partition's answer that comes from a tiered segment (offset below the local log)."""

    topic_id: str
    index: int
    segment: RemoteSegment
    offset: int
    limit: int
    first_batch_whole: bool
    stable: int | None  # read_committed: the last stable offset (None: read_uncommitted)
    partition: Partition | None = None  # hosted here: the aborted transactions from its indexes
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # else the replica's answer


def _tiered(
    partition: Partition, offset: int, limit: int, first_batch_pending: bool, stable: int | None
) -> TieredRead | None:
    if offset >= partition.log.log_start_offset:
        return None
    segment = partition.remote_segments.segment_for(offset)
    if segment is None:
        return None
    return TieredRead(
        partition.topic_id, partition.index, segment, offset, limit, first_batch_pending, stable, partition
    )


async def _read_tiered(broker: HandlerContext, response: Any, read: TieredRead) -> None:
    """Fill a partition's records from its tiered segment (KIP-74 sizing as for local reads),
    for read_committed up to the last stable offset, with the aborted transactions of what it
    serves."""
    try:
        batches = await broker.tiered_reader.read(
            read.topic_id, read.index, read.segment, read.offset, max(read.limit, 0)
        )
        if read.stable is not None:
            batches = [b for b in batches if b[0].base_offset < read.stable]
        if batches and not read.first_batch_whole and batches[0][0].size > read.limit:
            batches = []
        if read.stable is not None and batches:
            response.aborted_transactions = [
                _Aborted(producer_id=p, first_offset=f)
                for p, f in await _tiered_aborted(broker, read, batches[-1][0].last_offset + 1)
            ]
    except Exception as exc:  # noqa: BLE001 - the store's errors or a damaged segment: this partition only
        logger.warning(
            "fetch of partition %d could not read tiered segment %s: %s", read.index, read.segment.segment_id, exc
        )
        response.error_code = wire_error(exc).code
        return
    response.records = b"".join(view for _header, view in batches)


async def _tiered_aborted(broker: HandlerContext, read: TieredRead, upper: int) -> list[tuple[int, int]]:
    """(producer id, first offset) of the aborted transactions overlapping [offset, upper): from
    the hosted partition's tiered and local indexes, or from what the replica answered (for
    the whole segment: only those that start below `upper`)."""
    if read.partition is None:
        return _starting_below(read.aborted, upper)
    found = await broker.tiered_reader.aborted_transactions(read.partition, read.offset, upper)
    return [(t.producer_id, t.first_offset) for t in found]


def _starting_below(aborted: list[tuple[int, int, int]], upper: int) -> list[tuple[int, int]]:
    """(producer id, first offset) of a replica's aborted transactions that start below
    `upper`: it answered for a range that may reach further than what is served."""
    return [(pid, first) for pid, first, _last in aborted if first < upper]


def _read_local(partition: Partition, offset: int, limit: int, first_batch_pending: bool, upper: int) -> list[LogEntry]:
    """Entries below `upper` (the high watermark, or the last stable offset for
    read_committed) from `offset`, sized by KIP-74. A follower whose log no longer holds the
    offset (truncated since the fetch began) serves nothing rather than
    OFFSET_OUT_OF_RANGE: only the leader may say that, and the next fetch asks it."""
    log = partition.log
    try:
        if first_batch_pending:
            return log.read(offset, max(limit, 0), upper)
        if limit <= 0:
            return []
        entries = log.read(offset, limit, upper)
    except OffsetOutOfRangeError:
        if not is_authoritative(partition):
            return []
        raise
    return [] if entries and entries[0].header.size > limit else entries


def _within(entries: list[LogEntry], limit: int, first_batch_pending: bool) -> list[LogEntry]:
    """KIP-74 sizing of entries a remote replica sent: the first batch of the response whole,
    then nothing past `limit`."""
    taken: list[LogEntry] = []
    size = 0
    for entry in entries:
        if size + entry.header.size > limit and not (first_batch_pending and not taken):
            break
        taken.append(entry)
        size += entry.header.size
    return taken


def _error(index: int, code: ErrorCode, partition: Partition | None) -> Any:
    log = partition.log if partition is not None else None
    return _Partition(
        partition_index=index,
        error_code=code,
        high_watermark=log.high_watermark if log else -1,
        last_stable_offset=partition.last_stable_offset if partition is not None else -1,
        log_start_offset=partition.log_start_offset if partition else -1,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=b"",
    )
