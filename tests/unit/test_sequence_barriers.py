"""producers/barriers.py: which batches a failed batch holds back, and what lifts it."""

from __future__ import annotations

from broker.producers.barriers import MAX_AGE_S, MAX_ANSWER_WAIT_S, SequenceBarriers
from broker.protocol.batch import parse_header
from broker.protocol.errors import ErrorCode
from tests.unit.test_partition import batch

P = ("topic", 0)


def fixed_now() -> float:
    return 100.0


def header(seq: int, producer_id: int = 7, epoch: int = 0, count: int = 1):  # type: ignore[no-untyped-def]
    return parse_header(batch(seq, count=count, producer_id=producer_id, epoch=epoch))


def test_later_sequences_of_the_producer_wait_for_the_retry_of_the_failed_one() -> None:
    barriers = SequenceBarriers(10, fixed_now)
    barriers.failed(P, header(5), ErrorCode.KAFKA_STORAGE_ERROR)
    held = barriers.check(P, header(6))
    assert held is not None and held.error == ErrorCode.KAFKA_STORAGE_ERROR and held.first_sequence == 5
    assert barriers.check(P, header(9)) is not None
    assert barriers.check(P, header(5)) is None, "the retry goes through"
    assert barriers.check(P, header(6)) is None and len(barriers) == 0


def test_other_producers_partitions_and_plain_batches_are_not_held_back() -> None:
    barriers = SequenceBarriers(10, fixed_now)
    barriers.failed(P, header(5), ErrorCode.KAFKA_STORAGE_ERROR)
    assert barriers.check(P, header(6, producer_id=8)) is None
    assert barriers.check(("topic", 1), header(6)) is None
    assert barriers.check(P, parse_header(batch(-1, producer_id=-1))) is None  # no producer id
    assert len(barriers) == 1


def test_a_bumped_epoch_lifts_the_barrier_and_a_lower_one_does_not() -> None:
    barriers = SequenceBarriers(10, fixed_now)
    barriers.failed(P, header(5, epoch=3), ErrorCode.NOT_ENOUGH_REPLICAS)
    assert barriers.check(P, header(0, epoch=2)) is None and len(barriers) == 1  # a zombie: the leader fences it
    assert barriers.check(P, header(0, epoch=4)) is None and len(barriers) == 0


def test_the_earliest_failure_holds_and_sequences_wrap() -> None:
    barriers = SequenceBarriers(10, fixed_now)
    barriers.failed(P, header(5), ErrorCode.KAFKA_STORAGE_ERROR)
    barriers.failed(P, header(7), ErrorCode.REQUEST_TIMED_OUT)  # a later one failing too changes nothing
    held = barriers.check(P, header(7))
    assert held is not None and held.first_sequence == 5
    barriers.failed(P, header((1 << 31) - 1), ErrorCode.KAFKA_STORAGE_ERROR)  # a new barrier, lower after the wrap
    barriers = SequenceBarriers(10, fixed_now)
    barriers.failed(P, header((1 << 31) - 1), ErrorCode.KAFKA_STORAGE_ERROR)
    assert barriers.check(P, header(0)) is not None, "0 comes after 2**31 - 1"


def test_at_most_max_entries_oldest_dropped() -> None:
    barriers = SequenceBarriers(2, fixed_now)
    for producer_id in (1, 2, 3):
        barriers.failed(P, header(5, producer_id=producer_id), ErrorCode.KAFKA_STORAGE_ERROR)
    assert len(barriers) == 2
    assert barriers.check(P, header(6, producer_id=1)) is None
    assert barriers.check(P, header(6, producer_id=3)) is not None


def test_a_barrier_lapses_so_a_producer_that_retried_elsewhere_is_not_refused_for_ever() -> None:
    """Its leader or representative moved, it retried and went on there, and came back with
    later sequences: the old barrier must not hold it back."""
    now = [100.0]
    barriers = SequenceBarriers(10, lambda: now[0])
    barriers.failed(P, header(5), ErrorCode.KAFKA_STORAGE_ERROR)
    now[0] += MAX_AGE_S / 2
    barriers.failed(P, header(5), ErrorCode.KAFKA_STORAGE_ERROR)  # the retry failed too: renewed
    now[0] += MAX_AGE_S / 2 + 1
    assert barriers.check(P, header(40)) is not None
    now[0] += MAX_AGE_S
    assert barriers.check(P, header(40)) is None and len(barriers) == 0


def test_a_barrier_lapses_only_after_its_answer_can_have_reached_the_client() -> None:
    """Cluster seed 300066 (at e4005e5): the answer of the failure waited behind earlier
    requests on the connection for most of the request's timeout; the 10 s count from there."""
    now = [100.0]
    barriers = SequenceBarriers(10, lambda: now[0])
    barriers.failed(P, header(5), ErrorCode.KAFKA_STORAGE_ERROR, answer_within_s=30.0)
    now[0] += 30.0 + MAX_AGE_S - 1
    assert barriers.check(P, header(7)) is not None
    now[0] += 2
    held = barriers.check(P, header(8))
    assert held is not None and held.first_sequence == 7, "7 was refused meanwhile: the barrier moves there"
    now[0] += MAX_AGE_S + 1  # the moved barrier also waits for its refusals' answers
    assert barriers.check(P, header(9)) is not None
    assert barriers.check(P, header(7)) is None and len(barriers) == 0, "the retry of the first refused one lifts it"
    # a timeout beyond any client's message timeout is capped
    barriers.failed(P, header(20), ErrorCode.KAFKA_STORAGE_ERROR, answer_within_s=1e9)
    now[0] += MAX_ANSWER_WAIT_S + MAX_AGE_S + 1
    assert barriers.check(P, header(21)) is None


def test_a_lapsing_barrier_leaves_no_gap_behind_the_batches_it_refused() -> None:
    """Cluster seed 30353: a barrier refused a producer's batches 10-12 just before it lapsed
    and let 13 through just after: 13 reached the leader with 10-12 missing
    (OUT_OF_ORDER_SEQUENCE_NUMBER; librdkafka bumped its epoch and stored its other
    partitions' possibly-persisted messages a second time). The batches a barrier refused
    failed too: once it lapses, they hold back what follows the first of them."""
    now = [100.0]
    barriers = SequenceBarriers(10, lambda: now[0])
    barriers.failed(P, header(5), ErrorCode.REQUEST_TIMED_OUT)
    assert barriers.check(P, header(10)) is not None
    assert barriers.check(P, header(11)) is not None
    now[0] += MAX_AGE_S + 1
    held = barriers.check(P, header(13))
    assert held is not None and held.first_sequence == 10, "10 and 11 were refused: 13 would land behind a gap"
    assert barriers.check(P, header(10)) is None, "the retry of the first refused one goes through"
    assert barriers.check(P, header(11)) is None and len(barriers) == 0
    # a later batch that failed on its own (it was sent before the barrier) counts the same
    barriers.failed(P, header(20), ErrorCode.REQUEST_TIMED_OUT)
    barriers.failed(P, header(22), ErrorCode.REQUEST_TIMED_OUT)
    now[0] += MAX_AGE_S + 1
    held = barriers.check(P, header(23))
    assert held is not None and held.first_sequence == 22


def test_a_later_batch_of_the_producer_acknowledged_lifts_its_barrier() -> None:
    """Cluster seed 30353: batch 5's commit was applied but its answer lost (REQUEST_TIMED_OUT),
    and batch 9 of the same producer was acknowledged. librdkafka takes 5-8 as delivered with 9
    and never sends them again, so the barrier at 5 refused the producer's next batches until
    it lapsed (10 s). A later batch acknowledged means the earlier ones are in the log before
    it (the leader checks sequences): nothing is held back any more."""
    barriers = SequenceBarriers(10, fixed_now)
    barriers.failed(P, header(5), ErrorCode.REQUEST_TIMED_OUT)
    barriers.acknowledged(P, header(4))  # an earlier one: lifts nothing
    barriers.acknowledged(P, header(9, producer_id=8))  # another producer's
    assert len(barriers) == 1
    barriers.acknowledged(P, header(9))
    assert barriers.check(P, header(10)) is None and len(barriers) == 0
    # what the barrier refused after the acknowledged batch is still missing
    barriers.failed(P, header(20), ErrorCode.REQUEST_TIMED_OUT)
    assert barriers.check(P, header(25)) is not None
    barriers.acknowledged(P, header(22))
    held = barriers.check(P, header(26))
    assert held is not None and held.first_sequence == 25
    assert barriers.check(P, header(25)) is None


def test_a_batch_that_may_be_in_the_log_holds_back_only_what_is_sent_another_way() -> None:
    """Its commit's answer was lost, or its acks=all wait failed: batches sent its way (same
    leader, leader epoch and commit stream) follow it in order and are safe; only those sent
    another way could land ahead of it. A failure that is known not to have reached the log
    holds back every way."""
    barriers = SequenceBarriers(10, fixed_now)
    barriers.failed(P, header(5), ErrorCode.REQUEST_TIMED_OUT, route="leader 1")
    assert barriers.check(P, header(10), "leader 1") is None and len(barriers) == 1
    assert barriers.check(P, header(10), "leader 2") is not None
    barriers.failed(P, header(7), ErrorCode.KAFKA_STORAGE_ERROR)  # a later one known not to be in the log
    assert barriers.check(P, header(10), "leader 1") is not None


def test_an_earlier_batch_still_in_flight_passes_and_leaves_the_barrier() -> None:
    """Cluster seed 101310 (at 4bb8b62): the representative refused sequence 90 (its view
    had just moved the partition away), then shipped the object holding 89, which the client
    had sent before 90. 89 lifted the barrier as if it were the retry, 91 and 92 reached the
    leader without 90: OUT_OF_ORDER_SEQUENCE_NUMBER, an epoch bump, and 88-89 (answered
    NOT_ENOUGH_REPLICAS_AFTER_APPEND, in the log) stored again under the new epoch."""
    barriers = SequenceBarriers(10, fixed_now)
    barriers.failed(P, header(90), ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert barriers.check(P, header(89)) is None, "sent before the failed one: goes on"
    held = barriers.check(P, header(91))
    assert held is not None and held.first_sequence == 90, "89 is no retry of 90: 91 still waits"
    assert barriers.check(P, header(88, count=3)) is None, "a retry holding the failed sequence lifts it"
    assert barriers.check(P, header(91)) is None and len(barriers) == 0
