"""Transactions on the partition side (no coordinator): producer state opening and closing
transactions, snapshots (old and new format), the last stable offset across append, marker,
truncation and recovery, the aborted-transaction index (codec, rebuild, truncation,
retention), marker fencing, and what Fetch, ListOffsets and WriteTxnMarkers answer. Classic
and diskless partitions alike; no sockets."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import WriteTxnMarkersRequest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.clock import ManualClock, SystemClock
from broker.config import load_config
from broker.handlers import fetch, list_offsets, write_txn_markers
from broker.log.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TxnIndex,
    TxnIndexCorruptError,
    decode_entries,
    encode_entries,
)
from broker.log.txn_markers import TxnMarker, decode_txn_marker, encode_txn_marker
from broker.metadata.records import PartitionStateRecord
from broker.objectstore import MemoryObjectStore
from broker.partition import Partition
from broker.producers import CompletedTxn, EndTxn, ProducerStateManager
from broker.producers.state import MAX_PERMITS
from broker.producers import snapshot as snap
from broker.protocol.batch import CONTROL_FLAG, NO_SEQUENCE, TRANSACTIONAL_FLAG, parse_header
from broker.protocol.errors import ApiError, ErrorCode
from broker.topic_config import effective
from broker.topics import Topic
from broker.waiters import FetchWaiters
from tests.unit.producer_state_support import T0, Log, hdr
from tests.unit.test_lagging_replica_reads import no_tiers
from tests.unit.test_partition import CLOCK_START, lead
from tests.unit.test_wal_writer import TOPIC_ID, Rig

TXN = TRANSACTIONAL_FLAG
MARKER = CONTROL_FLAG | TRANSACTIONAL_FLAG


def txn_batch(
    seq: int, count: int = 2, producer_id: int = 7, epoch: int = 0, transactional: bool = True, tag: bytes = b"v"
) -> memoryview:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=CLOCK_START, key=b"k", value=tag + b"%d" % i, headers=[])
    return memoryview(bytes(builder.build()))


def classic(directory: Path, clock: ManualClock, **overrides: str) -> Partition:
    settings = effective({"diskless.enable": "false", **overrides}, load_config(environ={}))
    return lead(Partition.open("t", 0, directory, settings, clock, 86_400_000, on_append=lambda p: None))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(CLOCK_START)


# --- producer state ------------------------------------------------------------------------------


def test_transactional_batches_open_a_transaction_and_a_marker_closes_it() -> None:
    log = Log(ProducerStateManager(ManualClock(T0)))
    assert log.produce(hdr(seq=0, count=2, attributes=TXN)) == 0
    assert log.produce(hdr(seq=2, count=2, attributes=TXN)) == 2  # continues it
    mgr = log.mgr
    assert dict(mgr.ongoing_transactions()) == {1000: 0} and mgr.entry(1000).current_txn_first_offset == 0
    assert mgr.last_stable_offset(4) == 0
    # a plain write inside the open transaction
    assert mgr.check(hdr(seq=4)) == ErrorCode.INVALID_TXN_STATE
    # the marker: completes the transaction; it stays unstable until the marker is replicated
    verdict = mgr.check_marker(1000, 0, 5)
    assert verdict is None
    completed = mgr.on_append(hdr(seq=NO_SEQUENCE, attributes=MARKER), 4, end_txn=EndTxn(False, 5))
    assert completed == CompletedTxn(1000, 0, 4, True, 5)
    assert not mgr.ongoing_transactions() and mgr.entry(1000).coordinator_epoch == 5
    assert mgr.last_stable_offset(5) == 0
    mgr.on_high_watermark(4)
    assert mgr.first_unstable_offset() == 0  # the marker at 4 is not below 4
    mgr.on_high_watermark(5)
    assert mgr.first_unstable_offset() is None and mgr.last_stable_offset(5) == 5
    # after the marker, plain idempotent writes go on in sequence
    assert log.produce(hdr(seq=4)) == 4  # the Log's own offsets (it did not count the marker)


def test_verification_needs_a_permit_to_open_a_transaction_and_a_marker_withdraws_it() -> None:
    """Rule 17 (KIP-890): a client's transactional batch opens a transaction only with the
    coordinator's permit for that producer epoch; continuing batches, plain idempotent ones
    and (without verify_txn) the coordinator's own writes need none; the marker withdraws it."""
    mgr = ProducerStateManager(ManualClock(T0))
    first = hdr(pid=5, epoch=1, seq=0, attributes=TXN)
    assert mgr.check(first, verify_txn=True) == ErrorCode.NOT_ENOUGH_REPLICAS  # unknown producer
    assert mgr.check(first) is None  # not a client's batch: unverified
    assert mgr.check(hdr(pid=5, epoch=1, seq=0), verify_txn=True) is None  # idempotent, no transaction
    mgr.grant(5, 0)
    assert mgr.check(first, verify_txn=True) == ErrorCode.NOT_ENOUGH_REPLICAS  # another epoch's permit
    mgr.grant(5, 1)
    assert mgr.check(first, verify_txn=True) is None
    mgr.on_append(first, 0)
    assert mgr.check(hdr(pid=5, epoch=1, seq=1, attributes=TXN), verify_txn=True) is None  # continues it
    mgr.on_append(hdr(pid=5, epoch=1, seq=NO_SEQUENCE, attributes=MARKER), 1, end_txn=EndTxn(True, 0))
    late = hdr(pid=5, epoch=1, seq=1, attributes=TXN)  # a late batch of the ended transaction
    assert mgr.check(late, verify_txn=True) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert mgr.permit_count == 0
    for pid in range(MAX_PERMITS + 3):  # bounded: the oldest grants go first
        mgr.grant(pid + 100, 0)
    assert mgr.permit_count == MAX_PERMITS
    assert mgr.check(hdr(pid=100, seq=0, attributes=TXN), verify_txn=True) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert mgr.check(hdr(pid=MAX_PERMITS + 102, seq=0, attributes=TXN), verify_txn=True) is None


def test_the_permit_bound_is_configurable() -> None:
    """transaction.partition.verification.max.permits reaches the partition's producer state."""
    from broker.producers.state import ProducerStateManager

    mgr = ProducerStateManager(ManualClock(0), max_permits=2)
    for pid in (1, 2, 3):
        mgr.grant(pid, 0)
    assert mgr.permit_count == 2
    assert mgr.check(hdr(pid=1, seq=0, attributes=TXN), verify_txn=True) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert (
        load_config(
            environ={"SHOAL_TRANSACTION_PARTITION_VERIFICATION_MAX_PERMITS": "7"}
        ).transaction_partition_verification_max_permits
        == 7
    )


def test_a_classic_leader_refuses_an_unverified_transaction_and_names_why(tmp_path: Path, clock: ManualClock) -> None:
    partition = classic(tmp_path, clock)
    with pytest.raises(ApiError) as refused:
        partition.append_records(txn_batch(0, producer_id=11), acks=-1, verify_txn=True)
    assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS and "AddPartitionsToTxn" in str(refused.value.message)
    assert partition.log.log_end_offset == 0
    partition.grant_txn_permit(11, 0)
    assert partition.append_records(txn_batch(0, producer_id=11), acks=-1, verify_txn=True).base_offset == 0


def test_last_stable_offset_after_an_abort_is_the_next_open_transaction() -> None:
    mgr = ProducerStateManager(ManualClock(T0))
    mgr.on_append(hdr(pid=1, seq=0, attributes=TXN), 0)
    mgr.on_append(hdr(pid=2, seq=0, attributes=TXN), 1)
    mgr.on_append(hdr(pid=3, seq=0), 2)  # idempotent, no transaction
    done = mgr.on_append(hdr(pid=1, seq=NO_SEQUENCE, attributes=MARKER), 3, end_txn=EndTxn(False, 0))
    assert done == CompletedTxn(1, 0, 3, True, 1)  # producer 2's transaction still holds offset 1
    mgr.on_high_watermark(4)
    assert mgr.first_unstable_offset() == 1
    done = mgr.on_append(hdr(pid=2, seq=NO_SEQUENCE, attributes=MARKER), 4, end_txn=EndTxn(True, 0))
    assert done == CompletedTxn(2, 1, 4, False, 5)
    mgr.on_high_watermark(5)
    assert mgr.last_stable_offset(5) == 5


def test_marker_fencing() -> None:
    mgr = ProducerStateManager(ManualClock(T0))
    assert mgr.check_marker(9, 0, 0) is None  # unknown producer: written (Kafka does too)
    mgr.on_append(hdr(pid=9, epoch=3, seq=0, attributes=TXN), 0)
    mgr.on_append(hdr(pid=9, epoch=3, seq=NO_SEQUENCE, attributes=MARKER), 1, end_txn=EndTxn(True, 4))
    assert mgr.check_marker(9, 2, 4) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert mgr.check_marker(9, 3, 3) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert mgr.check_marker(9, 3, 4) is None and mgr.check_marker(9, 4, 5) is None


def test_a_marker_without_an_open_transaction_completes_nothing() -> None:
    mgr = ProducerStateManager(ManualClock(T0))
    mgr.on_append(hdr(pid=9, seq=0), 0)
    assert mgr.on_append(hdr(pid=9, seq=NO_SEQUENCE, attributes=MARKER), 1, end_txn=EndTxn(False, 2)) is None
    assert mgr.entry(9).coordinator_epoch == 2 and mgr.first_unstable_offset() is None


def test_a_producer_with_an_open_transaction_never_expires() -> None:
    clock = ManualClock(T0)
    mgr = ProducerStateManager(clock, expiration_ms=1000)
    mgr.on_append(hdr(pid=1, seq=0, attributes=TXN), 0)
    mgr.on_append(hdr(pid=2, seq=0), 1)
    assert mgr.expire(T0 + 10_000) == 1
    assert mgr.entry(1) is not None and mgr.entry(2) is None


def test_snapshot_round_trip_keeps_open_transactions(tmp_path: Path) -> None:
    mgr = ProducerStateManager(ManualClock(T0))
    mgr.on_append(hdr(pid=5, seq=0, attributes=TXN), 0)
    mgr.on_append(hdr(pid=4, seq=0, attributes=TXN), 1)
    mgr.on_append(hdr(pid=3, seq=0, attributes=TXN), 2)
    mgr.on_append(hdr(pid=3, seq=NO_SEQUENCE, attributes=MARKER), 3, end_txn=EndTxn(True, 7))
    mgr.take_snapshot(tmp_path, 4)
    loaded = ProducerStateManager(ManualClock(T0))
    assert loaded.load_latest_snapshot(tmp_path, 4) == 4
    assert list(loaded.ongoing_transactions().items()) == [(5, 0), (4, 1)]  # first-offset order
    assert loaded.entry(3).coordinator_epoch == 7 and loaded.entry(3).current_txn_first_offset == -1
    assert loaded.last_stable_offset(4) == 0
    assert snap.read_snapshot(tmp_path / snap.format_snapshot_name(4)).producers[0].current_txn_first_offset == 0
    assert (tmp_path / snap.format_snapshot_name(4)).read_bytes()[4:6] == b"\x00\x02"  # version 2


def test_a_version_1_snapshot_is_still_read(tmp_path: Path) -> None:
    old = snap.Snapshot(offset=6, producers=[snap.SnapshotProducer(8, 2, T0, [snap.SnapshotBatch(0, 5, 0, 5, T0)])])
    (tmp_path / snap.format_snapshot_name(6)).write_bytes(snap.encode_snapshot(old, version=1))
    assert (tmp_path / snap.format_snapshot_name(6)).read_bytes()[4:6] == b"\x00\x01"
    mgr = ProducerStateManager(ManualClock(T0))
    assert mgr.load_latest_snapshot(tmp_path, 10) == 6
    entry = mgr.entry(8)
    assert (entry.producer_epoch, entry.last_seq, entry.coordinator_epoch, entry.current_txn_first_offset) == (
        2,
        5,
        -1,
        -1,
    )
    assert mgr.check(hdr(pid=8, epoch=2, seq=6)) is None


# --- the marker batch ------------------------------------------------------------------------------


def test_marker_is_kafkas_end_transaction_marker() -> None:
    data = encode_txn_marker(42, 3, TxnMarker(commit=False, coordinator_epoch=9), CLOCK_START)
    header = parse_header(data)
    assert header.is_control and header.is_transactional and header.producer_id == 42
    assert (header.producer_epoch, header.base_sequence, header.records_count) == (3, -1, 1)
    assert decode_txn_marker(data) == TxnMarker(False, 9)
    [record] = list(DefaultRecordBatch(data))
    assert struct.unpack(">hh", record.key) == (0, 0)  # version 0, ABORT
    assert struct.unpack(">hi", record.value) == (0, 9)  # version 0, coordinator epoch
    assert DefaultRecordBatch(data).validate_crc()
    assert struct.unpack(">hh", list(DefaultRecordBatch(encode_txn_marker(1, 0, TxnMarker(True, 0), 0)))[0].key) == (
        0,
        1,
    )


# --- the aborted-transaction index ---------------------------------------------------------------


def test_txn_index_codec() -> None:
    txns = [AbortedTxn(7, 0, 4, 5), AbortedTxn(8, 2, 9, 10)]
    data = encode_entries(txns)
    assert len(data) == 2 * ENTRY_SIZE == 68
    assert struct.unpack_from(">hqqqq", data) == (0, 7, 0, 4, 5)
    assert decode_entries(data, 0, 20) == txns
    for bad in (data[:-1], b"\x00\x01" + data[2:], encode_entries(txns[::-1])):
        with pytest.raises(TxnIndexCorruptError):
            decode_entries(bad, 0, 20)
    with pytest.raises(TxnIndexCorruptError):
        decode_entries(data, 5, 20)  # a marker below the segment


def test_txn_index_collect_truncate_and_open(tmp_path: Path) -> None:
    index, rebuild = TxnIndex.open(tmp_path, [0, 10, 20])
    assert rebuild is None and all(index.path(b).exists() for b in (0, 10, 20))  # legacy dir: empty files
    index.append(0, AbortedTxn(1, 2, 5, 6))
    index.append(10, AbortedTxn(2, 8, 12, 13))
    index.append(10, AbortedTxn(3, 14, 16, 30))  # another transaction still open at 30
    index.append(20, AbortedTxn(4, 30, 31, 32))
    assert index.collect(0, 6) == [AbortedTxn(1, 2, 5, 6)]  # complete: its LSO reaches 6
    assert index.collect(6, 14) == [AbortedTxn(2, 8, 12, 13)]
    assert index.collect(12, 40) == [AbortedTxn(2, 8, 12, 13), AbortedTxn(3, 14, 16, 30), AbortedTxn(4, 30, 31, 32)]
    assert index.collect(13, 15) == [AbortedTxn(3, 14, 16, 30)]
    index.truncate_from(16)
    assert index.all_entries() == [AbortedTxn(1, 2, 5, 6), AbortedTxn(2, 8, 12, 13)]
    assert index.path(10).stat().st_size == ENTRY_SIZE and index.path(20).stat().st_size == 0
    reopened, rebuild = TxnIndex.open(tmp_path, [0, 10, 20])
    assert rebuild is None and reopened.all_entries() == index.all_entries()
    # a missing file (in a directory that has them) and a corrupt one: rebuilt from the lower
    index.path(20).unlink()
    with open(index.path(10), "ab") as f:
        f.write(b"\x00\x01")
    reopened, rebuild = TxnIndex.open(tmp_path, [0, 10, 20])
    assert rebuild == 10 and index.path(20).exists() and index.path(10).stat().st_size == 0
    reopened.retain([10, 20])
    assert reopened.all_entries() == []


# --- a classic partition ---------------------------------------------------------------------------


def run_txn_story(partition: Partition, append: object = None) -> None:
    """Producer 7 commits [0, 2), producer 8 aborts [2, 4) around it, producer 9 stays open."""
    add = append or (lambda b: partition.append_records(b, acks=-1))
    add(txn_batch(0, producer_id=7))  # 0-1
    add(txn_batch(0, producer_id=8, tag=b"x"))  # 2-3
    assert partition.last_stable_offset == 0
    assert partition.append_txn_marker(7, 0, 0, commit=True) == 5  # marker at 4
    assert partition.last_stable_offset == 2  # producer 8 still open
    assert partition.append_txn_marker(8, 0, 0, commit=False) == 6  # marker at 5
    assert partition.last_stable_offset == 6
    add(txn_batch(0, producer_id=9, tag=b"o"))  # 6-7, left open
    assert partition.last_stable_offset == 6 and partition.log.high_watermark == 8


def test_classic_partition_lso_index_and_fencing(tmp_path: Path, clock: ManualClock) -> None:
    partition = classic(tmp_path, clock)
    run_txn_story(partition)
    assert partition.txn_index.all_entries() == [AbortedTxn(8, 2, 5, 6)]
    assert partition.aborted_transactions(0, 8) == [AbortedTxn(8, 2, 5, 6)]
    assert partition.aborted_transactions(6, 8) == []
    with pytest.raises(ApiError) as info:
        partition.append_txn_marker(9, -1, 0, commit=False)
    assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(ApiError) as info:
        partition.append_records(txn_batch(2, producer_id=9, transactional=False), acks=-1)
    assert info.value.code == ErrorCode.INVALID_TXN_STATE
    partition.append_txn_marker(9, 0, 3, commit=True)
    with pytest.raises(ApiError) as info:
        partition.append_txn_marker(9, 0, 2, commit=True)
    assert info.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert partition.last_stable_offset == partition.log.log_end_offset == 9
    partition.log.truncate_to(9)  # no-op at the end
    assert partition.producers.entry(9).coordinator_epoch == 3


@pytest.mark.parametrize("clean", [True, False])
def test_recovery_rebuilds_transactions_and_index(tmp_path: Path, clock: ManualClock, clean: bool) -> None:
    partition = classic(tmp_path, clock, **{"segment.bytes": "250"})  # several segments
    run_txn_story(partition)
    before = (partition.txn_index.all_entries(), partition.last_stable_offset)
    files = sorted(p.name for p in tmp_path.glob("*.txnindex"))
    assert len(files) == len(partition.log.segment_base_offsets) > 1
    if clean:
        partition.close()
    else:
        partition.log.flush()
        partition.log._close_without_flush()
    reopened = classic(tmp_path, clock, **{"segment.bytes": "250"})
    assert (reopened.txn_index.all_entries(), reopened.last_stable_offset) == before
    assert dict(reopened.producers.ongoing_transactions()) == {9: 6}
    reopened.append_txn_marker(9, 0, 0, commit=False)
    assert reopened.last_stable_offset == 9 and reopened.txn_index.all_entries()[-1] == AbortedTxn(9, 6, 8, 9)


def test_corrupt_or_missing_index_files_are_rebuilt(tmp_path: Path, clock: ManualClock) -> None:
    partition = classic(tmp_path, clock, **{"segment.bytes": "250"})
    run_txn_story(partition)
    entries = partition.txn_index.all_entries()
    holder = next(b for b in partition.log.segment_base_offsets if partition.txn_index.entries(b))
    partition.close()
    path = tmp_path / f"{holder:020d}.txnindex"
    path.write_bytes(path.read_bytes()[:-3])  # ragged
    assert classic(tmp_path, clock, **{"segment.bytes": "250"}).txn_index.all_entries() == entries
    path.unlink()
    reopened = classic(tmp_path, clock, **{"segment.bytes": "250"})
    assert reopened.txn_index.all_entries() == entries and path.stat().st_size == ENTRY_SIZE


def test_truncation_reopens_the_transaction_and_drops_its_abort(tmp_path: Path, clock: ManualClock) -> None:
    leader = classic(tmp_path / "leader", clock)
    run_txn_story(leader)
    follower = Partition.open(
        "t", 0, tmp_path / "follower", leader.settings, clock, 86_400_000, on_append=lambda p: None
    )
    follower.make_follower(PartitionStateRecord(1, [0, 1], 0, 0, [0, 1]), 1)
    entries = leader.log.read(0, 1 << 20, leader.log.log_end_offset)
    follower.append_replicated([(int(e.kind), bytes(e.data)) for e in entries], leader.log.high_watermark)
    # the follower computes its own LSO from its producer state and the high watermark it learned
    assert follower.last_stable_offset == 6 and follower.txn_index.all_entries() == [AbortedTxn(8, 2, 5, 6)]
    assert follower.aborted_transactions(0, 8) == [AbortedTxn(8, 2, 5, 6)]
    follower.truncate_to(5)  # drops the ABORT marker of producer 8 (and what follows)
    assert follower.txn_index.all_entries() == []
    assert dict(follower.producers.ongoing_transactions()) == {8: 2}
    assert follower.last_stable_offset == 2


def test_a_follower_with_a_lagging_high_watermark_keeps_the_transaction_unstable(
    tmp_path: Path, clock: ManualClock
) -> None:
    leader = classic(tmp_path / "leader", clock)
    leader.append_records(txn_batch(0, producer_id=7), acks=-1)
    leader.append_txn_marker(7, 0, 0, commit=True)
    follower = Partition.open(
        "t", 0, tmp_path / "follower", leader.settings, clock, 86_400_000, on_append=lambda p: None
    )
    follower.make_follower(PartitionStateRecord(1, [0, 1], 0, 0, [0, 1]), 1)
    entries = leader.log.read(0, 1 << 20, leader.log.log_end_offset)
    follower.append_replicated([(int(e.kind), bytes(e.data)) for e in entries], 1)  # HW not past the marker
    assert follower.last_stable_offset == 0
    follower.append_replicated([], 3)
    assert follower.last_stable_offset == 3


def test_retention_deletes_the_index_with_its_segment(tmp_path: Path, clock: ManualClock) -> None:
    partition = classic(tmp_path, clock, **{"segment.bytes": "250", "retention.bytes": "1"})
    run_txn_story(partition)
    partition.append_txn_marker(9, 0, 0, commit=True)
    partition.append_records(txn_batch(0, producer_id=10, transactional=False), acks=-1)
    bases = partition.log.segment_base_offsets
    assert partition.log.enforce_retention() > 0
    left = partition.log.segment_base_offsets
    assert sorted(int(p.name[:20]) for p in tmp_path.glob("*.txnindex")) == left != bases
    assert partition.aborted_transactions(left[0], partition.log.log_end_offset) == []
    assert partition.txn_index.all_entries() == []


# --- a diskless partition ---------------------------------------------------------------------------


def test_diskless_partition_transactions(tmp_path: Path) -> None:
    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=1, wal_linger_ms=1)
        partition = rig.partitions[0]

        async def add(b: memoryview) -> None:
            [result] = await asyncio.gather(*rig.writer.submit([rig.append(0, b)]))
            assert result.error_code == 0

        await add(txn_batch(0, producer_id=7))
        await add(txn_batch(0, producer_id=8, tag=b"x"))
        assert partition.last_stable_offset == 0
        partition.append_txn_marker(7, 0, 0, commit=True)
        partition.append_txn_marker(8, 0, 0, commit=False)
        assert partition.last_stable_offset == 6
        assert partition.txn_index.all_entries() == [AbortedTxn(8, 2, 5, 6)]
        kinds = [e.kind.name for e in partition.log.read(0, 1 << 20, 6)]
        assert kinds == ["COORDINATES", "COORDINATES", "RECORDS", "RECORDS"]  # markers inline
        await rig.writer.close()

    asyncio.run(scenario())


# --- Fetch, ListOffsets, WriteTxnMarkers ----------------------------------------------------------


def fetch_request(offset: int, isolation_level: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 24,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        rack_id="",
        forgotten_topics_data=[],
        topics=[
            FetchRequest.FetchTopic(
                topic="c",
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )


def handler_broker(partition: Partition) -> SimpleNamespace:
    topics = {"c": Topic("c", TOPIC_ID, 1, {}, partition.settings)}

    def leader(name: str, index: int) -> Partition:
        if name not in topics:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)
        partition.check_leader()
        return partition

    return SimpleNamespace(
        catalog=SimpleNamespace(get=topics.get, by_id=lambda topic_id: None),
        replica_manager=SimpleNamespace(
            partitions={("c", 0): partition}, get=lambda name, index: leader(name, index), leader=leader
        ),
        waiters=FetchWaiters(),
        metrics=SimpleNamespace(fetched_bytes=SimpleNamespace(inc=lambda n: None)),
        stopping=False,
        router=SimpleNamespace(racks=SimpleNamespace(remember=lambda peer, rack: None)),
    )


def fetched(partition: Partition, offset: int, isolation_level: int):  # type: ignore[no-untyped-def]
    header = SimpleNamespace(api_version=12, peer="p", client_id="c", forwarded=False)
    response = asyncio.run(fetch.handle(handler_broker(partition), header, fetch_request(offset, isolation_level)))
    [answer] = response.responses[0].partitions
    batches = []
    data = bytes(answer.records)
    pos = 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0] + 12
        batches.append(parse_header(data[pos : pos + size]))
        pos += size
    return answer, batches


def test_fetch_read_committed_stops_at_the_lso_and_names_the_aborted(tmp_path: Path, clock: ManualClock) -> None:
    partition = classic(tmp_path, clock)
    run_txn_story(partition)
    answer, batches = fetched(partition, 0, isolation_level=1)
    assert (answer.high_watermark, answer.last_stable_offset) == (8, 6)
    assert [b.base_offset for b in batches] == [0, 2, 4, 5]  # nothing of the open transaction at 6
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(8, 2)]
    answer, batches = fetched(partition, 6, isolation_level=1)
    assert batches == [] and answer.aborted_transactions == []
    answer, batches = fetched(partition, 0, isolation_level=0)  # read_uncommitted: unchanged
    assert [b.base_offset for b in batches] == [0, 2, 4, 5, 6] and answer.aborted_transactions is None
    assert answer.last_stable_offset == 6
    partition.append_txn_marker(9, 0, 0, commit=True)
    answer, batches = fetched(partition, 6, isolation_level=1)
    assert [b.base_offset for b in batches] == [6, 8] and answer.aborted_transactions == []


def test_list_offsets_latest_is_the_lso_for_read_committed(tmp_path: Path, clock: ManualClock) -> None:
    partition = classic(tmp_path, clock)
    run_txn_story(partition)
    broker = handler_broker(partition)
    assert asyncio.run(list_offsets._lookup(broker, partition, list_offsets.LATEST, True)) == (6, -1)  # type: ignore[arg-type]
    assert asyncio.run(list_offsets._lookup(broker, partition, list_offsets.LATEST, False)) == (8, -1)  # type: ignore[arg-type]
    # a timestamp at or above the LSO is not readable yet for read_committed
    assert asyncio.run(list_offsets._lookup(broker, partition, CLOCK_START, True)) == (0, CLOCK_START)  # type: ignore[arg-type]


def test_write_txn_markers_handler(tmp_path: Path, clock: ManualClock) -> None:
    partition = classic(tmp_path, clock)
    partition.append_records(txn_batch(0, producer_id=7, epoch=2), acks=-1)
    M = WriteTxnMarkersRequest.WritableTxnMarker
    T = M.WritableTxnMarkerTopic

    def request(epoch: int, coordinator_epoch: int, commit: bool, topic: str = "c") -> WriteTxnMarkersRequest:
        return WriteTxnMarkersRequest(
            markers=[
                M(
                    producer_id=7,
                    producer_epoch=epoch,
                    transaction_result=commit,
                    topics=[T(name=topic, partition_indexes=[0])],
                    coordinator_epoch=coordinator_epoch,
                )
            ]
        )

    def codes(req: WriteTxnMarkersRequest) -> list[int]:
        header = SimpleNamespace(api_version=1)
        response = asyncio.run(write_txn_markers.handle(handler_broker(partition), header, req))  # type: ignore[arg-type]
        return [p.error_code for m in response.markers for t in m.topics for p in t.partitions]

    assert codes(request(2, 1, False, topic="nope")) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert codes(request(1, 1, False)) == [ErrorCode.INVALID_PRODUCER_EPOCH]
    assert partition.last_stable_offset == 0
    assert codes(request(2, 1, False)) == [0]
    assert partition.last_stable_offset == 3 and partition.txn_index.all_entries() == [AbortedTxn(7, 0, 2, 3)]
    assert codes(request(2, 0, True)) == [ErrorCode.TRANSACTION_COORDINATOR_FENCED]
    partition.make_follower(PartitionStateRecord(1, [0, 1], 1, 1, [0, 1]), 2)
    assert codes(request(2, 1, True)) == [ErrorCode.NOT_LEADER_OR_FOLLOWER]


def test_a_broker_without_a_replica_gets_the_lso_and_aborted_transactions(tmp_path: Path, clock: ManualClock) -> None:
    """The stateless path: a replica answers a read_committed ReplicaReadRequest up to its LSO
    with the aborted transactions, and the asking broker's Fetch serves them as a local read."""
    from broker.routing.messages import ROUTING_VERSION, ReadPartition, ReplicaReadRequest
    from broker.reads.read_service import ReplicaReadService
    from broker.reads.remote import RemoteRead

    partition = classic(tmp_path, clock)
    run_txn_story(partition)
    topic = Topic("c", TOPIC_ID, 1, {}, partition.settings)
    service = ReplicaReadService(
        SimpleNamespace(by_id=lambda topic_id: topic),  # type: ignore[arg-type]
        SimpleNamespace(get=lambda name, index: partition),  # type: ignore[arg-type]
        FetchWaiters(),
        no_tiers(),
    )

    def read(isolation_level: int) -> RemoteRead:
        wanted = ReadPartition(str(TOPIC_ID), 0, 0, 1 << 20, isolation_level)
        [result] = asyncio.run(service.handle(ReplicaReadRequest(ROUTING_VERSION, 0, [wanted]))).partitions
        return RemoteRead(result)

    committed = read(1)
    assert committed.last_stable_offset == 6 and committed.high_watermark == 8
    assert [e.base_offset for e in committed.entries] == [0, 2, 4, 5]
    assert committed.aborted == [(8, 2, 5)]
    assert [e.base_offset for e in read(0).entries] == [0, 2, 4, 5, 6]
    # the asking broker's Fetch (it hosts no replica: the answer is the remote one)
    broker = handler_broker(partition)
    broker.view = SimpleNamespace(partitions={})
    topics, *_rest = fetch._read_all(broker, fetch_request(0, 1), {("c", 0): committed})  # type: ignore[arg-type]
    [answer] = topics[0].partitions
    assert answer.last_stable_offset == 6
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(8, 2)]


def test_the_lso_never_falls_below_the_log_start(tmp_path: Path, clock: ManualClock) -> None:
    partition = classic(tmp_path, clock, **{"segment.bytes": "250"})
    partition.append_records(txn_batch(0, producer_id=7), acks=-1)  # open, never ended
    for seq in range(0, 12, 2):
        partition.append_records(txn_batch(seq, producer_id=8, transactional=False), acks=-1)
    assert partition.last_stable_offset == 0
    start = partition.log.delete_records_before(6)
    assert start == 6 and partition.last_stable_offset == 6
