"""PartitionLog behaviour: append, read semantics, indexes, rolling, retention, truncation, flush."""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from broker.clock import ManualClock
from broker.log import EntryKind, LogClosedError, LogConfig, OffsetOutOfRangeError, PartitionLog
from broker.protocol.batch import BatchFormatError, crc_is_valid, parse_header
from broker.protocol.errors import ApiError, ErrorCode
from tests.unit.test_log_support import (
    T0,
    all_entries,
    append_batch,
    make_batch,
    open_log,
    segment_files,
    small_config,
)


def fill(log: PartitionLog, n: int, records: int = 3, payload: int = 40, ts_step: int = 1) -> list[int]:
    return [append_batch(log, records, payload, T0 + i * ts_step).base_offset for i in range(n)]


# ---- append -----------------------------------------------------------------------------------


def test_append_assigns_dense_offsets_and_patches_header(tmp_path):
    log = open_log(tmp_path)
    data = make_batch(5, b"r" * 100)
    original = bytes(data)
    header = parse_header(data)
    first = log.append(EntryKind.RECORDS, header, data, leader_epoch=7)
    assert (first.base_offset, first.last_offset) == (0, 4)
    assert header.base_offset == 0 and header.partition_leader_epoch == 7
    second = append_batch(log, records=2)
    assert (second.base_offset, second.last_offset, log.log_end_offset) == (5, 6, 7)
    assert bytes(data) == original  # the caller's buffer is untouched
    entry = log.read(0, 1 << 20, 7)[0]
    assert entry.kind is EntryKind.RECORDS and entry.header.partition_leader_epoch == 7
    assert bytes(entry.data[16:]) == original[16:] and bytes(entry.payload) == b"r" * 100
    assert crc_is_valid(entry.data, entry.header)  # still a valid Kafka batch
    log.close()


def test_append_accepts_memoryview_and_coordinates(tmp_path):
    log = open_log(tmp_path)
    buf = bytearray(b"\0" * 7) + make_batch(1, b"") + b"tail"
    view = memoryview(buf)[7 : 7 + 61]
    header = parse_header(view)
    coords = bytes(view) + b"wal-object-17:0:512"
    log.append(EntryKind.COORDINATES, header, coords, 1)
    log.append(EntryKind.RECORDS, parse_header(view), view, 1)
    entries = log.read(0, 1 << 20, 2)
    assert [e.kind for e in entries] == [EntryKind.COORDINATES, EntryKind.RECORDS]
    assert bytes(entries[0].payload) == b"wal-object-17:0:512" and len(entries[1].data) == 61
    log.close()


def test_append_rejects_malformed_input(tmp_path):
    log = open_log(tmp_path)
    data = make_batch(1, b"x" * 10)
    with pytest.raises(BatchFormatError):
        log.append(EntryKind.RECORDS, parse_header(data), data[:-1], 0)  # batchLength disagrees
    with pytest.raises(BatchFormatError):
        log.append(EntryKind.COORDINATES, parse_header(data), data[:30], 0)
    assert log.log_end_offset == 0 and log.size_bytes == 0
    log.close()
    with pytest.raises(LogClosedError):
        log.append(EntryKind.RECORDS, parse_header(data), data, 0)


def test_many_segments_round_trip(tmp_path):
    rolls: list[int] = []
    log = open_log(tmp_path, config=small_config(segment_bytes=500), on_segment_roll=rolls.append)
    bodies = []
    for i in range(200):
        body = os.urandom(1 + i % 90)
        bodies.append(body)
        append_batch(log, records=1 + i % 4, payload=body, max_ts=T0 + i)
    assert len(log.segment_base_offsets) > 20
    assert rolls == log.segment_base_offsets[1:]
    for seg in segment_files(tmp_path):
        assert seg.stat().st_size <= 500
    entries = all_entries(log)
    assert [bytes(e.payload) for e in entries] == bodies
    assert all(a.last_offset + 1 == b.base_offset for a, b in zip(entries, entries[1:]))
    assert entries[-1].last_offset + 1 == log.log_end_offset
    assert log.size_bytes == sum(p.stat().st_size for p in segment_files(tmp_path))
    log.close()
    reopened = open_log(tmp_path, config=small_config(segment_bytes=500))
    assert [bytes(e.payload) for e in all_entries(reopened)] == bodies
    reopened.close()


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 300)), min_size=1, max_size=40),
    segment_bytes=st.integers(100, 2000),
    interval=st.integers(0, 500),
    data=st.data(),
)
def test_read_matches_model(tmp_path_factory, sizes, segment_bytes, interval, data):
    path = tmp_path_factory.mktemp("log")
    log = open_log(path, config=small_config(segment_bytes=segment_bytes, index_interval_bytes=interval))
    model = []  # (base, last, data_size)
    for records, payload in sizes:
        r = append_batch(log, records, payload)
        model.append((r.base_offset, r.last_offset, 61 + payload))
    leo = log.log_end_offset
    start = data.draw(st.integers(0, leo))
    max_bytes = data.draw(st.integers(0, 3000))
    max_offset = data.draw(st.integers(0, leo + 3))
    got = [(e.base_offset, e.last_offset, e.size) for e in log.read(start, max_bytes, max_offset)]
    expected, total = [], 0
    for base, last, size in model:
        if start >= max_offset:  # nothing at or above start_offset is visible
            break
        if last < start or base >= max_offset:
            continue
        if expected and total + size > max_bytes:
            break
        expected.append((base, last, size))
        total += size
    assert got == expected
    log.close()


def test_read_semantics(tmp_path):
    log = open_log(tmp_path, config=small_config(segment_bytes=400))
    fill(log, 20, records=3, payload=40)  # entries of 101 bytes at offsets 0, 3, 6, ...
    assert [e.base_offset for e in log.read(7, 1000, 60)][:2] == [6, 9]  # start inside a batch
    assert [e.base_offset for e in log.read(7, 202, 60)] == [6, 9]
    assert [e.base_offset for e in log.read(7, 201, 60)] == [6]
    assert [e.base_offset for e in log.read(7, 0, 60)] == [6]  # first entry always whole (KIP-74)
    assert [e.base_offset for e in log.read(7, 1, 60)] == [6]
    assert [e.base_offset for e in log.read(0, 10_000, 9)] == [0, 3, 6]  # max_offset is exclusive
    assert [e.base_offset for e in log.read(0, 10_000, 10)] == [0, 3, 6, 9]
    assert log.read(9, 10_000, 9) == []
    assert log.read(60, 10_000, 60) == []  # at the log end offset: nothing, no error
    assert len(log.read(0, 10_000, 10_000)) == 20  # max_offset above LEO is clamped
    with pytest.raises(OffsetOutOfRangeError) as err:
        log.read(61, 100, 100)
    assert isinstance(err.value, ApiError) and err.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert (err.value.log_start_offset, err.value.log_end_offset) == (0, 60)
    log.delete_records_before(10)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(9, 100, 100)
    assert log.read(10, 100, 100)[0].base_offset == 9  # the batch holding the log start offset
    log.close()


def test_large_first_entry_is_returned_whole(tmp_path):
    log = open_log(tmp_path, config=small_config(segment_bytes=1 << 20, index_interval_bytes=10))
    append_batch(log, 1, 100)
    append_batch(log, 1, 200_000)
    append_batch(log, 1, 100)
    entries = log.read(1, 10, 3)
    assert [e.base_offset for e in entries] == [1] and len(entries[0].payload) == 200_000
    assert [e.base_offset for e in log.read(0, 250_000, 3)] == [0, 1, 2]
    log.close()


def test_iter_entries(tmp_path):
    log = open_log(tmp_path, config=small_config(segment_bytes=300))
    fill(log, 30, records=2)
    assert [e.base_offset for e in log.iter_entries(13)][:2] == [12, 14]
    assert len(list(log.iter_entries(0))) == 30
    assert list(log.iter_entries(60)) == []
    log.delete_records_before(20)
    assert next(log.iter_entries(0)).base_offset == 20  # clamped to the log start offset
    log.close()


def test_high_watermark(tmp_path):
    log = open_log(tmp_path)
    fill(log, 3, records=2)
    assert log.high_watermark == 6
    append_batch(log, 2, set_hw=False)
    assert log.high_watermark == 6 and log.log_end_offset == 8
    assert log.update_high_watermark(5) == 6  # never backwards
    with pytest.raises(ValueError):
        log.update_high_watermark(9)
    assert log.update_high_watermark(8) == 8
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.high_watermark == 8
    reopened.close()


# ---- timestamps -------------------------------------------------------------------------------


def test_offset_and_time_index_lookups_survive_reopen(tmp_path):
    cfg = small_config(segment_bytes=700, index_interval_bytes=50)
    log = open_log(tmp_path, config=cfg)
    timestamps = [T0 + (i * 7) % 23 + i * 5 for i in range(120)]  # mostly rising, with dips
    for ts in timestamps:
        append_batch(log, 2, 30, ts)

    def check(log):
        for target in range(T0 - 5, max(timestamps) + 3, 3):
            entry = log.entry_for_timestamp(target)
            first = next((i for i, ts in enumerate(timestamps) if ts >= target), None)
            if first is None:
                assert entry is None
            else:
                assert entry.base_offset == first * 2 and entry.header.max_timestamp == timestamps[first]
        best = log.entry_with_max_timestamp()
        assert best.base_offset == timestamps.index(max(timestamps)) * 2
        for offset in range(0, 240, 7):
            assert log.read(offset, 1, 240)[0].base_offset == offset - offset % 2

    check(log)
    log.close()
    reopened = open_log(tmp_path, config=cfg)
    assert reopened.last_recovery.clean_shutdown
    check(reopened)
    reopened.close()


def test_max_timestamp_ties_and_empty(tmp_path):
    log = open_log(tmp_path, config=small_config(segment_bytes=250))
    assert log.entry_with_max_timestamp() is None and log.entry_for_timestamp(0) is None
    for ts in [T0, T0 + 9, T0 + 3, T0 + 9, T0 + 1]:
        append_batch(log, 1, 40, ts)
    assert log.entry_with_max_timestamp().base_offset == 1
    log.delete_records_before(2)
    assert log.entry_with_max_timestamp().base_offset == 3
    assert log.entry_for_timestamp(T0).base_offset == 2
    log.close()


# ---- rolling ----------------------------------------------------------------------------------


def test_roll_by_segment_ms(tmp_path):
    clock = ManualClock(T0)
    rolls: list[int] = []
    log = open_log(tmp_path, clock, small_config(segment_bytes=1 << 20, segment_ms=1000), on_segment_roll=rolls.append)
    assert log.maybe_roll(clock.now_ms() + 10_000) is False  # an empty segment never rolls
    append_batch(log, 2, 10, clock.now_ms())
    clock.advance(1000)
    assert log.maybe_roll(clock.now_ms()) is False
    append_batch(log, 2, 10, clock.now_ms())
    clock.advance(1)
    assert log.maybe_roll(clock.now_ms()) is True
    assert rolls == [4] and log.segment_base_offsets == [0, 4]
    append_batch(log, 1, 10, clock.now_ms())
    clock.advance(1001)
    r = append_batch(log, 1, 10, clock.now_ms())  # the append itself rolls
    assert r.rolled and rolls == [4, 5] and log.segment_base_offsets == [0, 4, 5]
    log.close()


def test_roll_when_index_full(tmp_path):
    log = open_log(tmp_path, config=small_config(segment_bytes=1 << 20, index_interval_bytes=0, segment_index_bytes=40))
    fill(log, 30, records=1, payload=5)
    assert len(log.segment_base_offsets) > 4
    for p in segment_files(tmp_path, ".index"):
        assert p.stat().st_size <= 40
    assert len(all_entries(log)) == 30
    log.close()


def test_roll_on_relative_offset_overflow(tmp_path):
    log = open_log(tmp_path)
    huge = make_batch(1, b"a")
    header = parse_header(huge)
    header.last_offset_delta = 2**31 - 2  # a header claiming ~2**31 records (only the header matters)
    log.append(EntryKind.COORDINATES, header, huge, 0)
    r = append_batch(log, 2, 10)
    assert r.rolled and r.base_offset == 2**31 - 1 and log.segment_base_offsets == [0, 2**31 - 1]
    log.close()


# ---- truncation -------------------------------------------------------------------------------


def test_truncate_to(tmp_path):
    cfg = small_config(segment_bytes=400, index_interval_bytes=50)
    log = open_log(tmp_path, config=cfg)
    fill(log, 40, records=2, payload=30)
    segments_before = log.segment_base_offsets
    with pytest.raises(ValueError, match="not the base offset"):
        log.truncate_to(31)
    log.truncate_to(30)
    assert log.log_end_offset == 30 and log.high_watermark == 30
    assert all(b <= 30 for b in log.segment_base_offsets) and len(log.segment_base_offsets) < len(segments_before)
    assert [e.base_offset for e in all_entries(log)] == list(range(0, 30, 2))
    assert log.entry_with_max_timestamp().base_offset == 28
    assert log.entry_for_timestamp(T0 + 20) is None
    r = append_batch(log, 5, 30, T0 + 500)
    assert r.base_offset == 30 and log.log_end_offset == 35
    log.truncate_to(100)  # beyond the end: nothing happens
    assert log.log_end_offset == 35
    log.close()
    reopened = open_log(tmp_path, config=cfg)
    assert [e.base_offset for e in all_entries(reopened)] == list(range(0, 30, 2)) + [30]
    assert reopened.entry_for_timestamp(T0 + 20).base_offset == 30
    reopened.close()


def test_truncate_to_segment_boundary_and_below_start(tmp_path):
    log = open_log(tmp_path, config=small_config(segment_bytes=300))
    fill(log, 20, records=1, payload=100)
    second = log.segment_base_offsets[1]
    log.truncate_to(second)
    assert log.log_end_offset == second and log.segment_base_offsets[-1] == second
    assert append_batch(log).base_offset == second
    log.delete_records_before(second + 1)
    log.truncate_to(second)  # below the log start offset: restart empty there
    assert (log.log_start_offset, log.log_end_offset, log.segment_base_offsets) == (second, second, [second])
    assert append_batch(log).base_offset == second
    log.close()


# ---- deletion and retention -------------------------------------------------------------------


def test_delete_records_before(tmp_path):
    log = open_log(tmp_path, config=small_config(segment_bytes=300))
    fill(log, 20, records=1, payload=100)
    append_batch(log, set_hw=False)
    bases = log.segment_base_offsets
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(21)  # above the high watermark
    assert bases == list(range(20))  # one entry per segment (the last two share one)
    assert log.delete_records_before(3) == 3
    assert log.segment_base_offsets == bases[3:]
    assert log.delete_records_before(5) == 5  # within the segment [5, 6): kept, entries hidden
    assert log.segment_base_offsets == bases[5:]
    assert log.delete_records_before(2) == 5  # never backwards
    log.delete_records_before(20)
    assert log.segment_base_offsets == [bases[-1]]  # the active segment stays
    log.close()
    reopened = open_log(tmp_path, config=small_config(segment_bytes=300))
    assert reopened.log_start_offset == 20 and reopened.log_end_offset == 21
    reopened.close()


def test_retention_by_time(tmp_path):
    clock = ManualClock(T0)
    cfg = small_config(segment_bytes=400, retention_ms=10_000)
    log = open_log(tmp_path, clock, cfg)
    for i in range(12):
        append_batch(log, 1, 100, T0 + i * 1000)  # two entries per segment
    bases = log.segment_base_offsets
    assert log.enforce_retention(T0 + 10_000) == 0
    assert log.enforce_retention(T0 + 12_000) == 1  # segment 0's largest timestamp is T0+1000
    assert log.log_start_offset == bases[1] == log.segment_base_offsets[0]
    clock.advance(100_000)
    assert log.enforce_retention() == len(bases) - 2  # everything but the active segment
    assert log.segment_base_offsets == [bases[-1]]
    log.update_config(LogConfig(**{**_fields(cfg), "retention_ms": -1}))
    assert log.enforce_retention() == 0
    log.close()


def test_retention_by_size_and_high_watermark(tmp_path):
    log = open_log(tmp_path, config=small_config(segment_bytes=300, retention_bytes=700, retention_ms=-1))
    for _ in range(12):
        append_batch(log, 1, 100, set_hw=False)  # 171 bytes: one entry per segment
    log.update_high_watermark(4)
    assert log.enforce_retention() == 4  # only segments wholly below the high watermark go
    assert log.segment_base_offsets[0] == 4
    log.update_high_watermark(12)
    assert log.enforce_retention() == 3
    assert log.size_bytes - 171 < 700 <= log.size_bytes  # Kafka: stop before going under
    assert log.log_start_offset == log.segment_base_offsets[0]
    log.close()


def _fields(cfg: LogConfig) -> dict:
    return {name: getattr(cfg, name) for name in cfg.__slots__}


# ---- flushing ---------------------------------------------------------------------------------


def test_flush_policy(tmp_path):
    clock = ManualClock(T0)
    log = open_log(tmp_path, clock, small_config(flush_messages=5, flush_ms=1000))
    assert not log.needs_flush(clock.now_ms() + 5000)  # nothing unflushed
    append_batch(log, 3)
    assert not log.needs_flush(clock.now_ms())
    append_batch(log, 2)
    assert log.needs_flush(clock.now_ms())
    log.flush()
    assert log.recovery_point == 5 and not log.needs_flush(clock.now_ms())
    append_batch(log, 1)
    clock.advance(999)
    assert not log.needs_flush(clock.now_ms())
    clock.advance(1)
    assert log.needs_flush(clock.now_ms())
    log.flush()
    assert log.recovery_point == 6
    log.close()


def test_default_flush_policy_never_forces(tmp_path):
    clock = ManualClock(T0)
    log = open_log(tmp_path, clock, LogConfig())
    append_batch(log, 1000)
    clock.advance(10**9)
    assert not log.needs_flush(clock.now_ms())
    log.close()


def test_flush_from_a_worker_thread_while_appending(tmp_path):
    log = open_log(tmp_path, config=small_config(segment_bytes=2000))
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher():
        try:
            while not stop.is_set():
                log.flush()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(400):
            append_batch(log, 2, 50, T0 + i)
    finally:
        stop.set()
        t.join()
    assert not errors
    assert log.recovery_point <= log.log_end_offset
    log.close()
    reopened = open_log(tmp_path, config=small_config(segment_bytes=2000))
    assert reopened.last_recovery.clean_shutdown and reopened.log_end_offset == 800
    assert [e.base_offset for e in all_entries(reopened)] == list(range(0, 800, 2))
    reopened.close()


def test_size_and_config_update(tmp_path):
    log = open_log(tmp_path, config=small_config(segment_bytes=10_000))
    fill(log, 5, records=1, payload=39)
    assert log.size_bytes == 5 * 110
    log.update_config(small_config(segment_bytes=250))
    fill(log, 5, records=1, payload=39)
    assert len(log.segment_base_offsets) > 1
    log.close()
    log.close()  # idempotent


def test_old_record_timestamps_do_not_roll_every_append(tmp_path):
    clock = ManualClock(T0 + 10**10)  # the records are ~115 days older than the clock
    log = open_log(tmp_path, clock, small_config(segment_bytes=1 << 20, segment_ms=1000))
    for i in range(10):
        append_batch(log, 1, 10, T0 + i)
    assert log.segment_base_offsets == [0]  # Kafka: by record timestamps when the batches have them
    append_batch(log, 1, 10, T0 + 5000)
    assert log.segment_base_offsets == [0, 10]
    log.close()


def test_closed_log_refuses_everything(tmp_path):
    log = open_log(tmp_path)
    append_batch(log)
    log.close()
    for call in (
        lambda: log.read(0, 100, 1),
        lambda: log.truncate_to(0),
        lambda: log.enforce_retention(),
        lambda: log.delete_records_before(0),
    ):
        with pytest.raises(LogClosedError):
            call()
    log.flush()  # a no-op, so a late flush from a worker thread is harmless
