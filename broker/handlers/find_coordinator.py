"""FindCoordinator: a group's coordinator is the leader of its __consumer_offsets partition
(key type 0), a transactional id's the leader of its __transaction_state partition (key
type 1). Other key types (share groups) are refused plainly rather than with a retriable
code that would make clients retry forever."""

from __future__ import annotations

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ErrorCode
from ..protocol.header import RequestHeader
from .registry import api

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1


@api(ApiKey.FIND_COORDINATOR)
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    keys = request.coordinator_keys if header.api_version >= 4 else [request.key]
    if request.key_type == GROUP_KEY_TYPE:
        await ctx.groups.ensure_offsets_topic()
    elif request.key_type == TRANSACTION_KEY_TYPE:
        await ctx.transactions.ensure_topic()
    found = [_find(ctx, request.key_type, key) for key in keys]
    if header.api_version >= 4:
        return FindCoordinatorResponse(
            throttle_time_ms=0,
            coordinators=[
                FindCoordinatorResponse.Coordinator(
                    key=key, node_id=node, host=host, port=port, error_code=code, error_message=message
                )
                for key, (code, message, node, host, port) in zip(keys, found)
            ],
        )
    code, message, node, host, port = found[0]
    return FindCoordinatorResponse(
        throttle_time_ms=0, error_code=code, error_message=message, node_id=node, host=host, port=port
    )


def _find(ctx: HandlerContext, key_type: int, key: str) -> tuple[int, str | None, int, str, int]:
    if key_type == GROUP_KEY_TYPE:
        node, what = ctx.groups.coordinator_of(key), "group"
    elif key_type == TRANSACTION_KEY_TYPE:
        node, what = ctx.transactions.coordinator_of(key), "transactional id"
    else:
        return ErrorCode.INVALID_REQUEST, f"coordinator key type {key_type} is not supported", -1, "", -1
    registration = ctx.view.brokers.get(node)
    if registration is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the {what}'s coordinator is not available", -1, "", -1
    return ErrorCode.NONE, None, node, registration.host, registration.port
