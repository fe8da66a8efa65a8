"""Helpers for the partition-log tests: Kafka v2 batches built from header fields and opaque records."""

from __future__ import annotations

import os
from pathlib import Path

import crc32c

from broker.clock import ManualClock
from broker.log import EntryKind, LogConfig, PartitionLog
from broker.protocol.batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, NO_PRODUCER_ID, BatchHeader, parse_header

T0 = 1_700_000_000_000


def make_batch(
    records: int = 1,
    payload: bytes | int = 16,
    max_ts: int = T0,
    base_ts: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
) -> bytearray:
    """A well-formed v2 batch whose record bytes are opaque filler (the log never looks inside)."""
    body = payload if isinstance(payload, bytes) else os.urandom(payload)
    header = BatchHeader(
        base_offset=0,
        batch_length=BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body),
        partition_leader_epoch=-1,
        magic=2,
        crc=0,
        attributes=0,
        last_offset_delta=records - 1,
        base_timestamp=max_ts if base_ts is None else base_ts,
        max_timestamp=max_ts,
        producer_id=producer_id,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=records,
    )
    buf = bytearray(header.pack() + body)
    crc = crc32c.crc32c(memoryview(buf)[21:])
    buf[17:21] = crc.to_bytes(4, "big")
    return buf


def append_batch(
    log: PartitionLog,
    records: int = 1,
    payload: bytes | int = 16,
    max_ts: int = T0,
    kind: EntryKind = EntryKind.RECORDS,
    leader_epoch: int = 0,
    set_hw: bool = True,
):
    data = make_batch(records, payload, max_ts)
    result = log.append(kind, parse_header(data), data, leader_epoch)
    if set_hw:
        log.update_high_watermark(log.log_end_offset)
    return result


def small_config(**overrides) -> LogConfig:
    values = dict(segment_bytes=1024, index_interval_bytes=64)
    values.update(overrides)
    return LogConfig(**values)


def open_log(path: Path, clock: ManualClock | None = None, config: LogConfig | None = None, **kw) -> PartitionLog:
    return PartitionLog.open(path, config or small_config(), clock or ManualClock(T0), **kw)


def crash(log: PartitionLog) -> None:
    """What kill -9 leaves: the page cache has every write, nothing else happens."""
    log._close_without_flush()


def all_entries(log: PartitionLog) -> list:
    return list(log.iter_entries(log.log_start_offset))


def segment_files(path: Path, suffix: str = ".log") -> list[Path]:
    return sorted(p for p in path.iterdir() if p.name.endswith(suffix))
