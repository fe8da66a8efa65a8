"""One hosted partition: its log, its idempotent-producer state, and the append path.

`validate_batches` is pure (bytes + settings + time in, headers or an ApiError out) so the
diskless commit path can run the same checks on batches it never stores locally.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .clock import Clock
from .log import EntryKind, PartitionLog
from .producers import DuplicateBatch, ProducerStateManager
from .protocol import batch as batches
from .diskless.coordinates import WalRef, encode_ref
from .protocol.batch import BATCH_HEADER_SIZE, BatchFormatError, BatchHeader, UnsupportedMagicError, parse_header
from .protocol.errors import ApiError, ErrorCode
from .topic_config import TopicSettings

log = logging.getLogger(__name__)

MAX_COMPRESSION_CODEC = 4  # none, gzip, snappy, lz4, zstd


@dataclass(slots=True)
class AppendOutcome:
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    appended_bytes: int


def validate_batches(records: memoryview, settings: TopicSettings, now_ms: int) -> list[tuple[int, BatchHeader]]:
    """Check every batch of a produce request's partition data; all or nothing, like Kafka."""
    if len(records) == 0:
        raise ApiError(ErrorCode.INVALID_RECORD, "produce request has no record batches")
    try:
        found = list(batches.split_batches(records))
    except UnsupportedMagicError as exc:
        raise ApiError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, str(exc)) from None
    except BatchFormatError as exc:
        raise ApiError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    for pos, header in found:
        size = header.size
        if size > settings.max_message_bytes:
            raise ApiError(ErrorCode.MESSAGE_TOO_LARGE,
                           f"batch of {size} bytes exceeds max.message.bytes={settings.max_message_bytes}")
        if size > settings.log.segment_bytes:
            raise ApiError(ErrorCode.RECORD_LIST_TOO_LARGE,
                           f"batch of {size} bytes exceeds segment.bytes={settings.log.segment_bytes}")
        if not batches.crc_is_valid(records[pos:pos + size], header):
            raise ApiError(ErrorCode.CORRUPT_MESSAGE, "record batch CRC32C mismatch")
        if header.records_count <= 0 or header.last_offset_delta != header.records_count - 1:
            raise ApiError(ErrorCode.INVALID_RECORD,
                           f"batch claims {header.records_count} records with lastOffsetDelta {header.last_offset_delta}")
        if header.compression > MAX_COMPRESSION_CODEC:
            raise ApiError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression codec {header.compression}")
        if header.is_control:
            raise ApiError(ErrorCode.INVALID_RECORD, "clients may not write control batches")
        if header.is_transactional:
            raise ApiError(ErrorCode.INVALID_TXN_STATE, "transactions are not supported yet")
        if not settings.log_append_time:
            _check_timestamps(header, settings, now_ms)
    return found


def _check_timestamps(header: BatchHeader, settings: TopicSettings, now_ms: int) -> None:
    earliest = now_ms - settings.timestamp_before_max_ms
    latest = now_ms + settings.timestamp_after_max_ms
    for ts in (header.base_timestamp, header.max_timestamp):
        if ts >= 0 and not earliest <= ts <= latest:
            raise ApiError(ErrorCode.INVALID_TIMESTAMP,
                           f"timestamp {ts} is out of range [{earliest}, {latest}] "
                           "(message.timestamp.before.max.ms / message.timestamp.after.max.ms)")


class Partition:
    def __init__(self, topic: str, index: int, directory: Path, log_: PartitionLog,
                 producers: ProducerStateManager, settings: TopicSettings, clock: Clock,
                 on_append: Callable[["Partition"], None]) -> None:
        self.topic = topic
        self.index = index
        self.key = (topic, index)
        self.directory = directory
        self.log = log_
        self.producers = producers
        self.settings = settings
        self.leader_epoch = 0
        self._clock = clock
        self._on_append = on_append

    @classmethod
    def open(cls, topic: str, index: int, directory: Path, settings: TopicSettings, clock: Clock,
             producer_expiration_ms: int, on_append: Callable[["Partition"], None]) -> "Partition":
        producers = ProducerStateManager(clock, producer_expiration_ms)
        log_ = PartitionLog.open(directory, settings.log, clock,
                                 on_segment_roll=lambda offset: producers.take_snapshot(directory, offset))
        partition = cls(topic, index, directory, log_, producers, settings, clock, on_append)
        partition._rebuild_producer_state()
        log_.update_high_watermark(log_.log_end_offset)
        return partition

    def _rebuild_producer_state(self) -> None:
        """Latest snapshot plus the log tail after it: cost is the tail, not the log."""
        start = max(self.producers.load_latest_snapshot(self.directory, self.log.log_end_offset),
                    self.log.log_start_offset)
        replayed = 0
        for entry in self.log.iter_entries(start):
            self.producers.replay(entry.header, entry.base_offset)
            replayed += 1
        if replayed:
            log.info("%s-%s: replayed %d entries from offset %d into producer state",
                     self.topic, self.index, replayed, start)

    @property
    def isr_size(self) -> int:
        return 1

    def append_records(self, records: memoryview, acks: int) -> AppendOutcome:
        """Validate, deduplicate and append a produce request's batches for this partition."""
        now_ms = self._clock.now_ms()
        found = validate_batches(records, self.settings, now_ms)
        self.check_acks(acks)
        items: list[tuple[BatchHeader, memoryview | bytearray]] = []
        for pos, header in found:
            data: memoryview | bytearray = records[pos:pos + header.size]
            if self.settings.log_append_time:
                data = bytearray(data)
                batches.stamp_log_append_time(data, header, now_ms)
            items.append((header, data))
        return self._append(EntryKind.RECORDS, items)

    def prepare_diskless(self, records: memoryview, acks: int) -> list[tuple[memoryview, bytes]]:
        """Representative side of a diskless produce: validate like append_records and return
        each batch (unmodified, for the WAL object) with the 61-byte header to commit."""
        now_ms = self._clock.now_ms()
        found = validate_batches(records, self.settings, now_ms)
        self.check_acks(acks)
        prepared = []
        for pos, header in found:
            batch = records[pos:pos + header.size]
            if self.settings.log_append_time:
                head = bytes(batches.log_append_time_header(batch, header, now_ms))
            else:
                head = bytes(batch[:BATCH_HEADER_SIZE])
            prepared.append((batch, head))
        return prepared

    def append_coordinates(self, batches_: list[tuple[bytes, WalRef]], acks: int) -> AppendOutcome:
        """Commit diskless batches: (61-byte header as the representative stamped it, where the
        batch lives). Same producer-state checks and offset assignment as append_records."""
        self.check_acks(acks)
        items = [(parse_header(head), head + encode_ref(ref)) for head, ref in batches_]
        return self._append(EntryKind.COORDINATES, items)

    def check_acks(self, acks: int) -> None:
        if acks == -1 and self.isr_size < self.settings.min_insync_replicas:
            raise ApiError(ErrorCode.NOT_ENOUGH_REPLICAS,
                           f"in-sync replicas {self.isr_size} < min.insync.replicas={self.settings.min_insync_replicas}")

    def _append(self, kind: EntryKind, items: list[tuple[BatchHeader, memoryview | bytearray | bytes]]) -> AppendOutcome:
        """Deduplicate against producer state and append; a duplicate answers with its offsets."""
        first_offset = -1
        appended = 0
        append_time = items[0][0].max_timestamp if self.settings.log_append_time and items else -1
        for header, data in items:
            verdict = self.producers.check(header)
            if isinstance(verdict, DuplicateBatch):
                if first_offset < 0:
                    first_offset = verdict.base_offset
                continue
            if verdict is not None:
                raise ApiError(verdict, f"producer {header.producer_id} epoch {header.producer_epoch} "
                                        f"sequence {header.base_sequence}: {verdict.name}")
            result = self.log.append(kind, header, data, self.leader_epoch)
            self.producers.on_append(header, result.base_offset, header.max_timestamp)
            if first_offset < 0:
                first_offset = result.base_offset
            appended += header.size
        if appended:
            self.log.update_high_watermark(self.log.log_end_offset)
            self._on_append(self)
        return AppendOutcome(first_offset, append_time, self.log.log_start_offset, appended)

    def update_settings(self, settings: TopicSettings) -> None:
        self.settings = settings
        self.log.update_config(settings.log)

    def close(self) -> None:
        self.producers.take_snapshot(self.directory, self.log.log_end_offset)
        self.log.close()
