"""Coordinator records as Kafka record batches: a coordinator writes (key, value) pairs to its
internal partition inside ordinary v2 batches, so replication, fetch and any consumer treat the
partition like every other classic one. What keys and values mean is the shard's business."""

from __future__ import annotations

from typing import Iterable, Iterator

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

Record = tuple[bytes, "bytes | None"]  # key, value (None: a tombstone)


def build_batch(records: Iterable[Record], timestamp_ms: int, producer: "tuple[int, int, int] | None" = None) -> bytes:
    """One uncompressed v2 batch holding (key, value) records: without a producer id, or,
    with `producer` (producer id, epoch, base sequence), a transactional batch of that
    producer (the group coordinator's TxnOffsetCommit)."""
    producer_id, epoch, sequence = producer if producer is not None else (-1, -1, -1)
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=producer is not None,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 30,
    )
    for offset, (key, value) in enumerate(records):
        builder.append(offset, timestamp=timestamp_ms, key=key, value=value, headers=[])
    return bytes(builder.build())


def read_batch(data: bytes | memoryview) -> Iterator[Record]:
    """(key, value) of every record in one batch; only used when loading a partition. A
    control batch (a transaction marker the transaction coordinator wrote, e.g. to a
    `__consumer_offsets` partition added by AddOffsetsToTxn) holds no coordinator record."""
    batch = DefaultRecordBatch(bytes(data))
    if batch.is_control_batch:
        return
    for record in batch:
        if record.key is not None:
            yield record.key, record.value


def marker_commits(data: bytes | memoryview) -> bool:
    """Whether a control batch is a COMMIT marker (else ABORT): its record's key is Kafka's
    EndTransactionMarker key (int16 version, int16 type: 0 abort, 1 commit)."""
    for record in DefaultRecordBatch(bytes(data)):
        key = record.key or b""
        return len(key) >= 4 and int.from_bytes(key[2:4], "big") == 1
    return False
