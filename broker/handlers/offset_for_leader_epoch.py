"""OffsetForLeaderEpoch: where a leader epoch ends in the leader's log, so a consumer that
saw a leader change can check its position was not truncated away (KIP-320). The answer is
the epoch history's end offset for the largest epoch <= the one asked for (the log end
offset for the current epoch), as Kafka's LeaderEpochFileCache.endOffsetFor computes it.
"""

from __future__ import annotations

from kafka.protocol.consumer import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from ..reads.fencing import check_leader_epoch
from ..reads.replica_policy import forward_target
from ..routing.request_forwarding import Forwarded
from .registry import api

_Topic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_Partition = _Topic.EpochEndOffset


@api(ApiKey.OFFSET_FOR_LEADER_EPOCH, versions=(2, 4))
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    topics = []
    elsewhere = Forwarded()
    for t_pos, wanted in enumerate(request.topics):
        partitions: list = []
        topic = ctx.catalog.get(wanted.topic)
        for p_pos, asked in enumerate(wanted.partitions):
            target = forward_target(ctx, header, topic, asked.partition) if topic is not None else None
            if target is not None:
                elsewhere.reserve(target, (t_pos, p_pos), partitions)
                continue
            try:
                partition = ctx.replica_manager.leader(wanted.topic, asked.partition)  # others send it on
                check_leader_epoch(asked.current_leader_epoch, partition.leader_epoch)
                epoch, end = partition.epochs.end_offset_for(asked.leader_epoch, partition.log.log_end_offset)
                partitions.append(
                    _Partition(error_code=0, partition=asked.partition, leader_epoch=epoch, end_offset=end)
                )
            except ApiError as exc:
                partitions.append(
                    _Partition(error_code=exc.code, partition=asked.partition, leader_epoch=-1, end_offset=-1)
                )
        topics.append(_Topic(topic=wanted.topic, partitions=partitions))
    await elsewhere.fill(
        ctx,
        header,
        request,
        "topics",
        "partitions",
        lambda p: _Partition(
            error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, partition=p.partition, leader_epoch=-1, end_offset=-1
        ),
    )
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
