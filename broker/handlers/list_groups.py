"""ListGroups, with the states (v4+) and types (v5+) filters."""

from __future__ import annotations

from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.header import RequestHeader
from .registry import api

CLASSIC = "classic"


@api(ApiKey.LIST_GROUPS)
async def handle(ctx: HandlerContext, header: RequestHeader, request: ListGroupsRequest) -> ListGroupsResponse:
    version = header.api_version
    states = {s.lower() for s in request.states_filter} if version >= 4 and request.states_filter else None
    types = {t.lower() for t in request.types_filter} if version >= 5 and request.types_filter else None
    groups = [
        ListGroupsResponse.ListedGroup(group_id=gid, protocol_type=ptype, group_state=state, group_type=CLASSIC)
        for gid, ptype, state in ctx.groups.list_groups()
        if (states is None or state.lower() in states) and (types is None or CLASSIC in types)
    ]
    return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=groups)
