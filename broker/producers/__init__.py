"""Idempotent-producer state per partition: epoch/sequence validation, duplicates, snapshots.

`state.ProducerStateManager` is the pure state machine (Kafka's ProducerStateManager rules,
listed in its module docstring); `snapshot` is the versioned on-disk snapshot format.
"""

from broker.producers.snapshot import (
    CorruptSnapshotError,
    SnapshotError,
    UnknownSnapshotVersionError,
)
from broker.producers.state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    CompletedTxn,
    DuplicateBatch,
    EndTxn,
    ProducerEntry,
    ProducerStateManager,
)

__all__ = [
    "BatchMetadata",
    "CompletedTxn",
    "CorruptSnapshotError",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "DuplicateBatch",
    "EndTxn",
    "NUM_BATCHES_TO_RETAIN",
    "ProducerEntry",
    "ProducerStateManager",
    "SnapshotError",
    "UnknownSnapshotVersionError",
]
