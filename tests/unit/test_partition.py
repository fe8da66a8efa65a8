"""The partition append path over a real log in a temp dir: validation codes, duplicate
detection, and producer state rebuilt after an unclean stop from snapshot + log tail."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.clock import ManualClock
from broker.config import load_config
from broker.metadata.records import PartitionStateRecord
from broker.partition import Partition
from broker.protocol.errors import ApiError, ErrorCode
from broker.topic_config import effective

CLOCK_START = 1_800_000_000_000


def batch(seq: int, count: int = 2, producer_id: int = 7, epoch: int = 0, ts: int = CLOCK_START) -> memoryview:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=ts, key=b"k", value=b"v%d" % i, headers=[])
    return memoryview(bytes(builder.build()))


def open_partition(directory: Path, clock: ManualClock, **overrides: str) -> Partition:
    settings = effective({"diskless.enable": "false", **overrides}, load_config(environ={}))  # appends records
    return lead(Partition.open("t", 0, directory, settings, clock, 86_400_000, on_append=lambda p: None))


def lead(partition: Partition) -> Partition:
    """Make broker 0 the partition's only replica and leader, as a single broker is."""
    partition.make_leader(0, PartitionStateRecord(1, [0], 0, 0, [0]), 1)
    return partition


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(CLOCK_START)


def test_duplicates_answer_original_offsets_across_unclean_restart(tmp_path: Path, clock: ManualClock) -> None:
    partition = open_partition(tmp_path, clock, **{"segment.bytes": "300"})  # rolls -> snapshots
    offsets = [partition.append_records(batch(seq), acks=-1).base_offset for seq in range(0, 20, 2)]
    assert offsets == list(range(0, 20, 2))
    partition.log.flush()
    # no close(): as after kill -9, the newest snapshot is older than the log end
    reopened = open_partition(tmp_path, clock, **{"segment.bytes": "300"})
    assert reopened.append_records(batch(18), acks=-1).base_offset == 18  # retry of the last batch
    assert reopened.log.log_end_offset == 20  # not appended again
    with pytest.raises(ApiError) as info:
        reopened.append_records(batch(40), acks=-1)
    assert info.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert reopened.append_records(batch(20), acks=-1).base_offset == 20


@pytest.mark.parametrize(
    "mutate,code",
    [
        (lambda raw: raw.__setitem__(-1, raw[-1] ^ 0xFF), ErrorCode.CORRUPT_MESSAGE),
        (lambda raw: raw.__setitem__(16, 1), ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT),
        (lambda raw: raw.__setitem__(slice(None), raw[:-3]), ErrorCode.CORRUPT_MESSAGE),
    ],
)
def test_bad_batches(tmp_path: Path, clock: ManualClock, mutate, code: ErrorCode) -> None:  # type: ignore[no-untyped-def]
    partition = open_partition(tmp_path, clock)
    raw = bytearray(batch(0))
    mutate(raw)
    with pytest.raises(ApiError) as info:
        partition.append_records(memoryview(raw), acks=1)
    assert info.value.code == code
    assert partition.log.log_end_offset == 0


def test_size_timestamp_and_min_isr_limits(tmp_path: Path, clock: ManualClock) -> None:
    partition = open_partition(
        tmp_path,
        clock,
        **{"max.message.bytes": "50", "min.insync.replicas": "2", "message.timestamp.after.max.ms": "1000"},
    )
    with pytest.raises(ApiError) as info:
        partition.append_records(batch(0), acks=1)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    partition.update_settings(
        effective(
            {"diskless.enable": "false", "min.insync.replicas": "2", "message.timestamp.after.max.ms": "1000"},
            load_config(environ={}),
        )
    )
    with pytest.raises(ApiError) as info:
        partition.append_records(batch(0, ts=CLOCK_START + 5_000), acks=1)
    assert info.value.code == ErrorCode.INVALID_TIMESTAMP
    with pytest.raises(ApiError) as info:
        partition.append_records(batch(0), acks=-1)
    assert info.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert partition.append_records(batch(0), acks=1).base_offset == 0  # acks=1 ignores min.insync.replicas


def test_log_append_time_is_stamped(tmp_path: Path, clock: ManualClock) -> None:
    partition = open_partition(tmp_path, clock, **{"message.timestamp.type": "LogAppendTime"})
    clock.advance(123)
    outcome = partition.append_records(batch(0, ts=1), acks=1)
    assert outcome.log_append_time_ms == CLOCK_START + 123
    entry = partition.log.read(0, 1 << 20, partition.log.high_watermark)[0]
    assert entry.header.max_timestamp == CLOCK_START + 123


def test_an_append_is_all_batches_or_none(tmp_path: Path, clock: ManualClock) -> None:
    """Regression (issue 11, defect 7): when a later batch of a multi-batch append was refused,
    the earlier ones stayed in the log, with the high watermark not advanced and nobody woken
    (RF=1: invisible data that a retry would duplicate)."""
    partition = open_partition(tmp_path, clock)
    woken: list[int] = []
    partition._on_append = lambda p: woken.append(p.log.high_watermark)
    records = memoryview(bytes(batch(0)) + bytes(batch(5)))  # the second batch skips sequences 2-4
    with pytest.raises(ApiError) as refused:
        partition.append_records(records, acks=-1)
    assert refused.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert partition.log.log_end_offset == 0 and partition.log.high_watermark == 0 and woken == []
    outcome = partition.append_records(batch(0), acks=-1)  # the retry of the first batch is new, not a duplicate
    assert (outcome.base_offset, outcome.appended_bytes > 0, partition.log.high_watermark) == (0, True, 2)


def test_a_failed_write_mid_append_is_cut_back(tmp_path: Path, clock: ManualClock) -> None:
    """Regression (issue 11, defect 7): an I/O error on the second batch left the first one
    appended but unexposed."""
    partition = open_partition(tmp_path, clock)
    real_append = partition.log.append
    calls = []

    def failing_second(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_append(*args, **kwargs)

    partition.log.append = failing_second  # type: ignore[method-assign]
    with pytest.raises(ApiError) as failed:
        partition.append_records(memoryview(bytes(batch(0)) + bytes(batch(2))), acks=1)
    assert failed.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    partition.log.append = real_append  # type: ignore[method-assign]
    assert partition.log.log_end_offset == 0
    assert partition.append_records(memoryview(bytes(batch(0)) + bytes(batch(2))), acks=1).base_offset == 0
    assert partition.log.high_watermark == 4


def test_after_a_failed_write_the_producers_later_batches_wait_for_its_retry(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A write that failed (disk error) or was refused for too few in-sync replicas, then a
    later batch of the same producer that was already in flight: it must not land ahead of the
    retry (a new producer: accepted out of order; a known one: OUT_OF_ORDER_SEQUENCE_NUMBER,
    after which librdkafka bumps its epoch and duplicates). It gets the first one's retriable
    error until the first is sent again (producers/barriers.py)."""
    partition = open_partition(tmp_path, clock)
    real_append = partition.log.append

    def disk_full(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(28, "No space left on device")

    partition.log.append = disk_full  # type: ignore[method-assign]
    with pytest.raises(ApiError) as failed:
        partition.append_records(batch(0), acks=1)
    assert failed.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    partition.log.append = real_append  # type: ignore[method-assign]
    with pytest.raises(ApiError) as held:
        partition.append_records(batch(2), acks=1)
    assert held.value.code == ErrorCode.KAFKA_STORAGE_ERROR and partition.log.log_end_offset == 0
    assert partition.append_records(batch(0), acks=1).base_offset == 0
    assert partition.append_records(batch(2), acks=1).base_offset == 2
    # too few in-sync replicas for acks=all, then room again: the same
    partition.update_settings(
        effective({"diskless.enable": "false", "min.insync.replicas": "2"}, load_config(environ={}))
    )
    with pytest.raises(ApiError) as refused:
        partition.append_records(batch(4), acks=-1)
    assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    partition.update_settings(effective({"diskless.enable": "false"}, load_config(environ={})))
    with pytest.raises(ApiError) as held:
        partition.append_records(batch(6), acks=-1)
    assert held.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert partition.append_records(batch(4), acks=-1).base_offset == 4
    assert partition.append_records(batch(6), acks=-1).base_offset == 6 and len(partition.barriers) == 0


def test_a_refusal_holds_back_later_batches_until_the_client_can_have_read_it(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Cluster seed 300066 (at e4005e5): a disk error refused sequence 179, but its answer
    waited 35 s on the connection behind earlier requests (acks=all, a stalled commit); the
    producer's next batch came 10.7 s after the failure, the barrier had lapsed (10 s), and
    OUT_OF_ORDER_SEQUENCE_NUMBER made librdkafka bump its epoch and store the possibly
    persisted 177 and 178 again. The lapse counts from the request's timeout instead."""
    partition = open_partition(tmp_path, clock)
    real_append = partition.log.append

    def io_error(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(5, "Input/output error")

    assert partition.append_records(batch(0), acks=1, answer_within_s=30.0).base_offset == 0
    partition.log.append = io_error  # type: ignore[method-assign]
    with pytest.raises(ApiError) as failed:
        partition.append_records(batch(2), acks=1, answer_within_s=30.0)
    assert failed.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    partition.log.append = real_append  # type: ignore[method-assign]
    clock.advance(11_000)  # past the 10 s retry window, well within the answer's 30 s
    with pytest.raises(ApiError) as held:
        partition.append_records(batch(4), acks=1, answer_within_s=30.0)
    assert held.value.code == ErrorCode.KAFKA_STORAGE_ERROR, "OUT_OF_ORDER here makes librdkafka bump and duplicate"
    assert partition.append_records(batch(2), acks=1).base_offset == 2
    assert partition.append_records(batch(4), acks=1).base_offset == 4


def test_a_former_leader_drops_the_epoch_it_never_wrote_to(tmp_path: Path, clock: ManualClock) -> None:
    """Regression: a broker that led an epoch without appending (acks=all refused with
    NOT_ENOUGH_REPLICAS) kept that epoch at its log end after following again, because a
    truncation to the log end returned early; it then reported it as its last fetched epoch
    forever, the new leader answered "diverging" forever, and acks=all never completed."""
    partition = open_partition(tmp_path, clock)
    partition.append_records(batch(0), acks=1)
    partition.make_leader(0, PartitionStateRecord(1, [1, 0], 0, 1, [0]), 2)  # epoch 1 from offset 2, nothing written
    partition.make_follower(PartitionStateRecord(1, [1, 0], 1, 2, [0, 1]), 3)
    assert partition.epochs.latest_epoch == 1
    partition.truncate_to(2)  # the new leader: epoch 1 is not mine, epoch 0 ends at 2
    assert partition.epochs.latest_epoch == 0 and partition.log.log_end_offset == 2


def test_a_duplicate_waits_for_its_own_offsets_not_the_log_end(tmp_path: Path, clock: ManualClock) -> None:
    """Cluster seed 8017: a retried batch answered as a duplicate waited (acks=all) for the
    high watermark to reach the whole log end, as if it had just been appended at the end.
    Behind an unreplicated tail, a leader change during that wait answered
    NOT_LEADER_OR_FOLLOWER, which librdkafka takes as "not persisted", for a batch that was
    committed; its next epoch bump then stored it a second time. Kafka waits for the
    duplicate's own last offset."""
    partition = open_partition(tmp_path, clock)
    partition.make_leader(0, PartitionStateRecord(1, [0, 1], 0, 1, [0, 1]), 2)
    assert partition.append_records(batch(0), acks=-1).end_offset == 2
    assert partition.leader_state is not None
    partition.leader_state.on_follower_fetch(1, 2, 2, clock.now_ms())  # replicated
    partition.advance_high_watermark()
    assert partition.append_records(batch(2), acks=-1).end_offset == 4  # not replicated
    retry = partition.append_records(batch(0), acks=-1)
    assert (retry.base_offset, retry.end_offset) == (0, 2)
    assert partition.log.high_watermark >= retry.end_offset, "acknowledged at once"


def test_a_follower_that_refused_a_producers_batches_holds_back_their_successors_once_it_leads(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Cluster seed 101446: a producer sent a partition's next batches (sequences 6-10) to the
    broker its metadata named leader before that broker had taken over. It refused 6-8 as not
    the leader, became leader, and answered 9 and 10 OUT_OF_ORDER_SEQUENCE_NUMBER, as Kafka
    does. librdkafka then bumps its epoch and sends every unacknowledged message of every
    partition again from sequence 0 (librdkafka issue 4953): another partition's batches,
    appended by a leader that then answered NOT_LEADER_OR_FOLLOWER, were stored twice. A
    broker that refused a producer's batch as not the leader refuses its later ones with the
    same retriable error until that one comes again, and then takes them in order."""
    partition = open_partition(tmp_path, clock)
    assert partition.append_records(batch(0), acks=1).base_offset == 0
    partition.make_follower(PartitionStateRecord(1, [0, 1], 1, 2, [0, 1]), 2)
    for seq in (2, 4):
        with pytest.raises(ApiError) as refused:
            partition.append_records(batch(seq), acks=1)
        assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    partition.make_leader(0, PartitionStateRecord(1, [0, 1], 0, 3, [0, 1]), 3)
    with pytest.raises(ApiError) as held:
        partition.append_records(batch(6), acks=1)
    assert held.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER, "not OUT_OF_ORDER: librdkafka would bump its epoch"
    assert [partition.append_records(batch(seq), acks=1).base_offset for seq in (2, 4, 6)] == [2, 4, 6]


def test_a_barrier_whose_batch_reached_the_log_another_way_holds_back_nothing(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The batches a follower refused usually reach the log through the real leader and come
    here by replication: once this broker leads, the producer's next batch follows them in
    sequence, so nothing is missing and it is taken at once (no 10 s stall)."""
    partition = open_partition(tmp_path, clock)
    assert partition.append_records(batch(0), acks=1).base_offset == 0
    partition.make_leader(0, PartitionStateRecord(1, [0, 1], 0, 2, [0, 1]), 2)
    partition.make_follower(PartitionStateRecord(1, [0, 1], 1, 3, [0, 1]), 3)
    with pytest.raises(ApiError) as refused:
        partition.append_records(batch(2), acks=1)
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    leader = open_partition(tmp_path / "leader", clock)  # the real leader of epoch 3 takes it
    leader.append_records(batch(0), acks=1)
    leader.make_leader(0, PartitionStateRecord(1, [1, 0], 1, 3, [0, 1]), 3)
    leader.append_records(batch(2), acks=1)
    partition.append_replicated([(e.kind, e.data) for e in leader.log.iter_entries(2)], 4)
    partition.make_leader(0, PartitionStateRecord(1, [0, 1], 0, 4, [0, 1]), 4)
    assert partition.append_records(batch(4), acks=1).base_offset == 4
    assert len(partition.barriers) == 0


def test_closing_an_idle_partition_writes_nothing(tmp_path: Path, clock: ManualClock, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Regression (issue 28): every close wrote a producer snapshot and a checkpoint (two
    fsyncs each), so a broker's stop cost 2.9 ms per partition, idle or not (58 s for
    20,000). A partition nothing changed since its open (after a clean close) writes none."""
    import os

    partition = open_partition(tmp_path, clock)
    assert partition.append_records(batch(0), acks=-1).base_offset == 0
    partition.close()
    idle = open_partition(tmp_path, clock)
    calls: list[str] = []
    for name in ("fsync", "fdatasync", "replace", "rename"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda *args, _real=real, _name=name: (calls.append(_name), _real(*args))[1])
    idle.close()
    assert calls == []
    monkeypatch.undo()
    again = open_partition(tmp_path, clock)
    assert again.append_records(batch(0), acks=-1).base_offset == 0  # the producer state survived: a duplicate
    assert again.append_records(batch(2), acks=-1).base_offset == 2
    again.close()


def test_a_log_cut_and_grown_back_to_its_open_length_writes_its_new_producer_state(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The close skips the snapshot only while the one loaded at open is the state: after a
    truncation the same log end offset holds other batches."""
    partition = open_partition(tmp_path, clock)
    partition.append_records(batch(0), acks=-1)
    partition.append_records(batch(2), acks=-1)
    partition.close()
    reopened = open_partition(tmp_path, clock)
    reopened.truncate_to(2)
    assert reopened.append_records(batch(0, producer_id=8), acks=-1).base_offset == 2
    assert reopened.log.log_end_offset == 4
    reopened.close()
    again = open_partition(tmp_path, clock)
    assert again.append_records(batch(0, producer_id=8), acks=-1).base_offset == 2  # a duplicate
    assert again.append_records(batch(2), acks=-1).base_offset == 4  # producer 7's seq 2 is gone with its batch
    again.close()
