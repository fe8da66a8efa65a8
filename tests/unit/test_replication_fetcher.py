"""The follower's fetch loop over real partitions, with a leader that answers as the real
one does (long polling when it has nothing to say): what one failing partition costs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from broker.clock import ManualClock, SystemClock
from broker.config import load_config
from broker.metadata.records import PartitionStateRecord
from broker.metrics import BrokerMetrics
from broker.protocol.errors import ErrorCode
from broker.replication.fetcher import ReplicaFetcher
from broker.replication.messages import REPLICATION_VERSION, FetchedPartition, ReplicaFetchResponse
from tests.unit.test_partition import CLOCK_START, open_partition

LONG_POLL_S = 0.2


class Leader:
    """Answers at once when some partition has an error (as the real leader does), else after
    a long poll; partition 0 is always refused (e.g. UNKNOWN_LEADER_EPOCH while metadata lags)."""

    def __init__(self) -> None:
        self.calls = 0

    def get(self, node_id: int, host: str, port: int):  # type: ignore[no-untyped-def]
        return self

    address = "leader:9093"

    async def call(self, request, timeout_s: float):  # type: ignore[no-untyped-def]
        self.calls += 1
        results = [
            FetchedPartition(p.topic_id, p.partition, ErrorCode.UNKNOWN_LEADER_EPOCH if p.partition == 0 else 0, 0, 0)
            for p in request.partitions
        ]
        if not any(r.error_code for r in results):
            await asyncio.sleep(LONG_POLL_S)
        return ReplicaFetchResponse(REPLICATION_VERSION, results)


def test_one_failing_partition_does_not_make_the_others_spin(tmp_path: Path) -> None:
    """Regression (found by the simulation, cluster seed 101): a partition answered with an
    error made the leader answer at once, and since the other partitions' (empty) answers
    counted as progress the follower asked again at once: a busy loop between two brokers."""

    async def scenario() -> None:
        config = load_config(
            overrides={"node.id": "1", "replica.fetch.backoff.ms": "1000", "metrics.listen": None}, environ={}
        )
        view = SimpleNamespace(brokers={0: SimpleNamespace(rpc_host="leader", rpc_port=9093)})
        cross_az = SimpleNamespace(replicated=lambda address, nbytes: None)
        leader = Leader()
        fetcher = ReplicaFetcher(config, view, leader, BrokerMetrics(), cross_az, SystemClock())  # type: ignore[arg-type]
        clock = ManualClock(CLOCK_START)
        for index in range(2):
            partition = open_partition(tmp_path / f"t-{index}", clock)
            partition.index, partition.key, partition.topic_id = index, ("t", index), "tid"
            partition.make_follower(PartitionStateRecord(1, [0, 1], 0, 1, [0, 1]), 2)
            fetcher.on_role_changed(partition)
        await asyncio.sleep(1.0)
        await fetcher.stop()
        assert leader.calls <= 1.0 / LONG_POLL_S + 3, f"{leader.calls} fetches in one second"

    asyncio.run(scenario())
