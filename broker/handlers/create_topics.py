"""CreateTopics, including validate_only: same checks, nothing created."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from ..topic_config import describe
from .registry import api

_Result = CreateTopicsResponse.CreatableTopicResult
_Config = _Result.CreatableTopicConfigs


@api(ApiKey.CREATE_TOPICS)
async def handle(ctx: HandlerContext, header: RequestHeader, request: CreateTopicsRequest) -> CreateTopicsResponse:
    results = []
    seen: set[str] = set()
    for creatable in request.topics:
        try:
            if creatable.name in seen:
                raise ApiError(ErrorCode.INVALID_REQUEST, f"Create topics request has duplicate topic {creatable.name}")
            seen.add(creatable.name)
            partitions, factor = _partition_count(ctx, creatable)
            topic = ctx.catalog.prepare(creatable.name, partitions, {c.name: c.value for c in creatable.configs})
            if creatable.assignments:
                assignment = {a.partition_index: list(a.broker_ids) for a in creatable.assignments}
            else:
                assignment = ctx.assign_replicas(range(topic.partitions), factor)
            factor = len(assignment[0])
            if not request.validate_only:
                topic = await ctx.catalog.create(topic, assignment)
        except ApiError as exc:
            results.append(
                _Result(
                    name=creatable.name,
                    error_code=exc.code,
                    error_message=exc.message,
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=[],
                )
            )
            continue
        results.append(
            _Result(
                name=topic.name,
                topic_id=topic.topic_id,
                error_code=0,
                error_message=None,
                num_partitions=topic.partitions,
                replication_factor=factor,
                configs=[
                    _Config(name=e.name, value=e.value, read_only=False, config_source=e.source, is_sensitive=False)
                    for e in describe(topic.configs, ctx.config)
                ],
            )
        )
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


def _partition_count(ctx: HandlerContext, creatable: Any) -> tuple[int, int]:
    """Check replication factor and manual assignments; return the partition count (-1 =
    default) and the replication factor."""
    live = {b.node_id for b in ctx.view.brokers.values() if not b.stateless}
    if creatable.assignments:
        if creatable.num_partitions != -1 or creatable.replication_factor != -1:
            raise ApiError(
                ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor and replicasAssignments were set."
            )
        indexes = sorted(a.partition_index for a in creatable.assignments)
        if indexes != list(range(len(indexes))):
            raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions must be numbered 0..n-1 without gaps")
        for assignment in creatable.assignments:
            if (
                not assignment.broker_ids
                or not set(assignment.broker_ids) <= live
                or len(set(assignment.broker_ids)) != len(assignment.broker_ids)
            ):
                raise ApiError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"replicas {assignment.broker_ids} must be distinct live brokers {sorted(live)}",
                )
        return len(indexes), len(creatable.assignments[0].broker_ids)
    factor = creatable.replication_factor
    if factor == -1:
        factor = ctx.config.default_replication_factor
    if factor < 1 or factor > len(live):
        raise ApiError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {factor} larger than available brokers: {len(live)}."
            if factor > 0
            else "Replication factor must be larger than 0.",
        )
    return creatable.num_partitions, factor
