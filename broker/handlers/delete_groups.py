"""DeleteGroups: only empty groups (NON_EMPTY_GROUP otherwise); offsets go with them."""

from __future__ import annotations

from kafka.protocol.admin import DeleteGroupsRequest, DeleteGroupsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError
from ..protocol.header import RequestHeader
from .registry import api


@api(ApiKey.DELETE_GROUPS)
async def handle(ctx: HandlerContext, header: RequestHeader, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    results = []
    for group_id in request.groups_names:
        try:
            code = await ctx.groups.delete_group(group_id)
        except ApiError as exc:
            code = exc.code
        results.append(DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=code))
    return DeleteGroupsResponse(throttle_time_ms=0, results=results)
