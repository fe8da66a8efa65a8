"""The transaction coordinator's pure parts: the state machine (every allowed move and the
errors of refused ones), the __transaction_state record codec, the transactional id ->
partition mapping (Java's String.hashCode), timeout checks and expiry."""

from __future__ import annotations

import asyncio

import pytest

from broker.coordinator.record_batches import build_batch, read_batch
from broker.protocol.errors import ApiError, ErrorCode
from broker.transactions import metadata as rules
from broker.transactions import records
from broker.transactions.metadata import (
    EXHAUSTED_EPOCH,
    VALID_PREVIOUS_STATES,
    IllegalTxnTransition,
    TransactionMetadata,
    TxnState,
)

S = TxnState
TP = frozenset({("t", 0), ("t", 1)})


def txn(state: TxnState = S.EMPTY, epoch: int = 0, partitions: frozenset = frozenset(), start: int = -1):  # type: ignore[no-untyped-def]
    return TransactionMetadata("tx", 5, -1, epoch, -1, 60_000, state, partitions, start, 0)


def code(call) -> int:  # type: ignore[no-untyped-def]
    with pytest.raises(ApiError) as raised:
        call()
    return raised.value.code


def test_every_move_outside_the_table_is_refused() -> None:
    for target, previous in VALID_PREVIOUS_STATES.items():
        for state in TxnState:
            if state in previous:
                assert txn(state).moved(target, 1).state is target
            else:
                with pytest.raises(IllegalTxnTransition):
                    txn(state).moved(target, 1)


def test_init_producer_id_new_bump_rotate_and_fence() -> None:
    new = rules.init_producer_id(None, "tx", timeout_ms=1000, now_ms=7, new_producer_id=42)
    assert (new.producer_id, new.producer_epoch, new.state, new.timeout_ms) == (42, 0, S.EMPTY, 1000)
    for state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        bumped = rules.init_producer_id(txn(state, 3), "tx", timeout_ms=1000, now_ms=7, new_producer_id=-1)
        assert (bumped.producer_id, bumped.producer_epoch, bumped.last_producer_epoch, bumped.state) == (
            5,
            4,
            -1,  # a new instance: nobody may pass for a retry of this bump
            S.EMPTY,
        )
    rotated = rules.init_producer_id(txn(S.EMPTY, EXHAUSTED_EPOCH), "tx", timeout_ms=1, now_ms=7, new_producer_id=9)
    assert (rotated.producer_id, rotated.previous_producer_id, rotated.producer_epoch) == (9, 5, 0)
    assert rules.needs_new_producer_id(None) and rules.needs_new_producer_id(txn(S.EMPTY, EXHAUSTED_EPOCH))
    assert not rules.needs_new_producer_id(txn(S.EMPTY, 3))
    fenced = rules.init_producer_id(txn(S.ONGOING, 3, TP, 1), "tx", timeout_ms=1, now_ms=7, new_producer_id=-1)
    assert (fenced.state, fenced.producer_epoch, fenced.last_producer_epoch, fenced.partitions) == (
        S.PREPARE_ABORT,
        4,
        -1,
        TP,
    )
    for state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE):
        assert (
            code(lambda: rules.init_producer_id(txn(state), "tx", timeout_ms=1, now_ms=7, new_producer_id=-1))
            == ErrorCode.CONCURRENT_TRANSACTIONS
        )
    # KIP-360: a producer presenting an id and epoch that are not the current ones is fenced
    assert (
        code(
            lambda: rules.init_producer_id(
                txn(S.EMPTY, 3), "tx", timeout_ms=1, now_ms=7, new_producer_id=-1, expected=(5, 2)
            )
        )
        == ErrorCode.PRODUCER_FENCED
    )
    ok = rules.init_producer_id(txn(S.EMPTY, 3), "tx", timeout_ms=1, now_ms=7, new_producer_id=-1, expected=(5, 3))
    assert ok.producer_epoch == 4
    # as Kafka's KafkaApis: a producer id without an epoch (or the reverse) is malformed
    for half in ((5, -1), (-1, 3)):
        assert (
            code(
                lambda: rules.init_producer_id(
                    txn(S.EMPTY, 3), "tx", timeout_ms=1, now_ms=7, new_producer_id=-1, expected=half
                )
            )
            == ErrorCode.INVALID_REQUEST
        )
    none = rules.init_producer_id(txn(S.EMPTY, 3), "tx", timeout_ms=1, now_ms=7, new_producer_id=-1, expected=(-1, -1))
    assert (none.producer_epoch, none.last_producer_epoch) == (4, -1)


def test_add_partitions_and_end_txn() -> None:
    assert code(lambda: rules.add_partitions(None, "tx", 5, 0, TP, 1)) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert code(lambda: rules.add_partitions(txn(), "tx", 6, 0, TP, 1)) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert code(lambda: rules.add_partitions(txn(epoch=2), "tx", 5, 1, TP, 1)) == ErrorCode.PRODUCER_FENCED
    assert (
        code(lambda: rules.add_partitions(txn(S.PREPARE_COMMIT), "tx", 5, 0, TP, 1))
        == ErrorCode.CONCURRENT_TRANSACTIONS
    )
    ongoing = rules.add_partitions(txn(S.COMPLETE_COMMIT), "tx", 5, 0, frozenset({("t", 0)}), 100)
    assert ongoing is not None and (ongoing.state, ongoing.txn_start_ms) == (S.ONGOING, 100)
    assert rules.add_partitions(ongoing, "tx", 5, 0, frozenset({("t", 0)}), 200) is None  # nothing new
    more = rules.add_partitions(ongoing, "tx", 5, 0, TP, 200)
    assert more is not None and (more.partitions, more.txn_start_ms) == (TP, 100)
    prepared = rules.end_txn(more, "tx", 5, 0, True, 300)
    assert prepared is not None and prepared.state is S.PREPARE_COMMIT
    assert code(lambda: rules.end_txn(prepared, "tx", 5, 0, True, 1)) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert code(lambda: rules.end_txn(prepared, "tx", 5, 0, False, 1)) == ErrorCode.INVALID_TXN_STATE
    done = rules.complete(prepared, 400)
    assert (done.state, done.partitions, done.txn_start_ms) == (S.COMPLETE_COMMIT, frozenset(), -1)
    assert rules.end_txn(done, "tx", 5, 0, True, 1) is None  # a retried commit
    assert code(lambda: rules.end_txn(done, "tx", 5, 0, False, 1)) == ErrorCode.INVALID_TXN_STATE
    assert code(lambda: rules.end_txn(txn(), "tx", 5, 0, True, 1)) == ErrorCode.INVALID_TXN_STATE
    assert code(lambda: rules.end_txn(more, "tx", 5, 1, True, 1)) == ErrorCode.PRODUCER_FENCED
    aborting = rules.end_txn(more, "tx", 5, 0, False, 300)
    assert aborting is not None and rules.complete(aborting, 1).state is S.COMPLETE_ABORT


def test_timeouts() -> None:
    rules.check_timeout(900_000, 900_000)
    for bad in (0, -1, 900_001):
        assert code(lambda: rules.check_timeout(bad, 900_000)) == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    ongoing = txn(S.ONGOING, 3, TP, start=1000)
    assert not ongoing.expired(60_999) and ongoing.expired(61_000)
    assert not txn(S.EMPTY).expired(10**9) and not txn(S.PREPARE_COMMIT, start=0).expired(10**9)
    aborted = rules.abort_timed_out(ongoing, 61_000)
    assert (aborted.state, aborted.producer_epoch, aborted.last_producer_epoch) == (S.PREPARE_ABORT, 4, -1)


def test_a_retried_epoch_bump_gets_the_bumped_epoch_not_fenced() -> None:
    """KIP-360 as Kafka: the answer to a bump was lost and the producer asks again with the
    epoch it had (or, after the id rotated, the old id at the exhausted epoch)."""
    bumped = rules.init_producer_id(txn(S.EMPTY, 3), "tx", timeout_ms=1, now_ms=7, new_producer_id=-1, expected=(5, 3))
    assert (bumped.producer_id, bumped.producer_epoch, bumped.last_producer_epoch) == (5, 4, 3)
    again = rules.init_producer_id(bumped, "tx", timeout_ms=1, now_ms=8, new_producer_id=-1, expected=(5, 3))
    assert again is bumped
    assert (
        code(lambda: rules.init_producer_id(bumped, "tx", timeout_ms=1, now_ms=8, new_producer_id=-1, expected=(5, 2)))
        == ErrorCode.PRODUCER_FENCED
    )
    rotated = rules.init_producer_id(
        txn(S.EMPTY, EXHAUSTED_EPOCH), "tx", timeout_ms=1, now_ms=7, new_producer_id=9, expected=(5, EXHAUSTED_EPOCH)
    )
    assert (rotated.producer_id, rotated.producer_epoch) == (9, 0)
    retried = rules.init_producer_id(
        rotated, "tx", timeout_ms=1, now_ms=8, new_producer_id=-1, expected=(5, EXHAUSTED_EPOCH)
    )
    assert retried is rotated


def test_an_instance_fenced_by_another_cannot_pass_its_old_epoch_off_as_a_retry() -> None:
    """Review 3 F1: a new instance's InitProducerId (no expected epoch) recorded the old
    epoch as the last one, so the old instance (a zombie) asking for a KIP-360 bump with its
    own id and epoch was taken for a retry and handed the new instance's id and epoch. Kafka
    records -1 there, on fences and on timeout aborts; the zombie is PRODUCER_FENCED."""

    def zombie_bump(current: TransactionMetadata, presented: tuple[int, int]) -> int:
        return code(
            lambda: rules.init_producer_id(
                current, "tx", timeout_ms=1, now_ms=9, new_producer_id=-1, expected=presented
            )
        )

    for state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):  # the zombie is idle; a new instance starts
        successor = rules.init_producer_id(txn(state, 3), "tx", timeout_ms=1, now_ms=8, new_producer_id=-1)
        assert (successor.producer_id, successor.producer_epoch) == (5, 4)
        assert zombie_bump(successor, (5, 3)) == ErrorCode.PRODUCER_FENCED
    # the zombie's transaction was open: the new instance fences it, the abort completes
    fence = rules.init_producer_id(txn(S.ONGOING, 3, TP, 1), "tx", timeout_ms=1, now_ms=8, new_producer_id=-1)
    aborted = rules.complete(fence, 9)
    assert zombie_bump(aborted, (5, 3)) == ErrorCode.PRODUCER_FENCED
    successor = rules.init_producer_id(aborted, "tx", timeout_ms=1, now_ms=10, new_producer_id=-1)
    assert zombie_bump(successor, (5, 3)) == ErrorCode.PRODUCER_FENCED
    assert zombie_bump(successor, (5, 4)) == ErrorCode.PRODUCER_FENCED
    # its transaction timed out: the coordinator's abort fences it just as well
    timed_out = rules.complete(rules.abort_timed_out(txn(S.ONGOING, 3, TP, 1), 61_001), 61_002)
    assert zombie_bump(timed_out, (5, 3)) == ErrorCode.PRODUCER_FENCED
    # a new instance at the exhausted epoch gets a new producer id; the zombie is fenced there too
    rotated = rules.init_producer_id(txn(S.EMPTY, EXHAUSTED_EPOCH), "tx", timeout_ms=1, now_ms=8, new_producer_id=9)
    assert (rotated.producer_id, rotated.previous_producer_id, rotated.last_producer_epoch) == (9, 5, -1)
    assert zombie_bump(rotated, (5, EXHAUSTED_EPOCH)) == ErrorCode.PRODUCER_FENCED


def test_idle_expiry_only_without_an_open_or_ending_transaction() -> None:
    for state in TxnState:
        old = txn(state)  # last_update_ms 0
        assert rules.idle_expired(old, 1000, 1000) is (state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT))
        assert not rules.idle_expired(old, 999, 1000)


def test_record_codec_round_trip() -> None:
    value = txn(S.ONGOING, 7, frozenset({("a", 2), ("a", 0), ("b", 1)}), start=11)
    key = records.encode_key("tx")
    batch = build_batch([(key, records.encode_value(value)), (key, None)], 0)
    [(k1, v1), (k2, v2)] = list(read_batch(batch))
    assert records.decode_key(k1) == "tx" and v1 is not None and v2 is None
    assert records.decode_value("tx", v1) == value


@pytest.mark.parametrize(
    "text, java_hash",
    # Java's documented values ("hello", "Hello World", "abc"), and the brief's "my-txn"
    [("hello", 99162322), ("Hello World", -862545276), ("abc", 96354), ("", 0), ("my-txn", -1061187895)],
)
def test_partition_is_kafkas(text: str, java_hash: int) -> None:
    from broker.groups.offsets_records import java_string_hash

    assert java_string_hash(text) == java_hash
    assert records.partition_for(text, 50) == (java_hash & 0x7FFFFFFF) % 50


def test_group_shard_applies_transactional_offsets_at_the_commit_marker() -> None:
    from typing import Any, cast

    from broker.groups import offsets_records as o
    from broker.groups.offsets import OffsetValue
    from broker.groups.shard import GroupShard

    shard = GroupShard(0, cast(Any, None))  # replay needs no context

    def record(group: str, offset: int) -> tuple[bytes, bytes]:
        return o.offset_key(group, "t", 0), o.offset_value(OffsetValue(offset, -1, "", 0))

    shard.replay_transactional(5, 6, 7, [record("g", 10)])
    shard.replay_transactional(6, 7, 8, [record("h", 20)])
    assert shard.compaction_floor() == 5 and shard.has_pending_txn_offset("g", "t", 0)
    assert shard.offsets.latest.get("g", "t", 0) is None
    shard.replay_marker(8, 7, True)  # producer 7 commits
    shard.replay_marker(9, 8, False)  # producer 8 aborts
    assert shard.compaction_floor() is None and not shard.txn_offsets
    value = shard.offsets.latest.get("g", "t", 0)
    assert value is not None and value.offset == 10 and shard.offsets.latest.get("h", "t", 0) is None
    assert shard.offsets.committed.get("g", "t", 0) is None  # exposed once the marker is replicated
    shard.on_replicated(8)
    assert shard.offsets.committed.get("g", "t", 0) == value
    shard.replay_marker(10, 99, True)  # a marker of a producer without offsets here changes nothing


# -- the coordinator over a real broker core (found by the `transactions` simulation) ----------


async def _core(data_dir, clock):  # type: ignore[no-untyped-def]
    """One broker's core leading a 1-partition __transaction_state, a topic t, and producer
    `tx` in an ongoing transaction on t-0."""
    from tests.unit.test_group_coordinator import start_core

    broker = await start_core(
        data_dir,
        clock,
        **{
            "transaction.state.log.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "offsets.commit.timeout.ms": "50",
        },
    )
    await broker.transactions.start()
    await broker.catalog.create(broker.catalog.prepare("t", 1, {}), broker.assign_replicas(range(1), 1))
    await broker.transactions.ensure_topic()
    await broker.controller.step()
    for _ in range(200):
        try:
            pid, epoch = await broker.transactions.init_producer_id("tx", 60_000, None)
            break
        except ApiError as exc:
            assert exc.code in (
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                ErrorCode.NOT_COORDINATOR,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            )
            await asyncio.sleep(0.01)
    await broker.transactions.add_partitions("tx", pid, epoch, frozenset({("t", 0)}))
    return broker, pid, epoch


async def _stop(broker) -> None:  # type: ignore[no-untyped-def]
    from tests.unit.test_group_coordinator import stop_core

    await broker.transactions.stop()
    await stop_core(broker)


def _state_log_lags(broker) -> None:  # type: ignore[no-untyped-def]
    """__transaction_state-0 gets a follower (1) in its ISR that never fetched: writes wait."""
    from broker.metadata.records import PartitionStateRecord

    partition = broker.replica_manager.get(records.TRANSACTION_TOPIC, 0)
    state = PartitionStateRecord(1, [0, 1], 0, partition.leader_epoch + 1, [0, 1])
    partition.make_leader(0, state, partition.state_revision + 1)
    broker.transactions._runtime.on_role_changed(partition)


def _state_log_catches_up(broker) -> None:  # type: ignore[no-untyped-def]
    partition = broker.replica_manager.get(records.TRANSACTION_TOPIC, 0)
    end = partition.log.log_end_offset
    partition.leader_state.on_follower_fetch(1, end, end, 0)
    partition.advance_high_watermark()


async def _until(condition, seconds: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    for _ in range(int(seconds / 0.01)):
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


def test_an_end_txn_whose_prepare_was_not_replicated_in_time_is_completed_once_it_is(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`transactions` sim seed 3: EndTxn's PrepareCommit was appended but not replicated
    within the write timeout (a follower had just died); the client was told
    COORDINATOR_NOT_AVAILABLE and nobody ever wrote the markers: the transactional id stayed
    PrepareCommit (every retry CONCURRENT_TRANSACTIONS) until the coordinator moved."""
    from broker.clock import ManualClock

    async def scenario() -> None:
        broker, pid, epoch = await _core(tmp_path, ManualClock(1_800_000_000_000))
        _state_log_lags(broker)
        with pytest.raises(ApiError) as raised:
            await broker.transactions.end_txn("tx", pid, epoch, True)
        assert raised.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert broker.transactions.describe("tx").state is S.PREPARE_COMMIT
        for _ in range(50):  # the follower catches up now and then
            _state_log_catches_up(broker)
            if await _until(lambda: broker.transactions.describe("tx").state is S.COMPLETE_COMMIT, 0.1):
                break
        assert broker.transactions.describe("tx").state is S.COMPLETE_COMMIT
        await _stop(broker)

    asyncio.run(scenario())


def test_a_completion_that_could_not_be_appended_is_retried(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`transactions` sim seed 1: the CompleteCommit append failed once (a disk error); the
    failure was logged and the id stayed PrepareCommit for as long as this broker led it."""
    from broker.clock import ManualClock
    from broker.transactions.shard import TransactionShard

    async def scenario() -> None:
        broker, pid, epoch = await _core(tmp_path, ManualClock(1_800_000_000_000))
        real = TransactionShard.write
        failures = []

        def write(self, txn):  # type: ignore[no-untyped-def]
            if txn.state is S.COMPLETE_COMMIT and not failures:
                failures.append(txn)
                raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR, "the log could not be written (simulated)")
            return real(self, txn)

        monkeypatch.setattr(TransactionShard, "write", write)
        await broker.transactions.end_txn("tx", pid, epoch, True)
        assert await _until(lambda: broker.transactions.describe("tx").state is S.COMPLETE_COMMIT)
        assert failures
        await _stop(broker)

    asyncio.run(scenario())


def test_a_retried_add_partitions_is_answered_only_once_its_state_is_replicated(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`transactions` sim seed 5: AddPartitionsToTxn's Ongoing state was appended but not
    replicated in time; the client's retry found the partitions in the (unreplicated) state
    and was answered NONE at once. The coordinator then moved, its successor loaded the
    previous transaction's PrepareCommit and wrote its COMMIT markers again, which committed
    the new transaction's records on that partition, although its producer aborted it."""
    from broker.clock import ManualClock

    async def scenario() -> None:
        broker, pid, epoch = await _core(tmp_path, ManualClock(1_800_000_000_000))
        await broker.transactions.end_txn("tx", pid, epoch, False)
        assert await _until(lambda: broker.transactions.describe("tx").state is S.COMPLETE_ABORT)
        _state_log_lags(broker)
        for attempt in range(2):  # the first attempt times out; its retry must too
            with pytest.raises(ApiError) as raised:
                await broker.transactions.add_partitions("tx", pid, epoch, frozenset({("t", 0)}))
            assert raised.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE, attempt
        _state_log_catches_up(broker)
        await broker.transactions.add_partitions("tx", pid, epoch, frozenset({("t", 0)}))
        await _stop(broker)

    asyncio.run(scenario())


def test_a_state_change_the_log_refuses_is_answered_with_a_coordinator_error(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`transactions` sim seeds 27 and 74: a disk error appending to __transaction_state
    reached the client as KAFKA_STORAGE_ERROR, which a transactional client does not retry
    (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn); Kafka answers
    NOT_COORDINATOR (and COORDINATOR_NOT_AVAILABLE for a write the ISR did not take)."""
    from broker.clock import ManualClock
    from broker.transactions.shard import TransactionShard

    async def scenario() -> None:
        broker, pid, epoch = await _core(tmp_path, ManualClock(1_800_000_000_000))

        def write(self, txn):  # type: ignore[no-untyped-def]
            raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR, "the log could not be written (simulated)")

        monkeypatch.setattr(TransactionShard, "write", write)
        with pytest.raises(ApiError) as raised:
            await broker.transactions.end_txn("tx", pid, epoch, True)
        assert raised.value.code == ErrorCode.NOT_COORDINATOR
        with pytest.raises(ApiError) as raised:
            await broker.transactions.init_producer_id("tx", 60_000, None)
        assert raised.value.code == ErrorCode.NOT_COORDINATOR
        assert broker.transactions.describe("tx").state is S.ONGOING
        await _stop(broker)

    asyncio.run(scenario())


def test_a_zombie_asking_the_coordinator_for_a_bump_is_fenced(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Review 3 F1 through the coordinator: instance A ends its transaction, a new instance B
    of the same transactional id starts, then A (a zombie) asks for a KIP-360 bump with its
    own producer id and epoch. It was answered with B's producer id and epoch, and could
    then commit B's transaction; Kafka answers PRODUCER_FENCED. The same after the
    coordinator aborted A's timed-out transaction."""
    from broker.clock import ManualClock

    async def fenced(broker, presented: tuple[int, int]) -> int:  # type: ignore[no-untyped-def]
        with pytest.raises(ApiError) as raised:
            await broker.transactions.init_producer_id("tx", 60_000, presented)
        return raised.value.code

    async def scenario() -> None:
        clock = ManualClock(1_800_000_000_000)
        broker, pid, epoch = await _core(tmp_path, clock)
        await broker.transactions.end_txn("tx", pid, epoch, True)
        assert await _until(lambda: broker.transactions.describe("tx").state is S.COMPLETE_COMMIT)
        assert await broker.transactions.init_producer_id("tx", 60_000, None) == (pid, epoch + 1)  # instance B
        assert await fenced(broker, (pid, epoch)) == ErrorCode.PRODUCER_FENCED
        assert broker.transactions.describe("tx").producer_epoch == epoch + 1
        # B bumps its own epoch (a retry of that bump is answered, not fenced)...
        assert await broker.transactions.init_producer_id("tx", 60_000, (pid, epoch + 1)) == (pid, epoch + 2)
        assert await broker.transactions.init_producer_id("tx", 60_000, (pid, epoch + 1)) == (pid, epoch + 2)
        # ...and then times out: the coordinator's abort fences B in turn
        await broker.transactions.add_partitions("tx", pid, epoch + 2, frozenset({("t", 0)}))
        clock.advance(60_001)
        assert await broker.transactions.abort_timed_out() == 1
        assert await _until(lambda: broker.transactions.describe("tx").state is S.COMPLETE_ABORT)
        assert await fenced(broker, (pid, epoch + 2)) == ErrorCode.PRODUCER_FENCED
        await _stop(broker)

    asyncio.run(scenario())


def test_a_transactional_offset_commit_needs_the_offsets_partition_in_the_transaction(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """KIP-890 for TxnOffsetCommit (`transactions` sim noticed it could hang): offsets of a
    producer whose transaction does not hold the group's __consumer_offsets partition (no
    AddOffsetsToTxn, or a late commit after the ABORT marker) are refused with a retriable
    error and nothing is appended, so no transaction opens there that nobody will end."""
    from broker.clock import ManualClock

    async def scenario() -> None:
        broker, pid, epoch = await _core(tmp_path, ManualClock(1_800_000_000_000))
        topic = broker.catalog.get("t")
        offsets_partition = broker.transactions.offsets_partition("g")
        log = broker.replica_manager.get(*offsets_partition).log

        async def commit() -> list[int]:
            for _ in range(200):
                codes = await broker.groups.txn_commit_offsets(
                    "g",
                    producer_id=pid,
                    producer_epoch=epoch,
                    member_id="",
                    group_instance_id=None,
                    generation_id=-1,
                    offsets=[(topic, "t", 0, 5, -1, None)],
                )
                if codes != [ErrorCode.NOT_COORDINATOR] and codes != [ErrorCode.COORDINATOR_NOT_AVAILABLE]:
                    return codes
                await asyncio.sleep(0.01)  # the group coordinator is loading its partition
            return codes

        before = log.log_end_offset
        assert await commit() == [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
        assert log.log_end_offset == before
        await broker.transactions.add_partitions("tx", pid, epoch, frozenset({offsets_partition}))
        assert await commit() == [ErrorCode.NONE]
        await broker.transactions.end_txn("tx", pid, epoch, False)
        assert await _until(lambda: broker.transactions.describe("tx").state is S.COMPLETE_ABORT)
        assert await commit() == [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]  # late, after the ABORT marker
        await _stop(broker)

    asyncio.run(scenario())
