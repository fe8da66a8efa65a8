"""JoinGroup: parks until the rebalance completes (the coordinator answers the future)."""

from __future__ import annotations

from kafka.protocol.consumer import JoinGroupRequest, JoinGroupResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError
from ..protocol.header import RequestHeader
from .registry import api

_Member = JoinGroupResponse.JoinGroupResponseMember


@api(ApiKey.JOIN_GROUP)
async def handle(ctx: HandlerContext, header: RequestHeader, request: JoinGroupRequest) -> JoinGroupResponse:
    version = header.api_version
    try:
        result = await ctx.groups.join(
            request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id if version >= 5 else None,
            client_id=header.client_id or "",
            client_host=header.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=[(p.name, p.metadata) for p in request.protocols],
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
    except ApiError as exc:
        return JoinGroupResponse(
            throttle_time_ms=0,
            error_code=exc.code,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if version >= 7 else "",
            leader="",
            member_id=request.member_id,
            members=[],
        )
    protocol_name = result.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=result.error_code,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[
            _Member(member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
            for m in result.members
        ],
    )
