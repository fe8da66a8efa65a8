"""The WAL file manager's decisions (broker/walfiles/policy.py), as pure functions."""

from __future__ import annotations

import pytest

from broker.walfiles.messages import NO_REFERENCE, ReplicaReference, WalReferencesResponse
from broker.walfiles.policy import Known, PendingDeletes, Sample, Timing, combine, judge

NOW = 1_000_000
DEADLINE = 60_000
GRACE = 10_000
P, Q = ("topic-a", 0), ("topic-b", 3)


def answer(node: int, now_ms: int, *replicas: tuple[tuple[str, int], int, bool]) -> WalReferencesResponse:
    return WalReferencesResponse(
        1, node, now_ms, DEADLINE, [ReplicaReference(t, p, oldest, 100, leader) for (t, p), oldest, leader in replicas]
    )


def test_combine_takes_the_oldest_reference_of_any_replica_and_the_earliest_clock() -> None:
    sample = combine(
        [
            answer(0, NOW, (P, 500, True), (Q, NO_REFERENCE, False)),
            answer(1, NOW - 3_000, (P, 200, False), (Q, 900, True)),  # a follower behind: older refs
        ]
    )
    assert sample.oldest == {P: 200, Q: 900}
    assert sample.commit_floor_ms == NOW - 3_000 - DEADLINE
    assert sample.referenced_bytes == 200  # leaders only
    with pytest.raises(ValueError):
        combine([])


SAMPLE = Sample({P: 700_000, Q: 800_000}, NOW - DEADLINE, 0)
TIMING = Timing(NOW, DEADLINE, GRACE)
CUTOFF = NOW - DEADLINE - GRACE


def known(committed: set | None = None, maybe: set | None = None) -> Known:  # type: ignore[type-arg]
    return Known(frozenset(committed or ()), frozenset(maybe or ()))


@pytest.mark.parametrize(
    ("created", "partitions", "deletable", "needs_index", "ask"),
    [
        (CUTOFF, None, False, False, ()),  # young: a commit may still succeed
        (CUTOFF - 1, known({P}), False, False, ()),  # P references objects this old, for good
        (699_999, None, True, False, ()),  # older than every reference: no index needed
        (750_000, None, False, True, ()),  # between: its partitions are needed
        (750_000, known({Q}), True, False, ()),  # Q's references are all younger
        (750_000, known({P, Q}), False, False, ()),  # P has it for good
        (750_000, known(maybe={P, Q}), False, False, (P,)),  # P may have it: ask P only
        (750_000, known({Q}, {P}), False, False, (P,)),
        (750_000, known(maybe={("deleted-topic", 0)}), True, False, ()),  # nobody has it
        (750_000, known(), True, False, ()),  # every commit refused
    ],
)
def test_judge(created, partitions, deletable, needs_index, ask) -> None:  # type: ignore[no-untyped-def]
    verdict = judge(created, partitions, SAMPLE, TIMING)
    assert (verdict.deletable, verdict.needs_index, verdict.ask) == (deletable, needs_index, ask), verdict.reason


def test_a_broker_clock_behind_the_managers_moves_the_cutoff_back() -> None:
    late = Sample({}, NOW - 5_000 - DEADLINE, 0)
    assert not judge(NOW - DEADLINE - GRACE - 1_000, known(), late, TIMING).deletable
    assert judge(NOW - DEADLINE - GRACE - 5_001, known(), late, TIMING).deletable


def test_pending_deletes_wait_out_the_grace_and_forget_what_is_no_longer_found() -> None:
    pending = PendingDeletes(max_entries=3)
    pending.update(["k1", "k2", "k3", "k4"], now_ms=0)
    assert len(pending) == 3  # bounded: k4 is found again by a later cycle
    assert pending.ready(GRACE, GRACE - 1, limit=10) == []
    pending.update(["k2", "k3", "k4"], now_ms=5_000)  # k1 no longer unreferenced (or gone): forgotten
    assert sorted(pending.since) == ["k2", "k3", "k4"] and pending.since["k4"] == 5_000
    assert pending.ready(GRACE, GRACE, limit=10) == ["k2", "k3"]
    assert pending.ready(GRACE, GRACE, limit=1) == ["k2"]
    assert pending.waiting_ms("k4", GRACE, GRACE) == 5_000
    pending.forget(["k2"])
    assert pending.ready(GRACE, 20_000, limit=10) == ["k3", "k4"]
