"""DeleteGroups: only empty groups (NON_EMPTY_GROUP otherwise); offsets go with them."""

from __future__ import annotations

from kafka.protocol.admin import DeleteGroupsResponse

from ..protocol.errors import ApiError
from .registry import api


@api(42)
async def handle(broker, header, request):  # type: ignore[no-untyped-def]
    results = []
    for group_id in request.groups_names:
        try:
            code = await broker.groups.delete_group(group_id)
        except ApiError as exc:
            code = exc.code
        results.append(DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=code))
    return DeleteGroupsResponse(throttle_time_ms=0, results=results)
