"""The records of `__consumer_offsets` and `__transaction_state` in Kafka's schemas: the codecs
against bytes built here by hand from Kafka's protocol rules (big-endian ints, int16-length
strings, compact varint-length strings and arrays and a tagged-field section in flexible
versions), every version Kafka ever wrote read back, unknown versions and types and damaged
bytes refused, round trips (also through tests/kafka_records.py, an independent decoder of
Kafka's schemas), and the records Shoal wrote before (msgpack) still read."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, cast

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.coordinator.record_schemas import CorruptRecord, UnknownRecordVersion
from broker.groups import offsets_records as o
from broker.groups.offsets import OffsetValue
from broker.groups.shard import GroupShard
from broker.groups.snapshot import GroupSnapshot, MemberSnapshot
from broker.transactions import records as tr
from broker.transactions.metadata import TransactionMetadata, TxnState
from tests import kafka_records as k


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def s(text: str | None) -> bytes:
    """STRING / NULLABLE_STRING: int16 length (-1: null), UTF-8."""
    return i16(-1) if text is None else i16(len(text.encode())) + text.encode()


def b(data: bytes) -> bytes:
    return i32(len(data)) + data


def uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        byte, v = v & 0x7F, v >> 7
        out.append(byte | (0x80 if v else 0))
        if not v:
            return bytes(out)


def cs(text: str | None) -> bytes:
    """COMPACT_(NULLABLE_)STRING: unsigned varint length + 1 (0: null)."""
    return uvarint(0) if text is None else uvarint(len(text.encode()) + 1) + text.encode()


def cb(data: bytes) -> bytes:
    return uvarint(len(data) + 1) + data


def tags(*fields: tuple[int, bytes]) -> bytes:
    return uvarint(len(fields)) + b"".join(uvarint(t) + uvarint(len(v)) + v for t, v in fields)


# -- __consumer_offsets ---------------------------------------------------------------------
def test_offset_commit_key_is_kafkas() -> None:
    raw = i16(1) + s("group") + s("topic") + i32(7)
    assert o.offset_key("group", "topic", 7) == raw
    assert o.decode_key(raw) == o.OffsetKey("group", "topic", 7)
    assert o.decode_key(i16(0) + s("group") + s("topic") + i32(7)) == o.OffsetKey("group", "topic", 7)  # type 0


def test_offset_commit_value_written_as_kafka_does() -> None:
    v3 = i16(3) + i64(42) + i32(5) + s("meta") + i64(1_700_000_000_000)
    assert o.offset_value(OffsetValue(42, 5, "meta", 1_700_000_000_000)) == v3
    assert o.decode_offset(v3) == OffsetValue(42, 5, "meta", 1_700_000_000_000)
    # an old client's retention time: version 1, the only one with an expiry (and no epoch)
    v1 = i16(1) + i64(42) + s("") + i64(1000) + i64(9000)
    assert o.offset_value(OffsetValue(42, 5, "", 1000, 9000)) == v1
    assert o.decode_offset(v1) == OffsetValue(42, -1, "", 1000, 9000)


def test_every_offset_commit_value_version_is_read() -> None:
    want = OffsetValue(42, -1, "m", 1000)
    assert o.decode_offset(i16(0) + i64(42) + s("m") + i64(1000)) == want
    assert o.decode_offset(i16(2) + i64(42) + s("m") + i64(1000)) == want
    flexible = i16(4) + i64(42) + i32(6) + cs("m") + i64(1000) + tags((0, b"\x01\x02"))  # an unknown tag
    assert o.decode_offset(flexible) == OffsetValue(42, 6, "m", 1000)


def member_bytes(version: int, *, instance: str | None = "i-1") -> bytes:
    out = s("member-1")
    if version >= 3:
        out += s(instance)
    out += s("client") + s("/10.0.0.1")
    if version >= 1:
        out += i32(300_000)
    return out + i32(45_000) + b(b"sub") + b(b"asg")


SNAPSHOT = GroupSnapshot(
    group_id="g",
    protocol_type="consumer",
    generation_id=7,
    protocol_name="range",
    leader_id="member-1",
    current_state_timestamp_ms=1234,
    members=(
        MemberSnapshot(
            member_id="member-1",
            group_instance_id="i-1",
            client_id="client",
            client_host="/10.0.0.1",
            rebalance_timeout_ms=300_000,
            session_timeout_ms=45_000,
            subscription=b"sub",
            assignment=b"asg",
        ),
    ),
)


def test_group_metadata_written_as_kafka_does() -> None:
    assert o.group_key("g") == i16(2) + s("g")
    assert o.decode_key(i16(2) + s("g")) == o.GroupKey("g")
    v3 = i16(3) + s("consumer") + i32(7) + s("range") + s("member-1") + i64(1234) + i32(1) + member_bytes(3)
    assert o.group_value(SNAPSHOT) == v3
    assert o.decode_group("g", v3) == SNAPSHOT
    empty = GroupSnapshot(
        group_id="g",
        protocol_type=None,
        generation_id=0,
        protocol_name=None,
        leader_id=None,
        current_state_timestamp_ms=None,
    )
    raw = i16(3) + s("") + i32(0) + s(None) + s(None) + i64(-1) + i32(0)
    assert o.group_value(empty) == raw and o.decode_group("g", raw) == empty


def test_every_group_metadata_version_is_read() -> None:
    head = s("consumer") + i32(7) + s("range") + s("member-1")
    old = msgspec.structs.replace
    member = SNAPSHOT.members[0]
    # v0: no rebalance timeout (the session timeout stands in, as in Kafka), no timestamp, no instance id
    v0 = o.decode_group("g", i16(0) + head + i32(1) + member_bytes(0))
    assert v0 == old(
        SNAPSHOT,
        current_state_timestamp_ms=None,
        members=(old(member, group_instance_id=None, rebalance_timeout_ms=45_000),),
    )
    v2 = o.decode_group("g", i16(2) + head + i64(1234) + i32(1) + member_bytes(2))
    assert v2 == old(SNAPSHOT, members=(old(member, group_instance_id=None),))
    m4 = cs("member-1") + cs("i-1") + cs("client") + cs("/10.0.0.1") + i32(300_000) + i32(45_000)
    m4 += cb(b"sub") + cb(b"asg") + tags()
    v4 = i16(4) + cs("consumer") + i32(7) + cs("range") + cs("member-1") + i64(1234) + uvarint(2) + m4 + tags()
    assert o.decode_group("g", v4) == SNAPSHOT


def test_unknown_record_types_are_skipped_unknown_versions_and_damage_refused() -> None:
    consumer_group_metadata = i16(3) + s("g")  # KIP-848 records: not this coordinator's
    assert o.decode_key(consumer_group_metadata) is None
    with pytest.raises(UnknownRecordVersion):
        o.decode_offset(i16(5) + i64(1) + i32(0) + s("") + i64(0))
    with pytest.raises(UnknownRecordVersion):
        o.decode_group("g", i16(9) + s("consumer"))
    with pytest.raises(CorruptRecord):
        o.decode_offset(i16(3) + i64(1))  # cut short
    with pytest.raises(CorruptRecord):
        o.decode_key(b"\x00")
    with pytest.raises(CorruptRecord):
        tr.decode_key(i16(1) + s("tx"))  # __transaction_state has record type 0 only


def test_offset_records_and_tombstones() -> None:
    value = OffsetValue(3, 1, "", 5)
    records = o.offset_records([("g", "t", 0, value), ("g", "t", 1, None)])
    assert records == [(o.offset_key("g", "t", 0), o.offset_value(value)), (o.offset_key("g", "t", 1), None)]


offset_values = st.builds(
    OffsetValue,
    offset=st.integers(-1, 2**63 - 1),
    leader_epoch=st.integers(-1, 2**31 - 1),
    metadata=st.text(max_size=50),
    commit_timestamp_ms=st.integers(0, 2**62),
    expire_timestamp_ms=st.just(-1),
)
names = st.text(min_size=1, max_size=20)
members = st.builds(
    MemberSnapshot,
    member_id=names,
    group_instance_id=st.none() | names,
    client_id=st.text(max_size=20),
    client_host=st.text(max_size=20),
    rebalance_timeout_ms=st.integers(0, 2**31 - 1),
    session_timeout_ms=st.integers(0, 2**31 - 1),
    subscription=st.binary(max_size=40),
    assignment=st.binary(max_size=40),
)
snapshots = st.builds(
    GroupSnapshot,
    group_id=names,
    protocol_type=st.none() | names,
    generation_id=st.integers(0, 2**31 - 1),
    protocol_name=st.none() | names,
    leader_id=st.none() | names,
    current_state_timestamp_ms=st.none() | st.integers(0, 2**62),
    members=st.lists(members, max_size=4).map(tuple),
)


@given(group=names, topic=names, partition=st.integers(0, 2**31 - 1), value=offset_values)
def test_offset_round_trip_and_independent_decoder(group: str, topic: str, partition: int, value: OffsetValue) -> None:
    key, raw = o.offset_key(group, topic, partition), o.offset_value(value)
    assert o.decode_key(key) == o.OffsetKey(group, topic, partition) and o.decode_offset(raw) == value
    seen = k.decode_record(k.GROUP_RECORDS, 0, 0, key, raw)
    assert seen.key == {"group": group, "topic": topic, "partition": partition}
    assert seen.value == {
        "offset": value.offset,
        "leaderEpoch": value.leader_epoch,
        "metadata": value.metadata,
        "commitTimestamp": value.commit_timestamp_ms,
    }


@given(snapshot=snapshots)
def test_group_round_trip_and_independent_decoder(snapshot: GroupSnapshot) -> None:
    raw = o.group_value(snapshot)
    assert o.decode_group(snapshot.group_id, raw) == snapshot
    seen = k.decode_record(k.GROUP_RECORDS, 0, 0, o.group_key(snapshot.group_id), raw)
    assert seen.value_version == 3 and seen.value is not None
    assert (seen.value["generation"], seen.value["protocol"], seen.value["leader"]) == (
        snapshot.generation_id,
        snapshot.protocol_name,
        snapshot.leader_id,
    )
    assert [(m["memberId"], m["groupInstanceId"], m["assignment"]) for m in seen.value["members"]] == [
        (m.member_id, m.group_instance_id, m.assignment) for m in snapshot.members
    ]


# -- __transaction_state --------------------------------------------------------------------
def txn_value_v1(*, status: int, partitions: bytes, tagged: bytes) -> bytes:
    return i16(1) + i64(7) + i16(2) + i32(60_000) + i8(status) + partitions + i64(5) + i64(4) + tagged


ONGOING = TransactionMetadata(
    "tx",
    producer_id=7,
    previous_producer_id=3,
    producer_epoch=2,
    last_producer_epoch=1,
    timeout_ms=60_000,
    state=TxnState.ONGOING,
    partitions=frozenset({("t", 0), ("t", 1)}),
    txn_start_ms=4,
    last_update_ms=5,
)


def test_transaction_log_written_as_kafka_does() -> None:
    assert tr.encode_key("tx") == i16(0) + s("tx") and tr.decode_key(i16(0) + s("tx")) == "tx"
    partitions = uvarint(2) + cs("t") + uvarint(3) + i32(0) + i32(1) + tags()  # one topic, two partitions
    # tag 0: PreviousProducerId; Shoal's last producer epoch in its own tag, which Kafka skips
    raw = txn_value_v1(
        status=1, partitions=partitions, tagged=tags((0, i64(3)), (tr.SHOAL_LAST_PRODUCER_EPOCH_TAG, i16(1)))
    )
    assert tr.encode_value(ONGOING) == raw
    assert tr.decode_value("tx", raw) == ONGOING
    seen = k.decode_record(k.TRANSACTION_RECORDS, 0, 0, tr.encode_key("tx"), raw)
    assert seen.value is not None and seen.value["PreviousProducerId"] == 3
    assert seen.value["_unknown_tags"] == {tr.SHOAL_LAST_PRODUCER_EPOCH_TAG: i16(1)}
    # Empty: null partitions, defaults left out of the tagged fields
    idle = dataclasses.replace(
        ONGOING, state=TxnState.EMPTY, partitions=frozenset(), previous_producer_id=-1, last_producer_epoch=-1
    )
    raw = txn_value_v1(status=0, partitions=uvarint(0), tagged=tags())
    assert tr.encode_value(idle) == raw and tr.decode_value("tx", raw) == idle


def test_every_transaction_log_version_is_read() -> None:
    partitions = i32(1) + s("t") + i32(2) + i32(0) + i32(1)
    v0 = i16(0) + i64(7) + i16(2) + i32(60_000) + i8(1) + partitions + i64(5) + i64(4)

    assert tr.decode_value("tx", v0) == dataclasses.replace(ONGOING, previous_producer_id=-1, last_producer_epoch=-1)
    # Kafka 4.x with NextProducerId and ClientTransactionVersion set: read, the rest as written
    v1 = txn_value_v1(
        status=1,
        partitions=uvarint(2) + cs("t") + uvarint(3) + i32(0) + i32(1) + tags(),
        tagged=tags((0, i64(3)), (1, i64(8)), (2, i16(2))),
    )
    assert tr.decode_value("tx", v1) == dataclasses.replace(ONGOING, last_producer_epoch=-1)
    with pytest.raises(UnknownRecordVersion):
        tr.decode_value("tx", i16(2) + v0[2:])
    with pytest.raises(CorruptRecord):
        tr.decode_value("tx", txn_value_v1(status=9, partitions=uvarint(0), tagged=tags()))


states = st.sampled_from(list(TxnState))


@given(
    state=states,
    producer=st.integers(0, 2**63 - 1),
    epochs=st.tuples(st.integers(0, 32767), st.integers(-1, 32767)),
    partitions=st.frozensets(st.tuples(names, st.integers(0, 1000)), max_size=6),
    stamps=st.tuples(st.integers(-1, 2**62), st.integers(0, 2**62)),
)
def test_transaction_round_trip_and_independent_decoder(state, producer, epochs, partitions, stamps) -> None:  # type: ignore[no-untyped-def]
    txn = TransactionMetadata(
        "tx",
        producer_id=producer,
        previous_producer_id=-1,
        producer_epoch=epochs[0],
        last_producer_epoch=epochs[1],
        timeout_ms=60_000,
        state=state,
        partitions=frozenset() if state is TxnState.EMPTY else partitions,
        txn_start_ms=stamps[0],
        last_update_ms=stamps[1],
    )
    raw = tr.encode_value(txn)
    assert tr.decode_value("tx", raw) == txn
    seen = k.decode_record(k.TRANSACTION_RECORDS, 0, 0, tr.encode_key("tx"), raw)
    assert seen.value is not None and seen.value["TransactionStatus"] == tr.TXN_STATE_IDS[state]
    listed = {(p["Topic"], i) for p in seen.value["TransactionPartitions"] or () for i in p["PartitionIds"]}
    assert listed == txn.partitions


# -- what Shoal wrote before (msgpack, format version 1) --------------------------------------
def test_records_of_shoals_msgpack_format_are_still_read() -> None:
    enc = msgspec.msgpack.encode
    assert o.decode_key(enc(["offset", 1, "g", "t", 3])) == o.OffsetKey("g", "t", 3)
    assert o.decode_key(enc(["group", 1, "g"])) == o.GroupKey("g")
    assert o.decode_offset(enc([1, 42, 5, None, 1000, -1])) == OffsetValue(42, 5, "", 1000)
    assert o.decode_offset(enc([1, 42, 5, "m", 1000])) == OffsetValue(42, 5, "m", 1000)
    member = {
        "member_id": "member-1",
        "group_instance_id": "i-1",
        "client_id": "client",
        "client_host": "/10.0.0.1",
        "rebalance_timeout_ms": 300_000,
        "session_timeout_ms": 45_000,
        "subscription": b"sub",
        "assignment": b"asg",
    }
    group = {
        "version": 1,
        "group_id": "g",
        "protocol_type": "consumer",
        "generation_id": 7,
        "protocol_name": "range",
        "leader_id": "member-1",
        "current_state_timestamp_ms": 1234,
        "members": [member],
    }
    assert o.decode_group("g", enc(group)) == SNAPSHOT
    assert tr.decode_key(enc([1, "tx"])) == "tx"
    value = [1, 7, 3, 2, 1, 60_000, "Ongoing", [["t", [0, 1]]], 4, 5]
    assert tr.decode_value("tx", enc(value)) == ONGOING
    with pytest.raises(UnknownRecordVersion):
        o.decode_offset(enc([2, 42, 5, None, 1000, -1]))
    with pytest.raises(CorruptRecord):
        tr.decode_value("tx", enc([1, 7]))


def test_a_group_shard_reading_old_records_asks_for_a_rewrite() -> None:
    enc = msgspec.msgpack.encode
    old = GroupShard(0, cast(Any, None))  # replay needs no context
    old.replay(1, [(enc(["offset", 1, "g", "t", 0]), enc([1, 42, 5, None, 1000, -1]))])
    assert old.holds_legacy_records() and old.offsets.latest.get("g", "t", 0) == OffsetValue(42, 5, "", 1000)
    new = GroupShard(0, cast(Any, None))
    new.replay(1, [(o.offset_key("g", "t", 0), o.offset_value(OffsetValue(42, 5, "", 1000)))])
    assert not new.holds_legacy_records() and new.offsets.latest.get("g", "t", 0) == OffsetValue(42, 5, "", 1000)
