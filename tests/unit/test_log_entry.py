"""Partition-log building blocks: entry framing, sparse indexes, config validation, checkpoint file."""

from __future__ import annotations

import struct

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from broker.log import LogConfig, LogConfigError
from broker.log.checkpoint import (
    CHECKPOINT_FILE,
    CheckpointFormatError,
    LogCheckpoint,
    read_checkpoint,
    write_checkpoint,
)
from broker.log.entry import (
    FORMAT_VERSION,
    HEAD_SIZE,
    EntryFormatError,
    EntryKind,
    decode_entry,
    encode_entry,
    encode_head,
)
from broker.log.index import OffsetIndex, TimeIndex
from broker.protocol.batch import crc_is_valid, parse_header
from tests.unit.test_log_support import make_batch

kinds = st.sampled_from(list(EntryKind))
offsets = st.integers(min_value=0, max_value=2**63 - 2**31)
epochs = st.integers(min_value=-1, max_value=2**31 - 1)


@given(
    kind=kinds,
    payload=st.binary(max_size=600),
    base_offset=offsets,
    epoch=epochs,
    records=st.integers(1, 1000),
    ts=st.integers(-1, 2**62),
)
def test_entry_round_trip(kind, payload, base_offset, epoch, records, ts):
    data = make_batch(records, payload, ts)
    original = bytes(data)
    entry = encode_entry(kind, data, base_offset, epoch)
    assert bytes(data) == original  # the caller's buffer is never patched
    assert len(entry) == len(data) + 10
    got_kind, header, view, size = decode_entry(entry)
    assert (got_kind, size) == (kind, len(entry))
    assert header.base_offset == base_offset and header.partition_leader_epoch == epoch
    assert header.max_timestamp == ts and header.last_offset_delta == records - 1
    assert bytes(view[61:]) == bytes(payload)
    # header + payload is the original Kafka batch with only baseOffset/epoch patched: CRC still valid
    assert bytes(view[16:]) == original[16:]
    assert crc_is_valid(view, parse_header(view))


@given(kind=kinds, payload=st.binary(min_size=1, max_size=200), data=st.data())
def test_any_single_byte_flip_is_detected(kind, payload, data):
    entry = bytearray(encode_entry(kind, make_batch(1, payload), 5, 1))
    i = data.draw(st.integers(4, len(entry) - 1))  # every byte after the length field is covered
    entry[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(EntryFormatError):
        decode_entry(entry)


@given(payload=st.binary(max_size=100), cut=st.integers(0, 170))
def test_truncated_entry_is_rejected(payload, cut):
    entry = encode_entry(EntryKind.RECORDS, make_batch(1, payload), 0, 0)
    if cut < len(entry):
        with pytest.raises(EntryFormatError):
            decode_entry(entry[:cut])


def _reframe(entry: bytes, version: int | None = None, kind: int | None = None) -> bytes:
    """Rewrite version/kind and fix the CRC, as a newer broker would have written it."""
    import crc32c

    buf = bytearray(entry)
    if version is not None:
        buf[8] = version
    if kind is not None:
        buf[9] = kind
    struct.pack_into(">I", buf, 4, crc32c.crc32c(bytes(buf[8:])))
    return bytes(buf)


def test_unknown_version_and_kind_are_rejected_clearly():
    entry = encode_entry(EntryKind.COORDINATES, make_batch(1, b"coords"), 0, 0)
    with pytest.raises(EntryFormatError, match="format version 7 is not supported"):
        decode_entry(_reframe(entry, version=7))
    with pytest.raises(EntryFormatError, match="unknown partition-log entry kind 99"):
        decode_entry(_reframe(entry, kind=99))
    assert decode_entry(_reframe(entry, version=FORMAT_VERSION))[0] is EntryKind.COORDINATES


def test_head_plus_payload_is_the_entry():
    data = make_batch(3, b"x" * 50)
    head = encode_head(EntryKind.RECORDS, memoryview(data), 42, 3)
    assert len(head) == HEAD_SIZE
    assert bytes(head) + bytes(data[61:]) == encode_entry(EntryKind.RECORDS, data, 42, 3)


def test_header_only_entry():
    data = make_batch(1, b"")
    kind, header, view, _ = decode_entry(encode_entry(EntryKind.COORDINATES, data, 9, 0))
    assert len(view) == 61 and header.base_offset == 9
    with pytest.raises(EntryFormatError):
        encode_head(EntryKind.RECORDS, b"short", 0, 0)


# ---- indexes ----------------------------------------------------------------------------------


@given(st.lists(st.integers(0, 1000), unique=True, max_size=60), st.integers(-5, 1100))
def test_offset_index_floor_lookup(rel_offsets, target):
    rel_offsets.sort()
    idx = OffsetIndex()
    for i, off in enumerate(rel_offsets):
        idx.append(off, i * 10 + 1)
    below = [(o, i * 10 + 1) for i, o in enumerate(rel_offsets) if o <= target]
    assert idx.lookup(target) == (below[-1] if below else None)
    assert idx.entries_below(target) == sum(1 for o in rel_offsets if o < target)
    again = OffsetIndex(bytes(idx.buf))  # file bytes load back to the same index
    assert again.lookup(target) == idx.lookup(target)


@given(st.lists(st.integers(-1, 10_000), max_size=60), st.integers(-5, 11_000))
def test_time_index_keeps_increasing_maxima(timestamps, target):
    idx = TimeIndex()
    for rel, ts in enumerate(timestamps):
        idx.maybe_append(ts, rel)
    entries = [idx.entry_at(i) for i in range(len(idx))]
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(entries, entries[1:]))
    below = [e for e in entries if e[0] < target]
    assert idx.last_below(target) == (below[-1] if below else None)


def test_index_valid_prefix_stops_at_garbage():
    idx = OffsetIndex()
    for off, pos in [(1, 100), (3, 300), (2, 250), (5, 500)]:
        idx.append(off, pos)
    assert idx.valid_prefix(10_000, 100) == 2  # (2, 250) goes backwards
    assert idx.valid_prefix(300, 100) == 1
    assert idx.valid_prefix(10_000, 3) == 1


# ---- config -----------------------------------------------------------------------------------


def test_config_defaults_are_kafkas():
    cfg = LogConfig()
    assert cfg.segment_bytes == 1 << 30 and cfg.retention_ms == 7 * 24 * 3600 * 1000
    assert cfg.flush_messages == 2**63 - 1 and cfg.index_interval_bytes == 4096


@pytest.mark.parametrize(
    "field,value",
    [
        ("segment_bytes", 0),
        ("segment_bytes", 2**31),
        ("retention_ms", -2),
        ("retention_bytes", -5),
        ("flush_messages", 0),
        ("segment_index_bytes", 8),
        ("segment_ms", 0),
        ("index_interval_bytes", -1),
        ("segment_bytes", "big"),
        ("segment_bytes", True),
    ],
)
def test_config_rejects_out_of_range(field, value):
    with pytest.raises(LogConfigError):
        LogConfig(**{field: value})


def test_config_from_kafka_names():
    cfg = LogConfig.from_kafka_configs({"segment.bytes": "2048", "retention.ms": -1, "cleanup.policy": "delete"})
    assert cfg.segment_bytes == 2048 and cfg.retention_ms == -1
    assert LogConfig.from_kafka_configs({"flush.ms": "5"}, base=cfg).segment_bytes == 2048
    with pytest.raises(LogConfigError, match="segment.bytes"):
        LogConfig.from_kafka_configs({"segment.bytes": "x"})


# ---- checkpoint -------------------------------------------------------------------------------


def test_checkpoint_round_trip_and_atomic_replace(tmp_path):
    assert read_checkpoint(tmp_path) is None
    ck = LogCheckpoint(
        version=1,
        log_start_offset=3,
        high_watermark=10,
        recovery_point=9,
        recovery_segment_base=5,
        recovery_position=777,
        clean_shutdown=True,
    )
    write_checkpoint(tmp_path, ck)
    write_checkpoint(tmp_path, ck)
    assert read_checkpoint(tmp_path) == ck
    assert [p.name for p in tmp_path.iterdir()] == [CHECKPOINT_FILE]


def test_checkpoint_unknown_version_is_rejected(tmp_path):
    (tmp_path / CHECKPOINT_FILE).write_bytes(msgspec.json.encode({"version": 2, "anything": 1}))
    with pytest.raises(CheckpointFormatError, match="version 2 is not supported"):
        read_checkpoint(tmp_path)
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"{not json")
    with pytest.raises(CheckpointFormatError):
        read_checkpoint(tmp_path)


@settings(max_examples=25)
@given(st.integers(0, 2**62), st.integers(0, 2**62), st.booleans())
def test_checkpoint_property(tmp_path_factory, lso, extra, clean):
    path = tmp_path_factory.mktemp("ck")
    ck = LogCheckpoint(
        version=1,
        log_start_offset=lso,
        high_watermark=lso + extra,
        recovery_point=lso,
        recovery_segment_base=lso,
        recovery_position=extra,
        clean_shutdown=clean,
    )
    write_checkpoint(path, ck)
    assert read_checkpoint(path) == ck
