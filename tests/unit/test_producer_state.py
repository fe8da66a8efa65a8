"""ProducerStateManager rules: sequences, duplicates, epochs, wrap-around, expiry."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from broker.clock import ManualClock
from broker.producers import DuplicateBatch, EndTxn, ProducerStateManager
from broker.producers.state import INT32_MAX, in_sequence
from broker.protocol.batch import CONTROL_FLAG, NO_PRODUCER_ID, NO_SEQUENCE, TRANSACTIONAL_FLAG
from broker.protocol.errors import ErrorCode

from .producer_state_support import T0, Log, hdr

# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN, written out: the tests pin Kafka's
# number, not whatever the implementation's constant says.
KAFKA_RETAINED_BATCHES = 5
OOO = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
FENCED = ErrorCode.INVALID_PRODUCER_EPOCH


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def log(clock: ManualClock) -> Log:
    return Log(ProducerStateManager(clock))


def test_in_order_sequences_accepted(log: Log) -> None:
    assert log.produce(hdr(seq=0, count=3)) == 0
    assert log.produce(hdr(seq=3, count=2)) == 3
    assert log.produce(hdr(seq=5, count=1)) == 5
    assert log.mgr.producer_count == 1
    assert log.mgr.entry(1000).last_seq == 5


def test_unknown_producer_accepts_any_sequence(log: Log) -> None:
    # KIP-360: no UNKNOWN_PRODUCER_ID, the state may have expired or been deleted
    assert log.produce(hdr(seq=42, epoch=3)) == 0
    assert log.produce(hdr(seq=43, epoch=3)) == 1


@pytest.mark.parametrize("next_seq", [2, 5, 1000, INT32_MAX])
def test_gap_is_out_of_order(log: Log, next_seq: int) -> None:
    log.produce(hdr(seq=0))
    assert log.produce(hdr(seq=next_seq)) == OOO


def test_check_does_not_mutate(log: Log) -> None:
    log.produce(hdr(seq=0))
    before = {pid: (e.producer_epoch, list(e.batches)) for pid, e in log.mgr.active_producers().items()}
    for h in [hdr(seq=1), hdr(seq=7), hdr(epoch=1, seq=0), hdr(pid=7, seq=9), hdr(seq=0)]:
        log.mgr.check(h)
    after = {pid: (e.producer_epoch, list(e.batches)) for pid, e in log.mgr.active_producers().items()}
    assert before == after


def test_each_of_last_five_batches_is_a_duplicate_with_original_offsets(log: Log) -> None:
    seq = 0
    originals = []
    for i in range(KAFKA_RETAINED_BATCHES + 1):
        count = i + 1
        h = hdr(seq=seq, count=count, ts=T0 + i)
        base = log.produce(h)
        originals.append((seq, count, base, T0 + i))
        seq += count
    end = log.next_offset
    # the newest 5 are answered with their original offsets and timestamp
    for seq0, count, base, ts in originals[1:]:
        verdict = log.produce(hdr(seq=seq0, count=count, ts=T0 + 999))
        assert verdict == DuplicateBatch(base_offset=base, last_offset=base + count - 1, timestamp_ms=ts)
    # the 6th-oldest is no longer retained
    seq0, count, _, _ = originals[0]
    assert log.produce(hdr(seq=seq0, count=count)) == OOO
    assert log.next_offset == end  # nothing appended twice


def test_partial_overlap_is_not_a_duplicate(log: Log) -> None:
    log.produce(hdr(seq=0, count=5))
    assert log.produce(hdr(seq=0, count=3)) == OOO
    assert log.produce(hdr(seq=2, count=3)) == OOO


def test_duplicate_needs_same_epoch(log: Log) -> None:
    log.produce(hdr(epoch=0, seq=0))
    log.produce(hdr(epoch=1, seq=0))
    # epoch 0 retry of (0, 0): stale epoch, not a duplicate
    assert log.produce(hdr(epoch=0, seq=0)) == FENCED
    assert log.produce(hdr(epoch=1, seq=0)) == DuplicateBatch(1, 1, T0)


def test_stale_epoch_is_invalid_producer_epoch(log: Log) -> None:
    log.produce(hdr(epoch=5, seq=0))
    assert log.produce(hdr(epoch=4, seq=1)) == FENCED
    assert log.produce(hdr(epoch=0, seq=0)) == FENCED


def test_epoch_bump_requires_sequence_zero(log: Log) -> None:
    log.produce(hdr(epoch=0, seq=0, count=10))
    assert log.produce(hdr(epoch=1, seq=10)) == OOO
    assert log.produce(hdr(epoch=1, seq=5)) == OOO
    assert log.produce(hdr(epoch=1, seq=0)) == 10
    entry = log.mgr.entry(1000)
    assert entry.producer_epoch == 1 and len(entry.batches) == 1  # old epoch's batches dropped
    assert log.produce(hdr(epoch=1, seq=1)) == 11
    assert log.produce(hdr(epoch=0, seq=10)) == FENCED


def test_sequence_wraps_at_int32_max(log: Log) -> None:
    log.produce(hdr(seq=INT32_MAX - 2, count=3))  # ends exactly at INT32_MAX
    assert log.mgr.entry(1000).last_seq == INT32_MAX
    assert log.produce(hdr(seq=1)) == OOO
    assert log.produce(hdr(seq=0, count=2)) == 3
    assert log.produce(hdr(seq=2)) == 5


def test_batch_spanning_the_wrap(log: Log) -> None:
    log.produce(hdr(seq=INT32_MAX - 3, count=2))
    h = hdr(seq=INT32_MAX - 1, count=4)  # INT32_MAX-1, INT32_MAX, 0, 1
    assert h.last_sequence == 1
    base = log.produce(h)
    assert log.produce(hdr(seq=INT32_MAX - 1, count=4)) == DuplicateBatch(base, base + 3, T0)
    assert log.produce(hdr(seq=2)) == base + 4


def test_in_sequence_helper() -> None:
    assert in_sequence(NO_SEQUENCE, 0)
    assert in_sequence(4, 5)
    assert in_sequence(INT32_MAX, 0)
    assert not in_sequence(4, 4)


def test_non_idempotent_batches_are_skipped(log: Log) -> None:
    for i in range(3):  # the same batch three times: no dedup without a producer id
        assert log.produce(hdr(pid=NO_PRODUCER_ID, epoch=-1, seq=NO_SEQUENCE, count=2)) == 2 * i
    assert log.mgr.producer_count == 0
    assert log.mgr.map_end_offset == 6  # still tracks the log end


def test_several_batches_in_one_request_checked_in_order(log: Log) -> None:
    batch = [hdr(seq=0, count=2), hdr(seq=2, count=2), hdr(seq=4, count=1), hdr(pid=7, seq=0)]
    assert [log.produce(h) for h in batch] == [0, 2, 4, 5]
    # a commit carrying a retry of the first batch next to new ones
    assert log.produce(hdr(seq=0, count=2)) == DuplicateBatch(0, 1, T0)
    assert log.produce(hdr(seq=5)) == 6


def test_empty_state_with_known_epoch_expects_zero(log: Log) -> None:
    # a control batch adopts a new epoch and clears retained batches
    log.produce(hdr(epoch=0, seq=0, count=3, attributes=TRANSACTIONAL_FLAG))
    log.produce(hdr(epoch=1, seq=NO_SEQUENCE, attributes=CONTROL_FLAG | TRANSACTIONAL_FLAG), EndTxn(False, 0))
    entry = log.mgr.entry(1000)
    assert entry.producer_epoch == 1 and not entry.batches
    assert log.produce(hdr(epoch=1, seq=3)) == OOO
    assert log.produce(hdr(epoch=1, seq=0)) == 4


def test_control_batch_checks_epoch_only(log: Log) -> None:
    log.produce(hdr(epoch=3, seq=0))
    assert log.mgr.check(hdr(epoch=2, seq=NO_SEQUENCE, attributes=CONTROL_FLAG)) == FENCED
    assert log.mgr.check(hdr(epoch=3, seq=NO_SEQUENCE, attributes=CONTROL_FLAG)) is None


def test_transactional_batches_follow_the_same_sequence_rules(log: Log) -> None:
    log.produce(hdr(seq=0, attributes=TRANSACTIONAL_FLAG))
    assert log.produce(hdr(seq=2, attributes=TRANSACTIONAL_FLAG)) == OOO
    assert log.produce(hdr(seq=0, attributes=TRANSACTIONAL_FLAG)) == DuplicateBatch(0, 0, T0)


def test_on_append_timestamp_is_stored_for_duplicates(log: Log) -> None:
    h = hdr(seq=0, ts=T0 - 5000)
    assert log.mgr.check(h) is None
    log.mgr.on_append(h, 0, timestamp_ms=T0 + 7)  # e.g. LogAppendTime
    assert log.mgr.check(hdr(seq=0)) == DuplicateBatch(0, 0, T0 + 7)


# --- expiry ----------------------------------------------------------------------------------


def test_expiry_drops_idle_producers(clock: ManualClock) -> None:
    mgr = ProducerStateManager(clock, expiration_ms=60_000)
    log = Log(mgr)
    log.produce(hdr(pid=1, seq=0, ts=clock.now_ms()))
    clock.advance(30_000)
    log.produce(hdr(pid=2, seq=0, ts=clock.now_ms()))
    clock.advance(29_999)
    assert mgr.expire() == 0
    clock.advance(1)  # pid 1 idle for exactly 60_000 ms: Kafka expires at >=
    assert mgr.expire() == 1
    assert mgr.entry(1) is None and mgr.entry(2) is not None
    assert mgr.expire(now_ms=clock.now_ms() + 30_000) == 1
    assert mgr.producer_count == 0


def test_expired_producer_accepted_with_any_sequence(clock: ManualClock) -> None:
    mgr = ProducerStateManager(clock, expiration_ms=1000)
    log = Log(mgr)
    log.produce(hdr(seq=0, count=5, ts=clock.now_ms()))
    clock.advance(1000)
    assert mgr.expire() == 1
    # a retry of the expired batch is no longer detectable: same as Kafka
    assert log.produce(hdr(seq=0, count=5, ts=clock.now_ms())) == 5
    assert log.produce(hdr(seq=17, ts=clock.now_ms())) == OOO


def test_default_expiration_is_kafkas(clock: ManualClock) -> None:
    mgr = ProducerStateManager(clock)
    Log(mgr).produce(hdr(ts=clock.now_ms()))
    clock.advance(86_400_000 - 1)
    assert mgr.expire() == 0
    clock.advance(1)
    assert mgr.expire() == 1


def test_expiration_must_be_positive(clock: ManualClock) -> None:
    with pytest.raises(ValueError):
        ProducerStateManager(clock, expiration_ms=0)


# --- properties ------------------------------------------------------------------------------

# One step of a producer: a new batch of 1-4 records, or a resend of the batch sent `back`
# batches ago. Both kinds are drawn equally often, and `back` reaches well past the retention
# window of 5 batches, so a window of 4, 6 or 10 makes the property fail.
NEW = st.tuples(st.just("new"), st.integers(1, 4))
RESEND = st.tuples(st.just("resend"), st.integers(1, 2 * KAFKA_RETAINED_BATCHES + 2))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(NEW, RESEND), min_size=1, max_size=80))
def test_retried_batch_committed_at_most_once_and_in_order(ops: list[tuple[str, int]]) -> None:
    """A producer sends batches of `count` records and resends earlier batches at random.

    Invariant 3: every sequence number is appended at most once and the appended sequences are
    exactly 0, 1, 2, ... in order. A resend of one of the last 5 batches is answered with that
    batch's original offsets; an older one is OUT_OF_ORDER_SEQUENCE_NUMBER (Kafka's rule).
    """
    log = Log(ProducerStateManager(ManualClock(T0)))
    sent: list[tuple[int, int, int]] = []  # (base_seq, count, base_offset) in send order
    next_seq = 0
    for kind, n in ops:
        if kind == "resend" and sent:
            back = min(n, len(sent))
            seq, cnt, base = sent[-back]
            verdict = log.produce(hdr(seq=seq, count=cnt))
            if back <= KAFKA_RETAINED_BATCHES:
                assert verdict == DuplicateBatch(base, base + cnt - 1, T0), (back, verdict)
            else:
                assert verdict == OOO, (back, verdict)
        else:
            count = n if kind == "new" else 1
            base = log.produce(hdr(seq=next_seq, count=count))
            assert base == log.next_offset - count, base
            sent.append((next_seq, count, base))
            next_seq += count
    appended = [s for h, _ in log.entries for s in range(h.base_sequence, h.base_sequence + h.records_count)]
    assert appended == list(range(next_seq))
