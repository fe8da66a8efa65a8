"""CreatePartitions: grow a topic (never shrink), validate_only supported."""

from __future__ import annotations

from kafka.protocol.admin import CreatePartitionsResponse

from ..protocol.errors import ApiError, ErrorCode
from .registry import api

_Result = CreatePartitionsResponse.CreatePartitionsTopicResult


@api(37)
async def handle(broker, header, request):  # type: ignore[no-untyped-def]
    results = []
    for wanted in request.topics:
        try:
            if wanted.assignments:
                for assignment in wanted.assignments:
                    if list(assignment.broker_ids) != [broker.node_id]:
                        raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                       f"replicas {assignment.broker_ids} must be the live broker [{broker.node_id}]")
            if request.validate_only:
                broker.catalog.check_new_partition_count(wanted.name, wanted.count)
            else:
                await broker.catalog.set_partition_count(wanted.name, wanted.count)
            results.append(_Result(name=wanted.name, error_code=0, error_message=None))
        except ApiError as exc:
            results.append(_Result(name=wanted.name, error_code=exc.code, error_message=exc.message))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
