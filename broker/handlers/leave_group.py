"""LeaveGroup: one member (v0-2) or a batch of members (v3+, KIP-345)."""

from __future__ import annotations

from kafka.protocol.consumer import LeaveGroupRequest, LeaveGroupResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError
from ..protocol.header import RequestHeader
from .registry import api

_Member = LeaveGroupResponse.MemberResponse


@api(ApiKey.LEAVE_GROUP)
async def handle(ctx: HandlerContext, header: RequestHeader, request: LeaveGroupRequest) -> LeaveGroupResponse:
    batched = header.api_version >= 3
    members: list[tuple[str, str | None]] = (
        [(m.member_id, m.group_instance_id) for m in request.members] if batched else [(request.member_id, None)]
    )
    try:
        result = await ctx.groups.leave(request.group_id, members)
    except ApiError as exc:
        return LeaveGroupResponse(throttle_time_ms=0, error_code=exc.code, members=[])
    if not batched:
        code = result.error_code or (result.member_errors[0] if result.member_errors else 0)
        return LeaveGroupResponse(throttle_time_ms=0, error_code=code)
    return LeaveGroupResponse(
        throttle_time_ms=0,
        error_code=result.error_code,
        members=[
            _Member(member_id=m, group_instance_id=i, error_code=e) for (m, i), e in zip(members, result.member_errors)
        ],
    )
