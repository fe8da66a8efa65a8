"""The partition log: per-partition append-only local log of versioned, checksummed entries."""

from broker.log.checkpoint import CheckpointFormatError, LogCheckpoint
from broker.log.config import KAFKA_NAMES, LogConfig, LogConfigError
from broker.log.entry import FORMAT_VERSION, EntryFormatError, EntryKind
from broker.log.partition_log import (
    AppendResult,
    LogClosedError,
    LogEntry,
    OffsetOutOfRangeError,
    PartitionLog,
    RecoveryReport,
    RemoteRetention,
    SealedSegment,
)

__all__ = [
    "AppendResult",
    "CheckpointFormatError",
    "EntryFormatError",
    "EntryKind",
    "FORMAT_VERSION",
    "KAFKA_NAMES",
    "LogCheckpoint",
    "LogClosedError",
    "LogConfig",
    "LogConfigError",
    "LogEntry",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "RecoveryReport",
    "RemoteRetention",
    "SealedSegment",
]
