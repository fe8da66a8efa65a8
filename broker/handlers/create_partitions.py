"""CreatePartitions: grow a topic (never shrink), validate_only supported."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import CreatePartitionsRequest, CreatePartitionsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from .registry import api

_Result = CreatePartitionsResponse.CreatePartitionsTopicResult


@api(ApiKey.CREATE_PARTITIONS)
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    results = []
    for wanted in request.topics:
        try:
            topic = ctx.catalog.check_new_partition_count(wanted.name, wanted.count)
            new = range(topic.partitions, wanted.count)
            if wanted.assignments:
                assignment = _manual(ctx, new, wanted.assignments)
            else:
                current = ctx.view.partitions_of(str(topic.topic_id)).get(0)
                factor = len(current.record.replicas) if current is not None else 1
                assignment = ctx.assign_replicas(new, factor)
            if not request.validate_only:
                await ctx.catalog.set_partition_count(wanted.name, wanted.count, assignment)
            results.append(_Result(name=wanted.name, error_code=0, error_message=None))
        except ApiError as exc:
            results.append(_Result(name=wanted.name, error_code=exc.code, error_message=exc.message))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


def _manual(ctx: HandlerContext, new: range, assignments: list[Any]) -> dict[int, list[int]]:
    live = {b.node_id for b in ctx.view.brokers.values() if not b.stateless}
    if len(assignments) != len(new):
        raise ApiError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{len(assignments)} assignments given for {len(new)} new partitions"
        )
    result = {}
    for index, assignment in zip(new, assignments):
        replicas = list(assignment.broker_ids)
        if not replicas or not set(replicas) <= live or len(set(replicas)) != len(replicas):
            raise ApiError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"replicas {replicas} must be distinct live brokers {sorted(live)}",
            )
        result[index] = replicas
    return result
