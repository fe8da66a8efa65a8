"""Topic configs with Kafka's names, defaults and broker-level synonyms.

A topic stores only its overrides (strings, as sent by admin clients). The effective
value of a key is the override, else the broker's synonym setting (for example
`retention.ms` falls back to `log.retention.ms`). Validation raises ApiError with
INVALID_CONFIG and a message in Kafka's wording, so standard tools show something useful.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum
from typing import Callable, Mapping

from .config import LONG_MAX, BrokerConfig
from .log.config import LogConfig
from .protocol.compression import Codec
from .protocol.errors import ApiError, ErrorCode


class ConfigType(IntEnum):
    """DescribeConfigs v3+ `config_type`."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    DOUBLE = 6
    LIST = 7


class ConfigSource(IntEnum):
    """DescribeConfigs `config_source`."""

    TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    synonym: str  # Kafka's broker config key for the default (ServerTopicConfigSynonyms), "" if none
    type: ConfigType
    parse: Callable[[str], object]
    default: str  # Kafka's default, shown while neither the topic nor this broker sets the key
    doc: str


_INT_MAX = 2147483647


def _integer(low: int, high: int = LONG_MAX, kind: str = "LONG") -> Callable[[str], int]:
    """Kafka's INT/LONG parsing and Range validator, with its messages."""
    width = _INT_MAX if kind == "INT" else LONG_MAX

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"Not a number of type {kind}") from None
        if not -width - 1 <= value <= width:
            raise ValueError(f"Not a number of type {kind}")
        if value < low:
            raise ValueError(f"Value must be at least {low}")
        if value > high:
            raise ValueError(f"Value must be no more than {high}")
        return value

    return parse


def _int(low: int, high: int = _INT_MAX) -> Callable[[str], int]:
    return _integer(low, high, "INT")


def _ratio(text: str) -> str:
    """A DOUBLE in [0, 1] (min.cleanable.dirty.ratio), kept as written."""
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("Not a number of type DOUBLE") from None
    if value < 0:
        raise ValueError("Value must be at least 0")
    if value > 1:
        raise ValueError("Value must be no more than 1")
    return text.strip()


def _gzip_level(text: str) -> int:
    level = _int(-1, 9)(text)
    if level == 0:
        raise ValueError("Value must be between 1 and 9 or equal to -1")
    return level


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


def _throttled_replicas(name: str) -> Callable[[str], str]:
    """Kafka's ThrottledReplicaListValidator: `*` or partitionId:brokerId pairs."""

    def parse(text: str) -> str:
        items = [item.strip() for item in text.split(",")] if text.strip() else []
        if items != ["*"] and not all(re.fullmatch(r"([0-9]+:[0-9]+)?", item) for item in items):
            raise ValueError(
                f"{name} must be the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
            )
        return ",".join(items)

    return parse


DISKLESS_ENABLE = "diskless.enable"
REMOTE_STORAGE_ENABLE = "remote.storage.enable"
COMPRESSION_TYPE = "compression.type"
_NOT_YET = "compacted topics are not supported yet (cleanup.policy=delete only)"
_COMPACTION = "Accepted for compatibility; no effect until compacted topics exist."
_LEADER_THROTTLED = "leader.replication.throttled.replicas"
_FOLLOWER_THROTTLED = "follower.replication.throttled.replicas"
# Every topic config of Kafka 4.0 (LogConfig's CONFIG definitions: names, types, defaults and
# validators), and Shoal's own diskless.enable. docs/configuration.md says which ones Shoal
# enforces and which it only accepts.
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
            "delete",
            "Retention policy for old segments; only delete is supported.",
        ),
        TopicConfigDef(
            "retention.ms",
            "log.retention.ms",
            ConfigType.LONG,
            _integer(-1),
            "604800000",
            "Delete segments whose newest record is older than this; -1 keeps forever.",
        ),
        TopicConfigDef(
            "retention.bytes",
            "log.retention.bytes",
            ConfigType.LONG,
            _integer(-1),
            "-1",
            "Delete the oldest segments while a partition is larger than this; -1 = no limit.",
        ),
        TopicConfigDef(
            "segment.bytes",
            "log.segment.bytes",
            ConfigType.INT,
            _int(14),
            "1073741824",
            "Roll the active segment when it reaches this size.",
        ),
        TopicConfigDef(
            "segment.ms",
            "log.roll.ms",
            ConfigType.LONG,
            _integer(1),
            "604800000",
            "Roll the active segment after this long even if it is not full.",
        ),
        TopicConfigDef(
            "segment.jitter.ms",
            "log.roll.jitter.ms",
            ConfigType.LONG,
            _integer(0),
            "0",
            "Accepted for compatibility; segments roll at segment.ms exactly.",
        ),
        TopicConfigDef(
            "segment.index.bytes",
            "log.index.size.max.bytes",
            ConfigType.INT,
            _int(4),
            "10485760",
            "Maximum size of a segment's offset index; a full index rolls the segment.",
        ),
        TopicConfigDef(
            "index.interval.bytes",
            "log.index.interval.bytes",
            ConfigType.INT,
            _int(0),
            "4096",
            "Bytes of log between two offset-index entries.",
        ),
        TopicConfigDef(
            "max.message.bytes",
            "message.max.bytes",
            ConfigType.INT,
            _int(0),
            "1048588",
            "Largest record batch the broker accepts for this topic (MESSAGE_TOO_LARGE above).",
        ),
        TopicConfigDef(
            "min.insync.replicas",
            "min.insync.replicas",
            ConfigType.INT,
            _int(1),
            "1",
            "Replicas that must be in sync for an acks=all produce (NOT_ENOUGH_REPLICAS below).",
        ),
        TopicConfigDef(
            "unclean.leader.election.enable",
            "unclean.leader.election.enable",
            ConfigType.BOOLEAN,
            _boolean,
            "false",
            "Elect a replica outside the ISR when no in-sync replica is alive (may lose acknowledged records).",
        ),
        TopicConfigDef(
            COMPRESSION_TYPE,
            COMPRESSION_TYPE,
            ConfigType.STRING,
            _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
            "producer",
            "The codec batches are stored in: producer keeps the producer's; any other value "
            "makes the broker recompress batches that arrive in another codec.",
        ),
        TopicConfigDef(
            "compression.gzip.level",
            "compression.gzip.level",
            ConfigType.INT,
            _gzip_level,
            "-1",
            "Level of the broker's gzip recompression (compression.type=gzip); -1 = zlib's default.",
        ),
        TopicConfigDef(
            "compression.lz4.level",
            "compression.lz4.level",
            ConfigType.INT,
            _int(1, 17),
            "9",
            "Level of the broker's lz4 recompression (compression.type=lz4); 9 = lz4's fast mode.",
        ),
        TopicConfigDef(
            "compression.zstd.level",
            "compression.zstd.level",
            ConfigType.INT,
            _int(-131072, 22),
            "3",
            "Level of the broker's zstd recompression (compression.type=zstd).",
        ),
        TopicConfigDef(
            "message.timestamp.type",
            "log.message.timestamp.type",
            ConfigType.STRING,
            _one_of("CreateTime", "LogAppendTime"),
            "CreateTime",
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's time.",
        ),
        TopicConfigDef(
            "message.timestamp.before.max.ms",
            "log.message.timestamp.before.max.ms",
            ConfigType.LONG,
            _integer(0),
            str(LONG_MAX),
            "How far in the past a CreateTime timestamp may be (INVALID_TIMESTAMP beyond).",
        ),
        TopicConfigDef(
            "message.timestamp.after.max.ms",
            "log.message.timestamp.after.max.ms",
            ConfigType.LONG,
            _integer(0),
            "3600000",
            "How far in the future a CreateTime timestamp may be (INVALID_TIMESTAMP beyond).",
        ),
        TopicConfigDef(
            "flush.messages",
            "log.flush.interval.messages",
            ConfigType.LONG,
            _integer(1),
            str(LONG_MAX),
            "fsync after this many messages; the default leaves durability to replication.",
        ),
        TopicConfigDef(
            "flush.ms",
            "log.flush.interval.ms",
            ConfigType.LONG,
            _integer(0),
            str(LONG_MAX),
            "fsync when the oldest unflushed message is this old.",
        ),
        TopicConfigDef(
            "file.delete.delay.ms",
            "log.segment.delete.delay.ms",
            ConfigType.LONG,
            _integer(0),
            "60000",
            "Accepted for compatibility; a deleted segment's files go at once.",
        ),
        TopicConfigDef(
            "preallocate",
            "log.preallocate",
            ConfigType.BOOLEAN,
            _boolean,
            "false",
            "Accepted for compatibility; segment files grow as they are written.",
        ),
        TopicConfigDef(
            "delete.retention.ms",
            "log.cleaner.delete.retention.ms",
            ConfigType.LONG,
            _integer(0),
            "86400000",
            _COMPACTION,
        ),
        TopicConfigDef(
            "min.compaction.lag.ms",
            "log.cleaner.min.compaction.lag.ms",
            ConfigType.LONG,
            _integer(0),
            "0",
            _COMPACTION,
        ),
        TopicConfigDef(
            "max.compaction.lag.ms",
            "log.cleaner.max.compaction.lag.ms",
            ConfigType.LONG,
            _integer(1),
            str(LONG_MAX),
            _COMPACTION,
        ),
        TopicConfigDef(
            "min.cleanable.dirty.ratio",
            "log.cleaner.min.cleanable.ratio",
            ConfigType.DOUBLE,
            _ratio,
            "0.5",
            _COMPACTION,
        ),
        TopicConfigDef(
            _LEADER_THROTTLED,
            "",
            ConfigType.LIST,
            _throttled_replicas(_LEADER_THROTTLED),
            "",
            "Accepted for compatibility; Shoal has no replication quotas.",
        ),
        TopicConfigDef(
            _FOLLOWER_THROTTLED,
            "",
            ConfigType.LIST,
            _throttled_replicas(_FOLLOWER_THROTTLED),
            "",
            "Accepted for compatibility; Shoal has no replication quotas.",
        ),
        TopicConfigDef(
            REMOTE_STORAGE_ENABLE,
            "remote.storage.default",
            ConfigType.BOOLEAN,
            _boolean,
            "false",
            "Tiered storage (KIP-405): ranges past the local retention are assembled into Kafka "
            "segments in the object store, and reads below the local log are served from them.",
        ),
        TopicConfigDef(
            "local.retention.ms",
            "log.local.retention.ms",
            ConfigType.LONG,
            _integer(-2),
            "-2",
            "With tiered storage: how long tiered ranges stay in the local log; -2 = retention.ms.",
        ),
        TopicConfigDef(
            "local.retention.bytes",
            "log.local.retention.bytes",
            ConfigType.LONG,
            _integer(-2),
            "-2",
            "With tiered storage: local log size above which tiered ranges go; -2 = retention.bytes.",
        ),
        TopicConfigDef(
            "remote.log.copy.disable",
            "",
            ConfigType.BOOLEAN,
            _boolean,
            "false",
            "Accepted for compatibility; tiering copies while remote.storage.enable is true.",
        ),
        TopicConfigDef(
            "remote.log.delete.on.disable",
            "",
            ConfigType.BOOLEAN,
            _boolean,
            "false",
            "Accepted for compatibility.",
        ),
        TopicConfigDef(
            DISKLESS_ENABLE,
            "diskless.default",
            ConfigType.BOOLEAN,
            _boolean,
            "true",
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
    _check_compaction_lags(clean)
    return clean


def _check_compaction_lags(overrides: Mapping[str, str]) -> None:
    """Kafka's LogConfig.validateValues: the one rule across two keys."""
    lags = [
        int(overrides.get(key, TOPIC_CONFIGS[key].default))
        for key in ("min.compaction.lag.ms", "max.compaction.lag.ms")
    ]
    if lags[0] > lags[1]:
        raise ApiError(
            ErrorCode.INVALID_CONFIG,
            f"conflict topic config setting min.compaction.lag.ms ({lags[0]}) > max.compaction.lag.ms ({lags[1]})",
        )


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


def has_broker_setting(definition: TopicConfigDef) -> bool:
    """Whether this broker has the key's synonym (Shoal has Kafka's broker defaults only for
    the topic keys it enforces; the others show Kafka's default)."""
    return bool(definition.synonym) and definition.synonym.replace(".", "_") in BrokerConfig.__struct_fields__


def describe(overrides: Mapping[str, str], broker: BrokerConfig) -> list[ConfigEntry]:
    """Every topic config with its effective value and where it comes from."""
    entries = []
    for definition in TOPIC_CONFIGS.values():
        if definition.name in overrides:
            value, source = overrides[definition.name], ConfigSource.TOPIC_CONFIG
        elif not has_broker_setting(definition):
            value, source = definition.default, ConfigSource.DEFAULT_CONFIG
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
    compression: Codec | None = None  # compression.type: None = producer (keep the batch's codec)
    compression_level: int = -1  # compression.<codec>.level of that codec
    max_decompressed_bytes: int = 64 << 20  # the broker's message.decompressed.max.bytes
    unclean_leader_election: bool = False


def effective(overrides: Mapping[str, str], broker: BrokerConfig) -> TopicSettings:
    values = {e.name: e.value for e in describe(overrides, broker)}
    number = lambda key: int(values[key])  # noqa: E731 - a local reader
    codec = values[COMPRESSION_TYPE]
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
        compression=None if codec == "producer" else _CODECS[codec],
        compression_level=number(f"compression.{codec}.level") if codec in ("gzip", "lz4", "zstd") else -1,
        max_decompressed_bytes=broker.message_decompressed_max_bytes,
        unclean_leader_election=values["unclean.leader.election.enable"] == "true",
    )


_CODECS = {
    "uncompressed": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}


def _local(local: int, total: int) -> int:
    """Kafka's rule: -2 takes the total retention; a local limit never exceeds a finite total."""
    if local == -2:
        return total
    if total >= 0 and (local < 0 or local > total):
        return total
    return local
