"""producers/barriers.py: which batches a failed batch holds back, and what lifts it."""

from __future__ import annotations

from broker.producers.barriers import MAX_AGE_S, SequenceBarriers
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
