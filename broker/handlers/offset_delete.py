"""OffsetDelete: remove committed offsets of topics the group no longer subscribes to."""

from __future__ import annotations

from kafka.protocol.consumer import OffsetDeleteRequest, OffsetDeleteResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError
from ..protocol.header import RequestHeader
from .registry import api

_Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_Partition = _Topic.OffsetDeleteResponsePartition


@api(ApiKey.OFFSET_DELETE)
async def handle(ctx: HandlerContext, header: RequestHeader, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    try:
        group_error, codes = await ctx.groups.delete_offsets(request.group_id, wanted)
    except ApiError as exc:
        group_error, codes = exc.code, []
    if group_error:
        return OffsetDeleteResponse(error_code=group_error, throttle_time_ms=0, topics=[])
    codes_iter = iter(codes)
    return OffsetDeleteResponse(
        error_code=0,
        throttle_time_ms=0,
        topics=[
            _Topic(
                name=t.name,
                partitions=[
                    _Partition(partition_index=p.partition_index, error_code=next(codes_iter)) for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )
