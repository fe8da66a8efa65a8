"""IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT applied to a topic's overrides."""

from __future__ import annotations

from enum import IntEnum

from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from ..topic_config import TOPIC_CONFIGS, ConfigType, describe
from .config_resources import ResourceType, STATIC_BROKER_MESSAGE, alter_topic, require_resource_type
from .registry import api

_Result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse


class Op(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@api(ApiKey.INCREMENTAL_ALTER_CONFIGS)
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    results = []
    for resource in request.resources:
        try:
            if require_resource_type(resource.resource_type) == ResourceType.BROKER:
                raise ApiError(ErrorCode.INVALID_REQUEST, STATIC_BROKER_MESSAGE)
            topic = ctx.catalog.get(resource.resource_name)
            if topic is None:
                raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {resource.resource_name!r}")
            overrides: dict[str, str | None] = dict(topic.configs)
            effective = {e.name: e.value for e in describe(topic.configs, ctx.config)}
            for change in resource.configs:
                _apply(overrides, effective, change.name, change.config_operation, change.value)
            await alter_topic(ctx, topic.name, overrides, request.validate_only)
            results.append(
                _Result(
                    error_code=0,
                    error_message=None,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
        except ApiError as exc:
            results.append(
                _Result(
                    error_code=exc.code,
                    error_message=exc.message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)


def _apply(overrides: dict[str, str | None], effective: dict[str, str], name: str, op: int, value: str | None) -> None:
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
    try:
        operation = Op(op)
    except ValueError:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"unknown config operation {op}") from None
    if operation == Op.SET:
        overrides[name] = value
    elif operation == Op.DELETE:
        overrides.pop(name, None)
    else:
        if definition.type != ConfigType.LIST:
            raise ApiError(
                ErrorCode.INVALID_CONFIG, f"Config value append/subtract is not allowed for config key {name}"
            )
        items = [v for v in (overrides.get(name) or effective[name]).split(",") if v]
        delta = [v for v in (value or "").split(",") if v]
        items = (
            items + [v for v in delta if v not in items]
            if operation == Op.APPEND
            else [v for v in items if v not in delta]
        )
        overrides[name] = ",".join(items)
