"""DescribeConfigs for topics (effective values with their source) and this broker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse

from ..context import HandlerContext
from ..modes.status import STATUS_CONFIG, partition_modes, switch_status
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from ..topic_config import ConfigEntry, ConfigSource, ConfigType, TOPIC_CONFIGS, broker_value, describe
from .config_resources import ResourceType, broker_entries, check_broker_resource, require_resource_type
from .registry import api

if TYPE_CHECKING:
    from ..topics import Topic

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Config = _Result.DescribeConfigsResourceResult
_Synonym = _Config.DescribeConfigsSynonym


@api(ApiKey.DESCRIBE_CONFIGS)
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    results = []
    for resource in request.resources:
        try:
            kind = require_resource_type(resource.resource_type)
            if kind == ResourceType.TOPIC:
                topic = ctx.catalog.get(resource.resource_name)
                if topic is None:
                    raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {resource.resource_name!r}")
                entries = [*describe(topic.configs, ctx.config), _mode_status(ctx, topic)]
            else:
                check_broker_resource(ctx, resource.resource_name)
                entries = broker_entries(ctx)
        except ApiError as exc:
            results.append(
                _Result(
                    error_code=exc.code,
                    error_message=exc.message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=[],
                )
            )
            continue
        keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        configs = [
            _Config(
                name=e.name,
                value=e.value,
                read_only=kind == ResourceType.BROKER or e.name == STATUS_CONFIG,
                config_source=e.source,
                is_default=e.source == ConfigSource.DEFAULT_CONFIG,
                is_sensitive=False,
                synonyms=_synonyms(ctx, e) if request.include_synonyms else [],
                config_type=e.type,
                documentation=e.doc if request.include_documentation else None,
            )
            for e in entries
            if keys is None or e.name in keys
        ]
        results.append(
            _Result(
                error_code=0,
                error_message=None,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _mode_status(ctx: HandlerContext, topic: Topic) -> ConfigEntry:
    """Read-only: the topic's mode, or how far a switch of it has come (modes/status.py)."""
    return ConfigEntry(
        STATUS_CONFIG,
        switch_status(topic, partition_modes(topic, ctx.view)),
        ConfigSource.TOPIC_CONFIG,  # shown beside diskless.enable by tools that hide defaults
        ConfigType.STRING,
        "Read only: the topic's mode once every partition is in it, else the progress of the switch.",
    )


def _synonyms(ctx: HandlerContext, entry: ConfigEntry) -> list[Any]:
    """Where a topic value could come from, most specific first (Kafka's synonym list)."""
    found = []
    if entry.source == ConfigSource.TOPIC_CONFIG:
        found.append(_Synonym(name=entry.name, value=entry.value, source=ConfigSource.TOPIC_CONFIG))
    definition = TOPIC_CONFIGS.get(entry.name)
    if definition is not None and definition.synonym.replace(".", "_") in ctx.config.__struct_fields__:
        value, explicit = broker_value(ctx.config, definition.synonym)
        found.append(
            _Synonym(
                name=definition.synonym,
                value=value,
                source=ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG,
            )
        )
    return found
