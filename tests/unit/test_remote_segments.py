"""Remote-segment markers (markers.py) and the tiered-segment state they drive
(remote_segments.py), pure: no partition, no sockets.

Tests marked "Regression" pin a defect these tests found (inputs, expected and actual in
the docstring); each failed before its fix.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import ControlRecord, DefaultRecordBatch

from broker.log.markers import (
    EVENT_VERSION,
    SHOAL_REMOTE_SEGMENT,
    MarkerFormatError,
    RemoteSegmentEvent,
    RemoteSegmentState,
    decode_marker,
    encode_marker,
)
from broker.log.remote_segments import CHECKPOINT_FILE, RemoteSegment, RemoteSegments, RemoteSegmentsError
from broker.protocol.batch import BATCH_HEADER_SIZE, NO_PRODUCER_ID, parse_header
from tests.unit.test_log_support import make_batch

S = RemoteSegmentState
STARTED = S.COPY_SEGMENT_STARTED
FINISHED = S.COPY_SEGMENT_FINISHED
DELETE_STARTED = S.DELETE_SEGMENT_STARTED
DELETE_FINISHED = S.DELETE_SEGMENT_FINISHED
TS = 1_800_000_000_000


def event(
    state: RemoteSegmentState,
    segment_id: str = "seg-a",
    base: int = 0,
    end: int = 9,
    epoch: int = 0,
    size: int = 1000,
    **fields: object,
) -> RemoteSegmentEvent:
    return RemoteSegmentEvent(EVENT_VERSION, state, segment_id, base, end, epoch, size, **fields)  # type: ignore[arg-type]


class Log:
    """Feeds markers to a RemoteSegments as a partition log would: dense offsets, a high
    watermark that only moves forward, commit on every move."""

    def __init__(self, remote: RemoteSegments) -> None:
        self.remote = remote
        self.leo = 0
        self.hw = 0

    def append(self, ev: RemoteSegmentEvent, entry_epoch: int | None = None) -> int:
        offset = self.leo
        self.leo += 1
        self.remote.on_append(offset, ev.leader_epoch if entry_epoch is None else entry_epoch, ev)
        return offset

    def commit(self, hw: int | None = None) -> bool:
        self.hw = self.leo if hw is None else hw
        return self.remote.commit_through(self.hw)

    def apply(self, ev: RemoteSegmentEvent, entry_epoch: int | None = None) -> int:
        offset = self.append(ev, entry_epoch)
        self.commit()
        return offset


def states(remote: RemoteSegments) -> dict[str, RemoteSegmentState]:
    return {s.segment_id: s.state for s in remote.segments}


def readable_ids(remote: RemoteSegments) -> list[str]:
    return [s.segment_id for s in remote.readable]


# ---- markers ----------------------------------------------------------------------------------


def test_marker_round_trip() -> None:
    ev = event(
        FINISHED,
        "3f1c0d2e-0000-4000-8000-000000000001",
        base=1_000,
        end=1_999,
        epoch=7,
        size=123_456,
        max_timestamp_ms=TS - 5,
        plan_id="plan-1",
        index_bytes=80,
        time_index_bytes=120,
    )
    data = encode_marker(ev, TS)
    for view in (data, bytearray(data), memoryview(data)):
        assert decode_marker(view) == ev
    header = parse_header(data)
    assert header.size == len(data)
    assert header.is_control and not header.is_transactional
    assert (header.base_offset, header.partition_leader_epoch) == (0, 0)  # patched by the log on append
    assert (header.records_count, header.last_offset_delta) == (1, 0)  # takes exactly one offset
    assert (header.base_timestamp, header.max_timestamp) == (TS, TS)
    assert header.producer_id == NO_PRODUCER_ID
    # defaults of the optional fields survive too
    minimal = event(STARTED)
    assert decode_marker(encode_marker(minimal, TS)) == minimal


def test_marker_is_a_valid_kafka_control_batch() -> None:
    """kafka-python, as a consumer would: CRC valid, a control batch, one control record of
    Shoal's type whose value is the event. Still so once the log patched the batch's base
    offset and leader epoch (outside the CRC), as it does on append."""
    ev = event(DELETE_STARTED, "s", base=40, end=59, epoch=3, plan_id="p")
    data = bytearray(encode_marker(ev, TS))
    for base_offset, epoch in ((0, 0), (1_234_567, 9)):
        struct.pack_into(">q", data, 0, base_offset)
        struct.pack_into(">i", data, 12, epoch)
        batch = DefaultRecordBatch(bytes(data))
        assert batch.validate_crc()
        assert batch.is_control_batch and not batch.is_transactional
        assert (batch.base_offset, batch.leader_epoch, batch.next_offset) == (base_offset, epoch, base_offset + 1)
        records = list(batch)  # kafka-python also checks that every byte is consumed
        assert len(records) == 1
        [record] = records
        assert isinstance(record, ControlRecord)
        assert (record.version, record.type) == (0, SHOAL_REMOTE_SEGMENT)
        assert record.offset == base_offset
        assert msgspec.msgpack.decode(record.value, type=RemoteSegmentEvent) == ev
        assert decode_marker(data) == ev


def _with_control_type(data: bytes, kind: int) -> bytes:
    raw = bytearray(data)
    # record: length, attributes, timestamp delta, offset delta, key length: one byte each here
    at = BATCH_HEADER_SIZE + 5 + 2
    assert struct.unpack_from(">h", raw, at)[0] == SHOAL_REMOTE_SEGMENT
    struct.pack_into(">h", raw, at, kind)
    return bytes(raw)


def _with_records_count(data: bytes, count: int) -> bytes:
    raw = bytearray(data)
    struct.pack_into(">i", raw, 57, count)
    return bytes(raw)


def _with_value(value: bytes) -> bytes:
    """A marker whose msgpack value is replaced by `value` (same length)."""
    data = encode_marker(event(STARTED), TS)
    good = msgspec.msgpack.encode(event(STARTED))
    assert len(value) == len(good)
    at = data.index(good)
    return data[:at] + value + data[at + len(good) :]


_MARKER = encode_marker(event(FINISHED), TS)
_GOOD_VALUE = msgspec.msgpack.encode(event(STARTED))


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00" * 20, id="shorter-than-a-header"),
        pytest.param(b"\x00" * BATCH_HEADER_SIZE, id="zero-header"),
        pytest.param(b"\xff" * 200, id="all-ones"),
        pytest.param(bytes(make_batch(1, b"\x00" * 30)), id="records-batch"),
        pytest.param(_with_control_type(_MARKER, 1), id="kafka-commit-control-type"),
        pytest.param(_with_control_type(_MARKER, 0), id="kafka-abort-control-type"),
        pytest.param(_with_records_count(_MARKER, 2), id="two-records"),
        pytest.param(_MARKER[:-3], id="value-cut-short"),
        pytest.param(encode_marker(msgspec.structs.replace(event(STARTED), version=2), TS), id="event-version-2"),
        pytest.param(_with_value(b"\xc1" * len(_GOOD_VALUE)), id="value-not-msgpack"),
        pytest.param(_with_value(b"\xa0" + b"\x00" * (len(_GOOD_VALUE) - 1)), id="value-not-an-event"),
    ],
)
def test_decode_of_garbage_raises_marker_format_error(data: bytes) -> None:
    with pytest.raises(MarkerFormatError):
        decode_marker(data)


@pytest.mark.parametrize("cut", [BATCH_HEADER_SIZE, BATCH_HEADER_SIZE + 2, BATCH_HEADER_SIZE + 4])
def test_decode_of_a_marker_cut_inside_its_record_raises_marker_format_error(cut: int) -> None:
    """Regression (markers.py, decode_marker): a control batch cut off inside its record's varints
    (e.g. the 61-byte header alone, records_count 1) raises IndexError out of `_read_varint`
    (`view[pos]` past the end): decode_marker catches ValueError, struct.error and
    msgspec.DecodeError only. Expected: MarkerFormatError, as for every other unreadable
    marker (a follower's append_replicated and the replay at open call decode_marker)."""
    with pytest.raises(MarkerFormatError):
        decode_marker(_MARKER[:cut])


# ---- states and transitions -------------------------------------------------------------------


def test_state_sequence_to_deleted() -> None:
    remote = RemoteSegments()
    log = Log(remote)
    log.apply(event(STARTED, size=0))
    assert states(remote) == {"seg-a": STARTED}
    assert remote.readable == [] and remote.in_state(STARTED)[0].segment_id == "seg-a"
    log.apply(event(FINISHED, size=4321, max_timestamp_ms=TS, index_bytes=16, time_index_bytes=24))
    [seg] = remote.readable
    assert (seg.segment_id, seg.state, seg.base_offset, seg.end_offset) == ("seg-a", FINISHED, 0, 9)
    assert (seg.size_bytes, seg.max_timestamp_ms, seg.index_bytes, seg.time_index_bytes) == (4321, TS, 16, 24)
    assert remote.size_bytes == 4321
    log.apply(event(DELETE_STARTED))
    assert states(remote) == {"seg-a": DELETE_STARTED}
    assert remote.readable == [] and remote.segment_for(5) is None and remote.size_bytes == 0
    assert [s.segment_id for s in remote.in_state(DELETE_STARTED)] == ["seg-a"]
    log.apply(event(DELETE_FINISHED))
    assert remote.segments == [] and remote.readable == []


def test_started_may_go_straight_to_delete() -> None:
    remote = RemoteSegments()
    log = Log(remote)
    log.apply(event(STARTED))
    log.apply(event(DELETE_STARTED))
    assert states(remote) == {"seg-a": DELETE_STARTED}
    log.apply(event(DELETE_FINISHED))
    assert remote.segments == []


def test_every_state_may_repeat() -> None:
    remote = RemoteSegments()
    log = Log(remote)
    for state in (STARTED, FINISHED, DELETE_STARTED):
        log.apply(event(state, size=1))
        log.apply(event(state, size=2))
        assert states(remote) == {"seg-a": state}
    log.apply(event(DELETE_FINISHED))
    log.apply(event(DELETE_FINISHED))  # a retry once it is gone: nothing
    assert remote.segments == []


def test_a_repeated_finished_updates_what_a_reader_needs() -> None:
    remote = RemoteSegments()
    log = Log(remote)
    log.apply(event(STARTED))
    log.apply(event(FINISHED, size=10, index_bytes=1))
    log.apply(event(FINISHED, size=20, index_bytes=2))
    [seg] = remote.readable
    assert (seg.size_bytes, seg.index_bytes) == (20, 2)


@pytest.mark.parametrize(
    "path,bad",
    [
        ((STARTED, FINISHED), STARTED),
        ((STARTED, FINISHED), DELETE_FINISHED),
        ((STARTED, DELETE_STARTED), FINISHED),
        ((STARTED, DELETE_STARTED), STARTED),
        ((STARTED,), DELETE_FINISHED),
        ((STARTED, FINISHED, DELETE_STARTED), FINISHED),
    ],
    ids=lambda v: "-".join(s.name for s in v) if isinstance(v, tuple) else v.name,
)
def test_invalid_transitions_are_ignored(path: tuple[RemoteSegmentState, ...], bad: RemoteSegmentState) -> None:
    remote = RemoteSegments()
    log = Log(remote)
    for state in path:
        log.apply(event(state, size=1))
    before = [msgspec.structs.replace(s) for s in remote.segments]
    readable = readable_ids(remote)
    log.apply(event(bad, size=999))
    assert remote.segments == before
    assert readable_ids(remote) == readable


def test_deletes_of_an_unknown_segment_are_ignored() -> None:
    remote = RemoteSegments()
    log = Log(remote)
    log.apply(event(DELETE_STARTED))
    log.apply(event(DELETE_FINISHED))
    assert remote.segments == []
    log.apply(event(STARTED))
    log.apply(event(FINISHED))
    log.apply(event(DELETE_STARTED))
    log.apply(event(DELETE_FINISHED))
    log.apply(event(DELETE_STARTED))  # a late retry of a segment already gone
    assert remote.segments == []


# ---- commit, truncation, fencing, overlap ------------------------------------------------------


def test_markers_apply_only_once_the_high_watermark_passes_them() -> None:
    remote = RemoteSegments()
    remote.on_append(5, 0, event(STARTED))
    remote.on_append(8, 0, event(FINISHED))
    assert remote.commit_through(5) is False  # the high watermark is the first uncommitted offset
    assert remote.segments == []
    assert remote.commit_through(6) is True
    assert states(remote) == {"seg-a": STARTED} and remote.readable == []
    assert remote.commit_through(8) is False
    assert remote.readable == []
    assert remote.commit_through(9) is True
    assert readable_ids(remote) == ["seg-a"]
    assert remote.commit_through(100) is False
    assert remote.applied_through == 9


def test_a_truncated_finished_marker_never_becomes_readable() -> None:
    remote = RemoteSegments()
    remote.on_append(3, 0, event(STARTED))
    remote.commit_through(4)
    remote.on_append(7, 0, event(FINISHED))
    remote.on_truncate(8)  # cut above it: it stays
    remote.on_truncate(7)  # the divergent tail from 7 on is gone, the marker with it
    remote.on_append(7, 1, event(STARTED, "seg-b", base=10, end=19, epoch=1))  # what the new leader wrote there
    remote.commit_through(1_000)
    assert states(remote) == {"seg-a": STARTED, "seg-b": STARTED}
    assert remote.readable == [] and remote.tiered_end == 0


def test_finished_is_fenced_by_the_epoch_of_its_entry() -> None:
    remote = RemoteSegments()
    log = Log(remote)
    log.apply(event(STARTED, epoch=4), entry_epoch=4)
    log.apply(event(FINISHED, epoch=4), entry_epoch=5)  # appended by a later leader than the planner
    assert states(remote) == {"seg-a": STARTED} and remote.readable == []
    log.apply(event(FINISHED, epoch=4), entry_epoch=3)
    assert remote.readable == []
    log.apply(event(FINISHED, epoch=4), entry_epoch=4)
    assert readable_ids(remote) == ["seg-a"]
    # a fenced FINISHED of a segment never STARTED creates nothing either
    log.apply(event(FINISHED, "seg-b", base=10, end=19, epoch=1), entry_epoch=2)
    assert "seg-b" not in states(remote)
    # the other states are not fenced: deleting works from any leader
    log.apply(event(DELETE_STARTED, epoch=4), entry_epoch=9)
    assert states(remote) == {"seg-a": DELETE_STARTED}


def test_finished_overlapping_a_readable_segment_is_refused() -> None:
    remote = RemoteSegments()
    log = Log(remote)
    log.apply(event(STARTED, "a", base=0, end=9))
    log.apply(event(FINISHED, "a", base=0, end=9))
    for sid, base, end in (("b", 0, 9), ("c", 5, 14), ("d", 9, 9), ("e", 0, 100)):
        log.apply(event(STARTED, sid, base=base, end=end))
        log.apply(event(FINISHED, sid, base=base, end=end))
        assert states(remote)[sid] == STARTED, sid
    log.apply(event(STARTED, "f", base=10, end=19))
    log.apply(event(FINISHED, "f", base=10, end=19))  # adjacent, not overlapping
    assert readable_ids(remote) == ["a", "f"]
    log.apply(event(DELETE_STARTED, "a", base=0, end=9))
    log.apply(event(FINISHED, "b", base=0, end=9))  # "a" no longer readable: "b" may take its place
    assert readable_ids(remote) == ["b", "f"]
    log.apply(event(FINISHED, "c", base=5, end=14))  # still overlaps both
    assert states(remote)["c"] == STARTED


def test_overlapping_finished_markers_committed_together_are_refused() -> None:
    """Regression (remote_segments.py, commit_through/_overlaps): the overlap check looks at
    `self._readable`, which is only rebuilt (_reindex) after the whole batch of ready markers
    was applied. Two overlapping COPY_SEGMENT_FINISHED markers committed by one high-watermark
    move are therefore both accepted, while committed one at a time the second is refused.

    Input: on_append(0, 0, FINISHED a [0,9]), on_append(1, 0, FINISHED b [5,14]),
    commit_through(2). Expected: readable == [a] (readable segments never overlap, and the
    outcome must not depend on how far one HW move goes). Actual: readable == [a, b]. A leader
    whose HW moved one marker at a time and a follower (or a replay at open) that received
    both under one HW disagree on the tiered segments."""
    together = RemoteSegments()
    together.on_append(0, 0, event(FINISHED, "a", base=0, end=9))
    together.on_append(1, 0, event(FINISHED, "b", base=5, end=14))
    together.commit_through(2)
    one_by_one = RemoteSegments()
    one_by_one.on_append(0, 0, event(FINISHED, "a", base=0, end=9))
    one_by_one.commit_through(1)
    one_by_one.on_append(1, 0, event(FINISHED, "b", base=5, end=14))
    one_by_one.commit_through(2)
    assert readable_ids(one_by_one) == ["a"]
    assert readable_ids(together) == readable_ids(one_by_one)


def test_segment_for_tiered_end_and_start_offset() -> None:
    remote = RemoteSegments()
    assert (remote.start_offset, remote.tiered_end, remote.size_bytes) == (None, 0, 0)
    assert remote.segment_for(0) is None
    log = Log(remote)
    for sid, base, end, size in (("c", 20, 29, 300), ("a", 0, 9, 100)):
        log.apply(event(STARTED, sid, base=base, end=end))
        log.apply(event(FINISHED, sid, base=base, end=end, size=size))
    log.apply(event(STARTED, "b", base=10, end=19))  # planned, not readable
    assert readable_ids(remote) == ["a", "c"]  # offset order, whatever the commit order
    assert [s.segment_id for s in remote.segments] == ["a", "b", "c"]
    assert remote.start_offset == 0 and remote.tiered_end == 30 and remote.size_bytes == 400
    expect = {-1: None, 0: "a", 5: "a", 9: "a", 10: None, 15: None, 19: None, 20: "c", 29: "c", 30: None}
    for offset, sid in expect.items():
        found = remote.segment_for(offset)
        assert (found.segment_id if found else None) == sid, offset
    log.apply(event(DELETE_STARTED, "a", base=0, end=9))
    assert remote.start_offset == 20 and remote.tiered_end == 30 and remote.segment_for(5) is None
    log.apply(event(DELETE_STARTED, "c", base=20, end=29))
    assert (remote.start_offset, remote.tiered_end, remote.size_bytes) == (None, 0, 0)


# ---- checkpoint -------------------------------------------------------------------------------


def test_known_is_false_until_the_first_marker(tmp_path: Path) -> None:
    remote = RemoteSegments.open(tmp_path)
    assert not remote.known and not (tmp_path / CHECKPOINT_FILE).exists()
    remote.commit_through(50)  # nothing to apply: no file yet
    assert not (tmp_path / CHECKPOINT_FILE).exists()
    remote.on_append(42, 0, event(STARTED))
    assert remote.known and (tmp_path / CHECKPOINT_FILE).exists()
    reopened = RemoteSegments.open(tmp_path)
    assert reopened.known and reopened.segments == []
    memory = RemoteSegments()  # no file at all: still counts as known once a marker came
    assert not memory.known
    memory.on_append(0, 0, event(STARTED))
    assert memory.known


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    remote = RemoteSegments.open(tmp_path)
    log = Log(remote)
    log.apply(event(STARTED, "a", base=0, end=9, epoch=2), entry_epoch=2)
    log.apply(
        event(FINISHED, "a", base=0, end=9, epoch=2, size=777, max_timestamp_ms=TS, plan_id="p", index_bytes=8),
        entry_epoch=2,
    )
    log.apply(event(STARTED, "b", base=10, end=19, epoch=2, plan_id="q"), entry_epoch=2)
    log.apply(event(STARTED, "c", base=20, end=29))
    log.apply(event(DELETE_STARTED, "c", base=20, end=29))
    log.append(event(FINISHED, "b", base=10, end=19, epoch=2))  # pending: not in the checkpoint
    reopened = RemoteSegments.open(tmp_path)
    assert reopened.known
    assert reopened.applied_through == remote.applied_through == 5
    assert reopened.segments == remote.segments
    assert readable_ids(reopened) == ["a"] and reopened.tiered_end == 10
    assert reopened.segment_for(3) == remote.segment_for(3)
    assert states(reopened) == {"a": FINISHED, "b": STARTED, "c": DELETE_STARTED}


def test_checkpoint_at_moves_applied_through_to_the_high_watermark(tmp_path: Path) -> None:
    remote = RemoteSegments.open(tmp_path)
    remote.on_append(3, 0, event(STARTED))
    remote.commit_through(4)
    remote.on_append(10, 0, event(FINISHED))
    remote.checkpoint_at(8)  # a segment roll with the HW at 8: the marker at 10 is still pending
    assert RemoteSegments.open(tmp_path).applied_through == 8
    remote.checkpoint_at(20)
    reopened = RemoteSegments.open(tmp_path)
    assert reopened.applied_through == 20 and readable_ids(reopened) == ["seg-a"]


def test_a_corrupt_checkpoint_is_refused(tmp_path: Path) -> None:
    remote = RemoteSegments.open(tmp_path)
    log = Log(remote)
    log.apply(event(STARTED))
    log.apply(event(FINISHED))
    path = tmp_path / CHECKPOINT_FILE
    good = path.read_bytes()
    for position in range(len(good)):  # magic, version, CRC and body: every byte counts
        flipped = bytearray(good)
        flipped[position] ^= 0x01
        path.write_bytes(bytes(flipped))
        with pytest.raises(RemoteSegmentsError):
            RemoteSegments.open(tmp_path)
    for cut in (0, 5, 9, len(good) - 1):
        path.write_bytes(good[:cut])
        with pytest.raises(RemoteSegmentsError):
            RemoteSegments.open(tmp_path)
    path.write_bytes(good)
    assert RemoteSegments.open(tmp_path).segments == remote.segments


# ---- property: random marker streams against a reference model ---------------------------------

# (base, end) of each segment id. OVERLAPPING has segments that cover the same offsets (a
# range re-tiered by a later leader, or planned with other boundaries); DISJOINT never does.
OVERLAPPING = {"a": (0, 9), "b": (5, 14), "c": (10, 19), "d": (0, 9)}
DISJOINT = {"a": (0, 9), "b": (10, 19), "c": (20, 29)}

_ALLOWED = {
    (STARTED, STARTED),
    (STARTED, FINISHED),
    (STARTED, DELETE_STARTED),
    (FINISHED, FINISHED),
    (FINISHED, DELETE_STARTED),
    (DELETE_STARTED, DELETE_STARTED),
    (DELETE_STARTED, DELETE_FINISHED),
}


class Model:
    """KIP-405 as remote_segments.py documents it, one committed marker at a time."""

    def __init__(self) -> None:
        self.segments: dict[str, RemoteSegment] = {}

    def apply(self, entry_epoch: int, ev: RemoteSegmentEvent) -> None:
        current = self.segments.get(ev.segment_id)
        if current is None:
            if ev.state not in (STARTED, FINISHED):
                return  # deleting what is gone (or never was)
            current = RemoteSegment(
                ev.segment_id,
                ev.base_offset,
                ev.end_offset,
                ev.leader_epoch,
                STARTED,  # a FINISHED never seen STARTED counts as STARTED -> FINISHED
                ev.size_bytes,
                ev.max_timestamp_ms,
                ev.plan_id,
            )
        if (current.state, ev.state) not in _ALLOWED:
            return
        if ev.state == FINISHED:
            if entry_epoch != ev.leader_epoch:
                return  # fenced
            if any(
                s.state == FINISHED
                and s.segment_id != ev.segment_id
                and s.base_offset <= ev.end_offset
                and ev.base_offset <= s.end_offset
                for s in self.segments.values()
            ):
                return  # readable segments never overlap
            current = msgspec.structs.replace(
                current,
                size_bytes=ev.size_bytes,
                max_timestamp_ms=ev.max_timestamp_ms,
                index_bytes=ev.index_bytes,
                time_index_bytes=ev.time_index_bytes,
            )
        if ev.state == DELETE_FINISHED:
            del self.segments[ev.segment_id]
            return
        self.segments[ev.segment_id] = msgspec.structs.replace(current, state=ev.state)

    def sorted(self) -> list[RemoteSegment]:
        return sorted(self.segments.values(), key=lambda s: (s.base_offset, s.segment_id))


def expected(markers: list[tuple[int, int, RemoteSegmentEvent]], high_watermark: int) -> Model:
    """Exactly the markers below the high watermark that are still in the log, in offset order."""
    model = Model()
    for offset, entry_epoch, ev in sorted(markers, key=lambda m: m[0]):
        if offset < high_watermark:
            model.apply(entry_epoch, ev)
    return model


def _marker_event(ranges: dict[str, tuple[int, int]], sid: str, state: int, epoch: int, offset: int):
    base, end = ranges[sid]
    return RemoteSegmentEvent(
        EVENT_VERSION,
        RemoteSegmentState(state),
        sid,
        base,
        end,
        epoch,
        size_bytes=1_000 + offset,  # distinct per marker: shows which FINISHED set the fields
        max_timestamp_ms=TS + offset,
        plan_id=f"plan-{offset}",
        index_bytes=offset,
        time_index_bytes=2 * offset,
    )


NEXT = -1  # an append's state: the next one in the segment's life after its last marker in the log


def operations(ranges: dict[str, tuple[int, int]], max_advance: int) -> st.SearchStrategy:
    append = st.tuples(
        st.just("append"),
        st.sampled_from(sorted(ranges)),
        st.sampled_from([NEXT, NEXT, NEXT, NEXT, *RemoteSegmentState]),
        st.integers(0, 1),  # the event's leader epoch
        st.sampled_from([False, False, False, True]),  # fenced: the entry's epoch is the other one
        st.integers(0, 2),  # record offsets before it
    )
    advance = st.tuples(st.just("advance"), st.integers(1, max_advance))
    truncate = st.tuples(st.just("truncate"), st.integers(0, 8))
    other = st.sampled_from([("roll",), ("restart",)])
    by_kind = {"append": append, "advance": advance, "truncate": truncate, "other": other}
    kinds = ["append"] * 4 + ["advance"] * 3 + ["truncate", "other"]  # sampled_from weighs by repeats
    return st.lists(st.sampled_from(kinds).flatmap(by_kind.__getitem__), min_size=10, max_size=60)


def _next_state(markers: list[tuple[int, int, RemoteSegmentEvent]], sid: str) -> RemoteSegmentState:
    last = [ev.state for _offset, _epoch, ev in markers if ev.segment_id == sid]
    if not last or last[-1] == DELETE_FINISHED:
        return STARTED
    return RemoteSegmentState(last[-1] + 1)


@dataclass(frozen=True)
class Variant:
    ranges: dict[str, tuple[int, int]]
    max_advance: int  # 1: each HW move commits at most one marker
    known: bool  # the directory already holds a checkpoint (the partition had markers before)


VARIANTS = {
    # The whole property: a fresh partition, HW moves of any size, overlapping segments.
    # Failed before the fix pinned by
    # test_overlapping_finished_markers_committed_together_are_refused (the overlap check
    # saw the readable set as of the previous commit, not the one before each marker).
    "fresh-jumps-overlapping": Variant(OVERLAPPING, 6, known=False),
    # Without that defect's trigger: each HW move commits one marker at most, or segments
    # never overlap. These pass.
    "fresh-single-step-overlapping": Variant(OVERLAPPING, 1, known=False),
    "known-jumps-disjoint": Variant(DISJOINT, 6, known=True),
}


def _check(remote: RemoteSegments, markers: list[tuple[int, int, RemoteSegmentEvent]], hw: int) -> None:
    model = expected(markers, hw)
    assert remote.segments == model.sorted()
    readable = [s for s in model.sorted() if s.state == FINISHED]
    assert remote.readable == sorted(readable, key=lambda s: s.base_offset)
    assert remote.start_offset == (min(s.base_offset for s in readable) if readable else None)
    assert remote.tiered_end == (max(s.end_offset for s in readable) + 1 if readable else 0)
    assert remote.size_bytes == sum(s.size_bytes for s in readable)
    for offset in range(0, 31):
        covering = [s for s in readable if s.base_offset <= offset <= s.end_offset]
        assert remote.segment_for(offset) == (covering[0] if covering else None)


def _run(directory: Path, variant: Variant, ops: list[tuple]) -> None:
    if variant.known:
        RemoteSegments(directory / CHECKPOINT_FILE).persist()
    remote = RemoteSegments.open(directory)
    markers: list[tuple[int, int, RemoteSegmentEvent]] = []  # those still in the log
    leo = hw = 0
    for op in ops:
        committed = False
        if op[0] == "append":
            _, sid, state, event_epoch, fenced, gap = op
            state = _next_state(markers, sid) if state == NEXT else state
            entry_epoch = 1 - event_epoch if fenced else event_epoch
            offset = leo + gap
            leo = offset + 1
            ev = _marker_event(variant.ranges, sid, state, event_epoch, offset)
            markers.append((offset, entry_epoch, ev))
            remote.on_append(offset, entry_epoch, ev)
        elif op[0] == "advance":
            hw = min(leo, hw + op[1])
            remote.commit_through(hw)
            committed = True
        elif op[0] == "truncate":  # a divergent tail: never below the high watermark
            cut = hw + op[1] % (leo - hw + 1)
            markers = [m for m in markers if m[0] < cut]
            leo = cut
            remote.on_truncate(cut)
        elif op[0] == "roll":
            if remote.known:  # as Partition._on_segment_roll
                remote.checkpoint_at(hw)
                committed = True
        else:  # restart: open the checkpoint and replay the log after it (Partition._replay_markers)
            remote = RemoteSegments.open(directory)
            if remote.known:
                for offset, entry_epoch, ev in markers:
                    if offset >= remote.applied_through:
                        remote.on_append(offset, entry_epoch, ev)
                remote.commit_through(hw)
            committed = True
        _check(remote, markers, hw)
        if committed:
            again = RemoteSegments.open(directory)
            assert again.segments == remote.segments
            assert again.readable == remote.readable
            assert again.applied_through == remote.applied_through
    while hw < leo:  # finally everything commits, by the variant's steps
        hw = min(leo, hw + variant.max_advance)
        remote.commit_through(hw)
        _check(remote, markers, hw)
    assert RemoteSegments.open(directory).segments == remote.segments


@pytest.mark.parametrize("name", list(VARIANTS))
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_random_marker_streams_match_the_model(tmp_path_factory, name: str, data: st.DataObject) -> None:
    variant = VARIANTS[name]
    ops = data.draw(operations(variant.ranges, variant.max_advance), label="ops")
    with pytest.MonkeyPatch.context() as patch:  # what is written matters here, not its durability
        patch.setattr(os, "fsync", lambda fd: None)
        _run(tmp_path_factory.mktemp("remote"), variant, ops)


def test_a_marker_below_a_truncated_first_marker_still_applies(tmp_path: Path) -> None:
    """Regression: the first marker a partition ever sees sets `applied_through` to its own
    offset and persists it. If that marker is then truncated (uncommitted: a divergent tail),
    a marker the new leader writes at a lower offset (still >= the high watermark) must still
    apply, now and at a replay (it was dropped as already applied: no segment at all, with
    applied_through stuck at 10)."""
    remote = RemoteSegments.open(tmp_path)
    remote.commit_through(8)
    remote.on_append(10, 0, event(STARTED, "a"))
    remote.on_truncate(8)
    remote.on_append(8, 1, event(STARTED, "b", base=10, end=19, epoch=1))
    remote.commit_through(9)
    assert states(remote) == {"b": STARTED}
    assert states(RemoteSegments.open(tmp_path)) == {"b": STARTED}
