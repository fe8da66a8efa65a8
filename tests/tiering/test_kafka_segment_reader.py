"""Tests of the independent Kafka segment reader on hand-built bytes (batches from kafka-python's builder)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.tiering.kafka_segment_reader import (
    BatchInfo,
    SegmentFormatError,
    check_segment,
    read_leader_epoch_checkpoint,
    read_log,
    read_producer_snapshot,
)

BASE = 100


def batch(
    base: int,
    timestamps: list[int],
    epoch: int,
    pid: int = -1,
    pepoch: int = -1,
    seq: int = -1,
    txn: bool = False,
    control: bool = False,
) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, txn, pid, pepoch, seq, 1 << 20)
    for i, ts in enumerate(timestamps):
        key, value = (b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00") if control else (b"k%d" % i, b"v")
        builder.append(i, timestamp=ts, key=key, value=value, headers=[("h", b"x")])
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, base)  # baseOffset and partitionLeaderEpoch are outside the CRC
    struct.pack_into(">i", buf, 12, epoch)
    if control:
        struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | 0x20)
        struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def snapshot(entries: Sequence[tuple[int, ...]], version: int = 1) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", version, crc32c.crc32c(body)) + body


def good_segment() -> dict[str, Any]:
    """Five batches at 100..111: plain, idempotent 7, transactional 9, 9's commit marker, idempotent 7 again."""
    parts = [
        batch(100, [900, 1000, 950], epoch=3),
        batch(103, [1400, 1500], epoch=3, pid=7, pepoch=1, seq=0),
        batch(105, [1100, 1200, 1150], epoch=5, pid=9, pepoch=2, seq=10, txn=True),
        batch(108, [1600], epoch=5, pid=9, pepoch=2, txn=True, control=True),
        batch(109, [1550, 1600, 1580], epoch=5, pid=7, pepoch=1, seq=2),
    ]
    pos = [sum(len(p) for p in parts[:i]) for i in range(len(parts))]
    index = [(104, pos[1]), (105, pos[2]), (111, pos[4])]  # last, base and last offset of the batch there
    timeindex = [(1000, 102), (1500, 104), (1600, 108)]
    producers = [
        (3, 0, 41, 60, 0, 500, -1, -1),  # from before this segment
        (7, 1, 4, 111, 2, 1600, -1, -1),
        (9, 2, 12, 107, 2, 1600, 0, -1),
    ]
    return dict(
        log=b"".join(parts),
        index=b"".join(struct.pack(">ii", o - BASE, p) for o, p in index),
        timeindex=b"".join(struct.pack(">qi", t, o - BASE) for t, o in timeindex),
        snapshot=snapshot(producers),
        epochs=b"0\n2\n3 50\n5 105\n",
        base_offset=BASE,
    )


def test_good_segment_passes() -> None:
    batches = check_segment(**good_segment())
    assert [(b.base_offset, b.last_offset) for b in batches] == [
        (100, 102),
        (103, 104),
        (105, 107),
        (108, 108),
        (109, 111),
    ]
    assert [b.partition_leader_epoch for b in batches] == [3, 3, 5, 5, 5]
    assert [b.max_timestamp for b in batches] == [1000, 1500, 1200, 1600, 1600]
    assert batches[0].first_timestamp == 900 and batches[0].records_count == 3
    assert batches[3].is_control and batches[3].is_transactional and not batches[2].is_control
    assert (batches[4].producer_id, batches[4].producer_epoch, batches[4].base_sequence) == (7, 1, 2)
    assert batches[0].position == 0 and batches[1].position == batches[0].size


def test_flipped_byte_fails_crc() -> None:
    seg = good_segment()
    log = bytearray(seg["log"])
    log[-3] ^= 0x01  # inside the last record's value/headers
    with pytest.raises(SegmentFormatError, match="CRC32C"):
        check_segment(**{**seg, "log": bytes(log)})


def test_bad_magic_truncation_and_trailing_garbage_fail() -> None:
    log = good_segment()["log"]
    bad = bytearray(log)
    bad[16] = 1
    with pytest.raises(SegmentFormatError, match="magic 1"):
        read_log(bytes(bad))
    with pytest.raises(SegmentFormatError, match="truncated"):
        read_log(log[:-1])
    with pytest.raises(SegmentFormatError, match="trailing"):
        read_log(log + b"\x00" * 5)


def test_wrong_index_position_fails() -> None:
    seg = good_segment()
    with pytest.raises(SegmentFormatError, match="no batch starts there"):
        check_segment(**{**seg, "index": seg["index"][:-4] + struct.pack(">i", len(seg["log"]) - 10)})


def test_index_offset_inside_the_batch_there_fails() -> None:
    seg = good_segment()
    pos = struct.unpack_from(">i", seg["index"], 12)[0]  # entry 1: the batch holding 105..107
    with pytest.raises(SegmentFormatError, match="batch there holds 105..107"):
        check_segment(**{**seg, "index": struct.pack(">ii", 106 - BASE, pos)})


def test_non_dense_offsets_fail_only_when_expected() -> None:
    parts = [batch(100, [10, 20], epoch=0), batch(105, [30], epoch=0)]
    seg: dict[str, Any] = dict(
        log=b"".join(parts),
        index=struct.pack(">ii", 5, len(parts[0])),
        timeindex=struct.pack(">qi", 20, 1) + struct.pack(">qi", 30, 5),
        snapshot=snapshot([]),
        epochs=b"0\n1\n0 0\n",
        base_offset=100,
    )
    with pytest.raises(SegmentFormatError, match="gap"):
        check_segment(**seg)
    assert len(check_segment(**seg, expect_dense=False)) == 2


def test_first_batch_must_match_the_base_offset() -> None:
    with pytest.raises(SegmentFormatError, match="file name says 99"):
        check_segment(**{**good_segment(), "base_offset": 99})


def test_bad_snapshot_crc_and_version_fail() -> None:
    seg = good_segment()
    snap = bytearray(seg["snapshot"])
    snap[-1] ^= 0xFF
    with pytest.raises(SegmentFormatError, match="CRC32C"):
        check_segment(**{**seg, "snapshot": bytes(snap)})
    with pytest.raises(SegmentFormatError, match="version 2"):
        read_producer_snapshot(snapshot([], version=2))


def test_snapshot_must_match_the_producers_last_batch() -> None:
    seg = good_segment()
    stale = snapshot([(7, 1, 1, 104, 1, 1500, -1, -1), (9, 2, 12, 107, 2, 1600, 0, -1)])
    with pytest.raises(SegmentFormatError, match="producer 7"):
        check_segment(**{**seg, "snapshot": stale})
    missing = snapshot([(7, 1, 4, 111, 2, 1600, -1, -1)])
    with pytest.raises(SegmentFormatError, match="producer 9 .* not in the snapshot"):
        check_segment(**{**seg, "snapshot": missing})
    open_txn = snapshot([(7, 1, 4, 111, 2, 1600, -1, -1), (9, 2, 12, 107, 2, 1600, 0, 105)])
    with pytest.raises(SegmentFormatError, match="transaction ended"):
        check_segment(**{**seg, "snapshot": open_txn})


def test_epoch_mismatch_fails() -> None:
    seg = good_segment()
    log = bytearray(seg["log"])
    struct.pack_into(">i", log, 12, 4)  # the first batch's partitionLeaderEpoch: not covered by the CRC
    with pytest.raises(SegmentFormatError, match="leader epoch 4, the checkpoint says 3"):
        check_segment(**{**seg, "log": bytes(log)})
    with pytest.raises(SegmentFormatError, match="does not cover base offset"):
        check_segment(**{**seg, "epochs": b"0\n1\n5 105\n"})
    with pytest.raises(SegmentFormatError, match="do not increase"):
        check_segment(**{**seg, "epochs": b"0\n2\n5 50\n3 105\n"})


def test_time_index_must_point_at_the_earliest_batch_with_that_max() -> None:
    seg = good_segment()
    later = struct.pack(">qi", 1000, 2) + struct.pack(">qi", 1500, 4) + struct.pack(">qi", 1600, 11)
    with pytest.raises(SegmentFormatError, match="earlier batches reach 1600"):
        check_segment(**{**seg, "timeindex": later})
    with pytest.raises(SegmentFormatError, match="does not end with the segment's max timestamp 1600"):
        check_segment(**{**seg, "timeindex": seg["timeindex"][:-12]})
    assert check_segment(**{**seg, "timeindex": seg["timeindex"][:-12]}, expect_final_time_entry=False)


def test_leader_epoch_checkpoint_text() -> None:
    assert read_leader_epoch_checkpoint(b"0\n2\n0 0\n4 17\n") == [(0, 0), (4, 17)]
    assert read_leader_epoch_checkpoint(b"") == []
    for bad in (b"1\n0\n", b"0\n2\n0 0\n", b"0\n1\n0,0\n"):
        with pytest.raises(SegmentFormatError):
            read_leader_epoch_checkpoint(bad)


def test_last_sequence_wraps_like_kafka() -> None:
    b = BatchInfo(0, 61, 10, 12, 0, 2, 0, False, False, 0, 0, 1, 0, 2**31 - 2, 3)
    assert b.last_sequence == 0  # DefaultRecordBatch.incrementSequence(MAX_VALUE - 1, 2)
