"""OffsetCommit: validated against the group's generation, written to __consumer_offsets."""

from __future__ import annotations

from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError
from ..protocol.header import RequestHeader
from .common import ZERO_UUID
from .registry import api

_Topic = OffsetCommitResponse.OffsetCommitResponseTopic
_Partition = _Topic.OffsetCommitResponsePartition


@api(ApiKey.OFFSET_COMMIT)
async def handle(ctx: HandlerContext, header: RequestHeader, request: OffsetCommitRequest) -> OffsetCommitResponse:
    version = header.api_version
    now = ctx.clock.now_ms()
    retention = request.retention_time_ms if 2 <= version <= 4 else -1
    expire_ms = now + retention if retention >= 0 else -1
    entries = []
    for topic_request in request.topics:
        if version >= 10 and topic_request.topic_id not in (None, ZERO_UUID):
            topic = ctx.catalog.by_id(topic_request.topic_id)
        else:
            topic = ctx.catalog.get(topic_request.name)
        name = topic.name if topic is not None else topic_request.name
        for p in topic_request.partitions:
            entries.append(
                (
                    topic,
                    name,
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch if version >= 6 else -1,
                    p.committed_metadata,
                    expire_ms,
                )
            )
    try:
        codes = await ctx.groups.commit_offsets(
            request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id if version >= 7 else None,
            generation_id=request.generation_id_or_member_epoch,
            api_version=version,
            offsets=entries,
        )
    except ApiError as exc:
        codes = [exc.code] * len(entries)
    codes_iter = iter(codes)
    return OffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            _Topic(
                name=t.name,
                topic_id=t.topic_id,
                partitions=[
                    _Partition(partition_index=p.partition_index, error_code=next(codes_iter)) for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )
