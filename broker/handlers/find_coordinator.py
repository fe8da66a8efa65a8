"""FindCoordinator: a group's coordinator is the leader of its __consumer_offsets partition.
Transaction coordinators do not exist yet, which is said plainly rather than with a
retriable code that would make clients retry forever."""

from __future__ import annotations

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ErrorCode
from ..protocol.header import RequestHeader
from .registry import api

GROUP_KEY_TYPE = 0
_NO_TRANSACTIONS = "transactions are not supported by this broker yet"


@api(ApiKey.FIND_COORDINATOR)
async def handle(
    broker: HandlerContext, header: RequestHeader, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    keys = request.coordinator_keys if header.api_version >= 4 else [request.key]
    if request.key_type == GROUP_KEY_TYPE:
        await broker.groups.ensure_offsets_topic()
    found = [_find(broker, request.key_type, key) for key in keys]
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


def _find(broker: HandlerContext, key_type: int, key: str) -> tuple[int, str | None, int, str, int]:
    if key_type != GROUP_KEY_TYPE:
        return ErrorCode.UNSUPPORTED_VERSION, _NO_TRANSACTIONS, -1, "", -1
    node = broker.groups.coordinator_of(key)
    registration = broker.view.brokers.get(node)
    if registration is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group's coordinator is not available", -1, "", -1
    return ErrorCode.NONE, None, node, registration.host, registration.port
