"""FindCoordinator: this broker coordinates every group (single broker). Transaction
coordinators do not exist yet, which is said plainly rather than with a retriable code
that would make clients retry forever."""

from __future__ import annotations

from kafka.protocol.metadata import FindCoordinatorResponse

from ..protocol.errors import ErrorCode
from .registry import api

GROUP_KEY_TYPE = 0
_NO_TRANSACTIONS = "transactions are not supported by this broker yet"


@api(10)
async def handle(broker, header, request):  # type: ignore[no-untyped-def]
    host, port = broker.config.advertised
    if request.key_type == GROUP_KEY_TYPE:
        code, message, node = ErrorCode.NONE, None, broker.node_id
    else:
        code, message, node, host, port = ErrorCode.UNSUPPORTED_VERSION, _NO_TRANSACTIONS, -1, "", -1
    if header.api_version >= 4:
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
            FindCoordinatorResponse.Coordinator(key=key, node_id=node, host=host, port=port,
                                                error_code=code, error_message=message)
            for key in request.coordinator_keys])
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                   node_id=node, host=host, port=port)
