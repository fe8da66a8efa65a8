"""The transaction coordinator's pure parts: the state machine (every allowed move and the
errors of refused ones), the __transaction_state record codec, the transactional id ->
partition mapping (Java's String.hashCode), timeout checks and expiry."""

from __future__ import annotations

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
            3,
            S.EMPTY,
        )
    rotated = rules.init_producer_id(txn(S.EMPTY, EXHAUSTED_EPOCH), "tx", timeout_ms=1, now_ms=7, new_producer_id=9)
    assert (rotated.producer_id, rotated.previous_producer_id, rotated.producer_epoch) == (9, 5, 0)
    assert rules.needs_new_producer_id(None) and rules.needs_new_producer_id(txn(S.EMPTY, EXHAUSTED_EPOCH))
    assert not rules.needs_new_producer_id(txn(S.EMPTY, 3))
    fenced = rules.init_producer_id(txn(S.ONGOING, 3, TP, 1), "tx", timeout_ms=1, now_ms=7, new_producer_id=-1)
    assert (fenced.state, fenced.producer_epoch, fenced.partitions) == (S.PREPARE_ABORT, 4, TP)
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
    assert (aborted.state, aborted.producer_epoch, aborted.last_producer_epoch) == (S.PREPARE_ABORT, 4, 3)


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
    from broker.groups.shard import GroupShard

    shard = GroupShard(0, cast(Any, None))  # replay needs no context

    def record(group: str, offset: int) -> tuple[bytes, bytes]:
        return (
            o.encode(o.OffsetKey(o.FORMAT_VERSION, group, "t", 0)),
            o.encode(o.OffsetValue(o.FORMAT_VERSION, offset, -1, None, 0)),
        )

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
