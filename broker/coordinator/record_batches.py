"""Coordinator records as Kafka record batches: a coordinator writes (key, value) pairs to its
internal partition inside ordinary v2 batches, so replication, fetch and any consumer treat the
partition like every other classic one. What keys and values mean is the shard's business."""

from __future__ import annotations

from typing import Iterable, Iterator

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

Record = tuple[bytes, "bytes | None"]  # key, value (None: a tombstone)


def build_batch(records: Iterable[Record], timestamp_ms: int) -> bytes:
    """One uncompressed v2 batch (no producer id) holding (key, value) records."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for offset, (key, value) in enumerate(records):
        builder.append(offset, timestamp=timestamp_ms, key=key, value=value, headers=[])
    return bytes(builder.build())


def read_batch(data: bytes | memoryview) -> Iterator[Record]:
    """(key, value) of every record in one batch; only used when loading a partition."""
    for record in DefaultRecordBatch(bytes(data)):
        if record.key is not None:
            yield record.key, record.value
