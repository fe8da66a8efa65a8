"""Per-partition log settings: snake_case mirrors of Kafka's topic configs, validated once.

Each field keeps Kafka's meaning and default; `KAFKA_NAMES` maps fields to Kafka's dotted
names so AlterConfigs / DescribeConfigs handlers can translate without a second table.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class LogConfigError(ValueError):
    """A log setting outside its valid range (handlers map this to INVALID_CONFIG)."""


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1073741824  # segment.bytes: roll when the active segment would exceed it
    segment_ms: int = 604800000  # segment.ms: roll when the active segment is this old
    retention_ms: int = 604800000  # retention.ms (-1 = unlimited), by a segment's largest timestamp
    retention_bytes: int = -1  # retention.bytes (-1 = unlimited), per partition
    flush_messages: int = INT64_MAX  # flush.messages: fsync after this many unflushed offsets
    flush_ms: int = INT64_MAX  # flush.ms: fsync when the last flush is this old
    index_interval_bytes: int = 4096  # index.interval.bytes: bytes between offset-index entries
    segment_index_bytes: int = 10485760  # segment.index.bytes: roll when an index reaches this size
    # Diskless partitions: entries only refer to batches kept elsewhere, so segment.bytes and
    # retention.bytes count the referenced batch bytes (what Kafka would have stored), not the entries.
    size_by_batch_bytes: bool = False

    def __post_init__(self) -> None:
        _check("segment.bytes", self.segment_bytes, 1, INT32_MAX)
        _check("segment.ms", self.segment_ms, 1, INT64_MAX)
        _check("retention.ms", self.retention_ms, -1, INT64_MAX)
        _check("retention.bytes", self.retention_bytes, -1, INT64_MAX)
        _check("flush.messages", self.flush_messages, 1, INT64_MAX)
        _check("flush.ms", self.flush_ms, 0, INT64_MAX)
        _check("index.interval.bytes", self.index_interval_bytes, 0, INT32_MAX)
        # one time-index entry (12 bytes) must fit, or every append would roll
        _check("segment.index.bytes", self.segment_index_bytes, 12, INT32_MAX)

    @classmethod
    def from_kafka_configs(cls, configs: Mapping[str, str | int], base: "LogConfig | None" = None) -> "LogConfig":
        """Build from Kafka dotted names (e.g. {"segment.bytes": "1048576"}); unknown keys are ignored."""
        values = {f.name: getattr(base or cls(), f.name) for f in fields(cls)}
        for name, field_name in FIELD_FOR_KAFKA_NAME.items():
            if name in configs:
                raw = configs[name]
                try:
                    values[field_name] = int(raw)
                except (TypeError, ValueError):
                    raise LogConfigError(f"{name} must be an integer, got {raw!r}") from None
        return cls(**values)


def _check(name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise LogConfigError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise LogConfigError(f"{name} must be between {low} and {high}, got {value}")


KAFKA_NAMES = {
    "segment_bytes": "segment.bytes",
    "segment_ms": "segment.ms",
    "retention_ms": "retention.ms",
    "retention_bytes": "retention.bytes",
    "flush_messages": "flush.messages",
    "flush_ms": "flush.ms",
    "index_interval_bytes": "index.interval.bytes",
    "segment_index_bytes": "segment.index.bytes",
}
FIELD_FOR_KAFKA_NAME = {v: k for k, v in KAFKA_NAMES.items()}
