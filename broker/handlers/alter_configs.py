"""AlterConfigs (legacy): a topic's overrides are replaced by exactly the configs sent."""

from __future__ import annotations

from kafka.protocol.admin import AlterConfigsRequest, AlterConfigsResponse

from ..context import HandlerContext
from ..modes.status import STATUS_CONFIG
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from .config_resources import ResourceType, STATIC_BROKER_MESSAGE, alter_topic, require_resource_type
from .registry import api

_Result = AlterConfigsResponse.AlterConfigsResourceResponse


@api(ApiKey.ALTER_CONFIGS)
async def handle(ctx: HandlerContext, header: RequestHeader, request: AlterConfigsRequest) -> AlterConfigsResponse:
    results = []
    for resource in request.resources:
        try:
            if require_resource_type(resource.resource_type) == ResourceType.BROKER:
                raise ApiError(ErrorCode.INVALID_REQUEST, STATIC_BROKER_MESSAGE)
            # Tools that send back what DescribeConfigs listed (kafka-python, older
            # kafka-configs) echo the read-only diskless.mode.status: not a config to set.
            configs = {c.name: c.value for c in resource.configs if c.name != STATUS_CONFIG}
            await alter_topic(ctx, resource.resource_name, configs, request.validate_only)
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
    return AlterConfigsResponse(throttle_time_ms=0, responses=results)
