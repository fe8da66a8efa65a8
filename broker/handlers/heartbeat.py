"""Heartbeat: keeps a member's session alive and tells it when to rejoin."""

from __future__ import annotations

from kafka.protocol.consumer import HeartbeatRequest, HeartbeatResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError
from ..protocol.header import RequestHeader
from .registry import api


@api(ApiKey.HEARTBEAT)
async def handle(ctx: HandlerContext, header: RequestHeader, request: HeartbeatRequest) -> HeartbeatResponse:
    try:
        code = await ctx.groups.heartbeat(
            request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id if header.api_version >= 3 else None,
            generation_id=request.generation_id,
        )
    except ApiError as exc:
        code = exc.code
    return HeartbeatResponse(throttle_time_ms=0, error_code=code)
