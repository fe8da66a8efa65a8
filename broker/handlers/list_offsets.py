"""ListOffsets: earliest, latest (the high watermark: what a consumer can read; with
isolation_level READ_COMMITTED the last stable offset, as Kafka), max timestamp, and by
timestamp (a match at or above that bound is none: -1). A timestamp lookup finds the batch through the time index,
then reads that one batch's records (for a diskless partition, from its WAL object) for the
first record at or after the target, as Kafka does; this is the only place the broker decodes records, and it is not a hot path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.record.default_records import DefaultRecordBatch

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.batch import TIMESTAMP_TYPE_LOG_APPEND, parse_header
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from ..reads.fencing import check_leader_epoch
from ..reads.partition_reader import PartitionReader
from ..reads.replica_policy import forward_target
from ..reads.resolver import batch_pieces
from ..routing.request_forwarding import Forwarded
from .registry import api
from ..wire_errors import wire_error

if TYPE_CHECKING:
    from ..log import LogEntry
    from ..partition import Partition

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
READ_COMMITTED = 1
_Topic = ListOffsetsResponse.ListOffsetsTopicResponse
_Partition = _Topic.ListOffsetsPartitionResponse


@api(ApiKey.LIST_OFFSETS)
async def handle(ctx: HandlerContext, header: RequestHeader, request: ListOffsetsRequest) -> ListOffsetsResponse:
    topics = []
    elsewhere = Forwarded()
    for t_pos, list_topic in enumerate(request.topics):
        partitions: list = []
        topic = ctx.catalog.get(list_topic.name)
        for p_pos, list_partition in enumerate(list_topic.partitions):
            index = list_partition.partition_index
            target = forward_target(ctx, header, topic, index) if topic is not None else None
            if target is not None:
                elsewhere.reserve(target, (t_pos, p_pos), partitions)
                continue
            try:
                # others send it on (routing/request_forwarding.py)
                partition = ctx.replica_manager.leader(list_topic.name, index)
                check_leader_epoch(list_partition.current_leader_epoch, partition.leader_epoch)
                offset, timestamp = await _lookup(
                    ctx, partition, list_partition.timestamp, request.isolation_level == READ_COMMITTED
                )
                partitions.append(
                    _Partition(
                        partition_index=index,
                        error_code=0,
                        timestamp=timestamp,
                        offset=offset,
                        leader_epoch=partition.leader_epoch,
                    )
                )
            except ApiError as exc:
                partitions.append(
                    _Partition(partition_index=index, error_code=exc.code, timestamp=-1, offset=-1, leader_epoch=-1)
                )
        topics.append(_Topic(name=list_topic.name, partitions=partitions))
    await elsewhere.fill(
        ctx,
        header,
        request,
        "topics",
        "partitions",
        lambda p: _Partition(
            partition_index=p.partition_index,
            error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
            timestamp=-1,
            offset=-1,
            leader_epoch=-1,
        ),
    )
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


async def _lookup(
    ctx: HandlerContext, partition: Partition, target: int, read_committed: bool = False
) -> tuple[int, int]:
    """(offset, timestamp) answering one partition's query; (-1, -1) when nothing matches.
    What a consumer may read ends at the high watermark, or at the last stable offset for
    read_committed (Kafka's `lastFetchableOffset`)."""
    log = partition.log
    fetchable = partition.last_stable_offset if read_committed else log.high_watermark
    if target == LATEST:
        return fetchable, -1
    if target == EARLIEST:
        return partition.log_start_offset, -1
    if target == EARLIEST_LOCAL:
        return log.log_start_offset, -1
    if target == LATEST_TIERED:
        readable = partition.remote_segments.readable
        return (readable[-1].end_offset, -1) if readable else (-1, -1)
    if target >= 0:
        found = await _in_tiered(ctx, partition, target)
        if found is not None:
            return found
    start = partition.log_start_offset
    if target == MAX_TIMESTAMP:
        entry = log.entry_with_max_timestamp()
        if entry is None or entry.base_offset >= fetchable:
            return -1, -1
        wanted = entry.header.max_timestamp
        return await _first_record_at_or_after(ctx, entry, wanted, exact=True, start=start)
    if target < 0:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"unknown special timestamp {target}")
    entry = log.entry_for_timestamp(target)
    if entry is None or entry.base_offset >= fetchable:
        return -1, -1
    return await _first_record_at_or_after(ctx, entry, target, exact=False, start=start)


async def _in_tiered(ctx: HandlerContext, partition: Partition, target: int) -> tuple[int, int] | None:
    """A timestamp lookup in the tiered segments (through their time index, then their
    batches as the partition reader reads them), or None when
    no tiered batch reaches `target` (the local log answers). Records below the log start
    offset (DeleteRecords) are never an answer, as in Kafka's search from logStartOffset."""
    segment = next((s for s in partition.remote_segments.readable if s.max_timestamp_ms >= target), None)
    if segment is None or segment.base_offset >= partition.log.log_start_offset:
        return None
    start = partition.log_start_offset
    offset = max(
        await ctx.tiered_reader.offset_for_timestamp(partition.topic_id, partition.index, segment, target), start
    )
    reader = PartitionReader(ctx)
    while offset <= segment.end_offset:
        batches = await reader.tiered_batches(partition, segment, offset, 1 << 20)
        if not batches:
            return None
        for view in batches:
            header = parse_header(view)
            if header.max_timestamp >= target:
                if header.attributes & TIMESTAMP_TYPE_LOG_APPEND:
                    return max(header.base_offset, start), header.max_timestamp
                found = _first_in_batch(bytes(view), target, exact=False, start=start)
                return found or (header.last_offset, header.max_timestamp)
        offset = parse_header(batches[-1]).last_offset + 1
    return None


def _first_in_batch(batch: bytes, target: int, exact: bool, start: int) -> tuple[int, int] | None:
    """The first record of the batch at or above offset `start` (the log start offset may lie
    inside the batch) whose timestamp matches."""
    for record in DefaultRecordBatch(batch):
        if record.offset >= start and (record.timestamp == target if exact else record.timestamp >= target):
            return record.offset, record.timestamp
    return None


async def _first_record_at_or_after(
    ctx: HandlerContext, entry: LogEntry, target: int, exact: bool, start: int
) -> tuple[int, int]:
    header = entry.header
    if header.attributes & TIMESTAMP_TYPE_LOG_APPEND:
        return max(header.base_offset, start), header.max_timestamp
    [pieces] = await batch_pieces(ctx, [entry])
    if isinstance(pieces, Exception):
        raise wire_error(pieces, f"cannot read the batch at offset {header.base_offset}")
    return _first_in_batch(b"".join(pieces), target, exact, start) or (header.last_offset, header.max_timestamp)
