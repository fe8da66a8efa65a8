"""DescribeGroups: state, protocol and members (with metadata and assignment)."""

from __future__ import annotations

from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from .registry import api

_Group = DescribeGroupsResponse.DescribedGroup
_Member = _Group.DescribedGroupMember


@api(ApiKey.DESCRIBE_GROUPS)
async def handle(ctx: HandlerContext, header: RequestHeader, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    described = []
    for group_id in request.groups:
        try:
            description = ctx.groups.describe(group_id)
        except ApiError as exc:
            described.append(
                _Group(
                    error_code=exc.code,
                    error_message=exc.message,
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                )
            )
            continue
        if description is None:
            # Kafka 4: v6 says GROUP_ID_NOT_FOUND; older versions describe a Dead group.
            code = ErrorCode.GROUP_ID_NOT_FOUND if header.api_version >= 6 else ErrorCode.NONE
            described.append(
                _Group(
                    error_code=code,
                    error_message=None,
                    group_id=group_id,
                    group_state="Dead",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                )
            )
            continue
        described.append(
            _Group(
                error_code=0,
                error_message=None,
                group_id=group_id,
                group_state=description.state,
                protocol_type=description.protocol_type,
                protocol_data=description.protocol_name,
                members=[
                    _Member(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in description.members
                ],
            )
        )
    return DescribeGroupsResponse(throttle_time_ms=0, groups=described)
