"""Topic configs with Kafka's names, defaults and broker-level synonyms.

A topic stores only its overrides (strings, as sent by admin clients). The effective
value of a key is the override, else the broker's synonym setting (for example
`retention.ms` falls back to `log.retention.ms`). Validation raises ApiError with
INVALID_CONFIG and a message in Kafka's wording, so standard tools show something useful.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Callable, Mapping

from .config import LONG_MAX, BrokerConfig
from .log.config import LogConfig
from .protocol.errors import ApiError, ErrorCode


class ConfigType(IntEnum):
    """DescribeConfigs v3+ `config_type`."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    LIST = 7


class ConfigSource(IntEnum):
    """DescribeConfigs `config_source`."""

    TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    synonym: str  # the broker config key that provides the default
    type: ConfigType
    parse: Callable[[str], object]
    doc: str


def _integer(low: int, high: int = LONG_MAX) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError("Not a number") from None
        if not low <= value <= high:
            raise ValueError(f"Value must be at least {low}" + ("" if high == LONG_MAX else f" and at most {high}"))
        return value

    return parse


def _boolean(text: str) -> str:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("Expected value to be either true or false")
    return value


def _one_of(*allowed: str, unsupported: Mapping[str, str] | None = None) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip()
        if unsupported and value in unsupported:
            raise ValueError(unsupported[value])
        if value not in allowed:
            raise ValueError(f"String must be one of: {', '.join(allowed)}")
        return value

    return parse


_INT_MAX = 2147483647
DISKLESS_ENABLE = "diskless.enable"
REMOTE_STORAGE_ENABLE = "remote.storage.enable"
_NOT_YET = "compacted topics are not supported yet (cleanup.policy=delete only)"
TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        TopicConfigDef(
            "cleanup.policy",
            "log.cleanup.policy",
            ConfigType.LIST,
            _one_of(
                "delete", unsupported={"compact": _NOT_YET, "compact,delete": _NOT_YET, "delete,compact": _NOT_YET}
            ),
            "Retention policy for old segments; only delete is supported.",
        ),
        TopicConfigDef(
            "retention.ms",
            "log.retention.ms",
            ConfigType.LONG,
            _integer(-1),
            "Delete segments whose newest record is older than this; -1 keeps forever.",
        ),
        TopicConfigDef(
            "retention.bytes",
            "log.retention.bytes",
            ConfigType.LONG,
            _integer(-1),
            "Delete the oldest segments while a partition is larger than this; -1 = no limit.",
        ),
        TopicConfigDef(
            "segment.bytes",
            "log.segment.bytes",
            ConfigType.INT,
            _integer(14, _INT_MAX),
            "Roll the active segment when it reaches this size.",
        ),
        TopicConfigDef(
            "segment.ms",
            "log.roll.ms",
            ConfigType.LONG,
            _integer(1),
            "Roll the active segment after this long even if it is not full.",
        ),
        TopicConfigDef(
            "segment.index.bytes",
            "log.index.size.max.bytes",
            ConfigType.INT,
            _integer(4, _INT_MAX),
            "Maximum size of a segment's offset index; a full index rolls the segment.",
        ),
        TopicConfigDef(
            "index.interval.bytes",
            "log.index.interval.bytes",
            ConfigType.INT,
            _integer(0, _INT_MAX),
            "Bytes of log between two offset-index entries.",
        ),
        TopicConfigDef(
            "max.message.bytes",
            "message.max.bytes",
            ConfigType.INT,
            _integer(0, _INT_MAX),
            "Largest record batch the broker accepts for this topic (MESSAGE_TOO_LARGE above).",
        ),
        TopicConfigDef(
            "min.insync.replicas",
            "min.insync.replicas",
            ConfigType.INT,
            _integer(1, _INT_MAX),
            "Replicas that must be in sync for an acks=all produce (NOT_ENOUGH_REPLICAS below).",
        ),
        TopicConfigDef(
            "message.timestamp.type",
            "log.message.timestamp.type",
            ConfigType.STRING,
            _one_of("CreateTime", "LogAppendTime"),
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's time.",
        ),
        TopicConfigDef(
            "message.timestamp.before.max.ms",
            "log.message.timestamp.before.max.ms",
            ConfigType.LONG,
            _integer(0),
            "How far in the past a CreateTime timestamp may be (INVALID_TIMESTAMP beyond).",
        ),
        TopicConfigDef(
            "message.timestamp.after.max.ms",
            "log.message.timestamp.after.max.ms",
            ConfigType.LONG,
            _integer(0),
            "How far in the future a CreateTime timestamp may be (INVALID_TIMESTAMP beyond).",
        ),
        TopicConfigDef(
            "flush.messages",
            "log.flush.interval.messages",
            ConfigType.LONG,
            _integer(1),
            "fsync after this many messages; the default leaves durability to replication.",
        ),
        TopicConfigDef(
            "flush.ms",
            "log.flush.interval.ms",
            ConfigType.LONG,
            _integer(0),
            "fsync when the oldest unflushed message is this old.",
        ),
        TopicConfigDef(
            REMOTE_STORAGE_ENABLE,
            "remote.storage.default",
            ConfigType.BOOLEAN,
            _boolean,
            "Tiered storage (KIP-405): ranges past the local retention are assembled into Kafka "
            "segments in the object store, and reads below the local log are served from them.",
        ),
        TopicConfigDef(
            "local.retention.ms",
            "log.local.retention.ms",
            ConfigType.LONG,
            _integer(-2),
            "With tiered storage: how long tiered ranges stay in the local log; -2 = retention.ms.",
        ),
        TopicConfigDef(
            "local.retention.bytes",
            "log.local.retention.bytes",
            ConfigType.LONG,
            _integer(-2),
            "With tiered storage: local log size above which tiered ranges go; -2 = retention.bytes.",
        ),
        TopicConfigDef(
            DISKLESS_ENABLE,
            "diskless.default",
            ConfigType.BOOLEAN,
            _boolean,
            "Record bytes go to shared WAL objects in the object store; the partition log keeps "
            "batch headers and coordinates. Set at creation.",
        ),
    )
}


def validate_overrides(overrides: Mapping[str, str | None]) -> dict[str, str]:
    """Check keys and values; return the normalized overrides. Raises INVALID_CONFIG."""
    clean: dict[str, str] = {}
    for name, value in overrides.items():
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        if value is None:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Null value not supported for topic config {name}")
        try:
            parsed = definition.parse(value)
        except ValueError as exc:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: {exc}") from None
        clean[name] = str(parsed)
    return clean


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    source: ConfigSource
    type: ConfigType
    doc: str


def broker_value(broker: BrokerConfig, key: str) -> tuple[str, bool]:
    """(value as Kafka would print it, whether the operator set it rather than the default)."""
    attribute = key.replace(".", "_")
    value = getattr(broker, attribute)
    default = BrokerConfig.__struct_defaults__[BrokerConfig.__struct_fields__.index(attribute)]
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return text, value != default


def describe(overrides: Mapping[str, str], broker: BrokerConfig) -> list[ConfigEntry]:
    """Every topic config with its effective value and where it comes from."""
    entries = []
    for definition in TOPIC_CONFIGS.values():
        if definition.name in overrides:
            value, source = overrides[definition.name], ConfigSource.TOPIC_CONFIG
        elif definition.synonym == "log.cleanup.policy":
            value, source = "delete", ConfigSource.DEFAULT_CONFIG
        else:
            value, explicit = broker_value(broker, definition.synonym)
            source = ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(definition.name, value, source, definition.type, definition.doc))
    return entries


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """Effective, typed topic configuration used by the produce path and the log."""

    max_message_bytes: int
    min_insync_replicas: int
    log_append_time: bool
    diskless: bool
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    log: LogConfig
    remote_storage: bool = False
    local_retention_ms: int = -1  # resolved: -2 (the default) means retention.ms
    local_retention_bytes: int = -1  # resolved: -2 means retention.bytes


def effective(overrides: Mapping[str, str], broker: BrokerConfig) -> TopicSettings:
    values = {e.name: e.value for e in describe(overrides, broker)}
    number = lambda key: int(values[key])  # noqa: E731 - a two-use local reader
    return TopicSettings(
        max_message_bytes=number("max.message.bytes"),
        min_insync_replicas=number("min.insync.replicas"),
        log_append_time=values["message.timestamp.type"] == "LogAppendTime",
        diskless=values[DISKLESS_ENABLE] == "true",
        timestamp_before_max_ms=number("message.timestamp.before.max.ms"),
        timestamp_after_max_ms=number("message.timestamp.after.max.ms"),
        log=LogConfig(
            segment_bytes=number("segment.bytes"),
            segment_ms=number("segment.ms"),
            retention_ms=number("retention.ms"),
            retention_bytes=number("retention.bytes"),
            flush_messages=number("flush.messages"),
            flush_ms=number("flush.ms"),
            index_interval_bytes=number("index.interval.bytes"),
            segment_index_bytes=number("segment.index.bytes"),
            size_by_batch_bytes=values[DISKLESS_ENABLE] == "true",
        ),
        remote_storage=values[REMOTE_STORAGE_ENABLE] == "true",
        local_retention_ms=_local(number("local.retention.ms"), number("retention.ms")),
        local_retention_bytes=_local(number("local.retention.bytes"), number("retention.bytes")),
    )


def _local(local: int, total: int) -> int:
    """Kafka's rule: -2 takes the total retention; a local limit never exceeds a finite total."""
    if local == -2:
        return total
    if total >= 0 and (local < 0 or local > total):
        return total
    return local
