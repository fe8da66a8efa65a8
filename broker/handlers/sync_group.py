"""SyncGroup: the leader hands in assignments; every member waits for its own."""

from __future__ import annotations

from kafka.protocol.consumer import SyncGroupRequest, SyncGroupResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError
from ..protocol.header import RequestHeader
from .registry import api


@api(ApiKey.SYNC_GROUP)
async def handle(ctx: HandlerContext, header: RequestHeader, request: SyncGroupRequest) -> SyncGroupResponse:
    version = header.api_version
    try:
        result = await ctx.groups.sync(
            request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id if version >= 3 else None,
            generation_id=request.generation_id,
            protocol_type=request.protocol_type if version >= 5 else None,
            protocol_name=request.protocol_name if version >= 5 else None,
            assignments={a.member_id: a.assignment for a in request.assignments},
        )
    except ApiError as exc:
        return SyncGroupResponse(throttle_time_ms=0, error_code=exc.code, assignment=b"")
    return SyncGroupResponse(
        throttle_time_ms=0,
        error_code=result.error_code,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )
