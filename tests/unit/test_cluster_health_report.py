"""`shoal cluster health`'s report: cluster-wide problems come first, and the text lists at
most TEXT_PARTITION_LINES partition problems (a broker down makes every partition it hosts
under-replicated; the line naming the broker must not scroll away). JSON keeps them all."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from broker.ops import cluster


def _state(partitions: int) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    described = {"controller_id": 1, "brokers": [{"broker_id": 1}, {"broker_id": 2}]}
    topics = [
        {
            "name": "orders",
            "error_code": 0,
            "partitions": [
                {"partition_index": i, "leader_id": 1, "replica_nodes": [0, 1, 2], "isr_nodes": [1, 2]}
                for i in range(partitions)
            ],
        }
    ]
    return described, topics, {}


@pytest.fixture
def cluster_of(monkeypatch: pytest.MonkeyPatch):
    def install(partitions: int) -> None:
        monkeypatch.setattr(cluster, "_cluster_state", lambda args: _state(partitions))
        monkeypatch.setattr(cluster, "_store_check", lambda args, described: [])

    return install


def test_a_down_broker_comes_first_and_partition_lines_are_capped(cluster_of) -> None:
    cluster_of(56)
    result, text = cluster.health(argparse.Namespace())
    lines = text.splitlines()
    assert lines[0] == "UNHEALTHY"
    assert lines[1] == "  - broker 0 hosts replicas but is not registered (down?)"
    assert len(lines) == 2 + cluster.TEXT_PARTITION_LINES + 1
    assert lines[-1] == "  - ... and 46 more partition problems (--format json lists them all)"
    assert len(result["problems"]) == 57 and result["under_replicated"] == 56


def test_few_partition_problems_are_all_listed(cluster_of) -> None:
    cluster_of(3)
    _, text = cluster.health(argparse.Namespace())
    assert "more partition problems" not in text and text.count("under-replicated") == 3
