"""AZ routing: client AZ from client.id tokens and fetch racks; representative choice."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.routing.client_az import ClientRacks, az_from_client_id
from broker.routing.representatives import representative


@pytest.mark.parametrize(
    "client_id, az",
    [
        ("shoal_az=use1-az1", "use1-az1"),
        ("orders-app,shoal_az=az2", "az2"),
        ("producer-1 diskless_az=eu-west-1b", "eu-west-1b"),
        ("x;diskless_az=a;y", "a"),
        ("myshoal_az=nope", None),
        ("shoal_az=", None),
        ("plain-client", None),
        (None, None),
    ],
)
def test_az_from_client_id(client_id: str | None, az: str | None) -> None:
    assert az_from_client_id(client_id) == az


def test_client_az_order_token_then_rack_then_broker() -> None:
    racks = ClientRacks(limit=2)
    assert racks.client_az("app", "10.0.0.1:5000", "az9") == ("az9", False)
    racks.remember("10.0.0.1:5000", "az3")
    assert racks.client_az("app", "10.0.0.1:5000", "az9") == ("az3", True)
    assert racks.client_az("app,shoal_az=az1", "10.0.0.1:5000", "az9") == ("az1", True)
    racks.remember("b:1", "x")
    racks.remember("c:1", "y")  # the oldest is dropped beyond the limit
    assert racks.client_az("app", "10.0.0.1:5000", "az9") == ("az9", False)
    racks.forget("c:1")
    assert racks.client_az("app", "c:1", None) == (None, False)


def partitions(n: int) -> list[tuple[str, int]]:
    topics = [str(uuid.UUID(int=i + 1)) for i in range(max(1, n // 50))]
    return [(topics[i % len(topics)], i) for i in range(n)]


@pytest.mark.parametrize("brokers", [2, 3, 5])
def test_balance_within_20_percent(brokers: int) -> None:
    counts = Counter(representative(t, p, range(brokers)) for t, p in partitions(3000))
    share = 3000 / brokers
    assert set(counts) == set(range(brokers))
    assert all(abs(c - share) <= 0.2 * share for c in counts.values()), counts


def test_join_and_leave_move_only_what_they_must() -> None:
    before = {tp: representative(*tp, [1, 2, 3]) for tp in partitions(2000)}
    joined = {tp: representative(*tp, [1, 2, 3, 4]) for tp in partitions(2000)}
    moved = [tp for tp in before if before[tp] != joined[tp]]
    assert all(joined[tp] == 4 for tp in moved), "a join only moves partitions to the new broker"
    assert abs(len(moved) - 500) <= 100, "about a quarter moves"
    left = {tp: representative(*tp, [1, 3]) for tp in partitions(2000)}
    assert all(left[tp] == before[tp] for tp in before if before[tp] != 2), "a leave only moves its own"


@given(
    topic=st.uuids().map(str),
    partition=st.integers(0, 10_000),
    nodes=st.sets(st.integers(0, 1000), min_size=1, max_size=8),
)
def test_deterministic_and_order_independent(topic: str, partition: int, nodes: set[int]) -> None:
    chosen = representative(topic, partition, sorted(nodes))
    assert chosen in nodes
    assert representative(topic, partition, sorted(nodes, reverse=True)) == chosen
    assert representative(topic, partition, []) is None
