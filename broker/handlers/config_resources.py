"""A helper shared by the API modules, not an API: what DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs share (resource types, the broker's own static, read-only entries,
and applying a change to a topic)."""

from __future__ import annotations

from enum import IntEnum
from typing import Mapping

from ..config import CONFIG_KEYS
from ..context import HandlerContext
from ..protocol.errors import ApiError, ErrorCode
from ..topic_config import ConfigEntry, ConfigSource, ConfigType, broker_value
from ..topics import Topic


class ResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4


def broker_entries(ctx: HandlerContext) -> list[ConfigEntry]:
    entries = []
    for key in CONFIG_KEYS:
        value, explicit = broker_value(ctx.config, key)
        source = ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(key, value, source, ConfigType.STRING, "see docs/configuration.md"))
    return entries


def check_broker_resource(ctx: HandlerContext, name: str) -> None:
    if name not in ("", str(ctx.node_id)):
        raise ApiError(ErrorCode.INVALID_REQUEST, f"broker {name} is not this broker ({ctx.node_id})")


def require_resource_type(resource_type: int) -> ResourceType:
    try:
        return ResourceType(resource_type)
    except ValueError:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"unsupported config resource type {resource_type}") from None


async def alter_topic(
    ctx: HandlerContext, topic_name: str, overrides: Mapping[str, str | None], validate_only: bool
) -> None:
    """Replace a topic's overrides (validated) unless validate_only."""
    topic: Topic | None = ctx.catalog.get(topic_name)
    if topic is None:
        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic_name!r}")
    if validate_only:
        ctx.catalog.check_configs(topic_name, overrides)
    else:
        await ctx.catalog.set_configs(topic_name, dict(overrides))


STATIC_BROKER_MESSAGE = (
    "broker configs are static in this version: change them in the config file, "
    "SHOAL_* environment or flags, and restart"
)
