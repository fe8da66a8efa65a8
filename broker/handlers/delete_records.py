"""DeleteRecords: advance a partition's log start offset across both tiers (whole local
segments below it go at once, tiered ones with the next tiering cycle; nothing below it is
served from then on). As Kafka's DelayedDeleteRecords, the answer waits until every replica
on a live broker reports a log start offset at or above the one asked (the smallest is the
low watermark answered), so a leader elected later has it too; REQUEST_TIMED_OUT after the
request's timeout (the leader keeps it, and the followers learn it all the same). A diskless
partition's clients send it to their AZ's representative, which sends it on to the leader
(routing/request_forwarding.py), as ListOffsets."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from ..reads.replica_policy import forward_target
from ..routing.request_forwarding import Forwarded
from .registry import api

if TYPE_CHECKING:
    from ..partition import Partition

_Topic = DeleteRecordsResponse.DeleteRecordsTopicResult
_Partition = _Topic.DeleteRecordsPartitionResult
TO_HIGH_WATERMARK = -1


@api(ApiKey.DELETE_RECORDS)
async def handle(ctx: HandlerContext, header: RequestHeader, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics = []
    elsewhere = Forwarded()
    moved: list[tuple[list[Any], int, Partition, int]] = []  # (answers, slot, partition, offset asked)
    for t_pos, wanted in enumerate(request.topics):
        partitions: list = []
        topic = ctx.catalog.get(wanted.name)
        for p_pos, item in enumerate(wanted.partitions):
            target = forward_target(ctx, header, topic, item.partition_index) if topic is not None else None
            if target is not None:
                elsewhere.reserve(target, (t_pos, p_pos), partitions)
                continue
            try:
                partition = ctx.replica_manager.leader(wanted.name, item.partition_index)
                offset = partition.log.high_watermark if item.offset == TO_HIGH_WATERMARK else item.offset
                # as Kafka: OFFSET_OUT_OF_RANGE above the high watermark, below the start a no-op
                partition.delete_records_before(offset)
                moved.append((partitions, len(partitions), partition, offset))
                partitions.append(None)
            except ApiError as exc:
                partitions.append(
                    _Partition(partition_index=item.partition_index, low_watermark=-1, error_code=exc.code)
                )
        topics.append(_Topic(name=wanted.name, partitions=partitions))
    deadline = asyncio.get_running_loop().time() + max(request.timeout_ms, 0) / 1000
    replicated = asyncio.gather(*(_replicated(ctx, partition, offset, deadline) for _a, _s, partition, offset in moved))
    await elsewhere.fill(
        ctx,
        header,
        request,
        "topics",
        "partitions",
        lambda p: _Partition(
            partition_index=p.partition_index, low_watermark=-1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER
        ),
    )
    for (answers, slot, _partition, _offset), answer in zip(moved, await replicated):
        answers[slot] = answer
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


async def _replicated(ctx: HandlerContext, partition: Partition, offset: int, deadline: float) -> Any:
    """The partition's answer once its low watermark (LeaderState.low_watermark) reaches
    `offset`, or REQUEST_TIMED_OUT at `deadline`; NOT_LEADER_OR_FOLLOWER if leadership moves."""
    loop = asyncio.get_running_loop()
    ctx.waiters.notify(partition.key)  # followers long-polling here learn the new log start now
    while True:
        state = partition.leader_state
        if state is None:
            return _Partition(
                partition_index=partition.index, low_watermark=-1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER
            )
        low = state.low_watermark(partition.log_start_offset, lambda replica: replica in ctx.view.brokers)
        if low >= offset:
            return _Partition(partition_index=partition.index, low_watermark=low, error_code=0)
        remaining = deadline - loop.time()
        if remaining <= 0:
            return _Partition(partition_index=partition.index, low_watermark=-1, error_code=ErrorCode.REQUEST_TIMED_OUT)
        await ctx.waiters.wait([partition.key], remaining)
