"""Group benchmarks (part of `make bench`, not of CI): OffsetCommit throughput on one
broker, and rebalance times of a 3-member group with default timeouts.

- commits/s: one confluent-kafka consumer commits asynchronously (librdkafka pipelines
  the requests), one offset per commit, and waits for every commit callback.
- formation: three consumers subscribe at once; time until all three hold an assignment
  (includes Kafka's group.initial.rebalance.delay.ms, 3 s, extended once per wave of joiners).
- rebalance after a clean leave: one of three members closes; time until the two others
  hold the 6 partitions again (includes their discovering the rebalance by heartbeat).
"""

from __future__ import annotations

import argparse
import time
import urllib.request

from confluent_kafka import Consumer, TopicPartition

from .produce_consume import running_broker


def commit_throughput(bootstrap: str, commits: int) -> float:
    done = [0]

    def on_commit(err, partitions) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            raise SystemExit(f"commit failed: {err}")
        done[0] += 1

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-commits",
            "enable.auto.commit": False,
            "on_commit": on_commit,
        }
    )
    consumer.assign([TopicPartition("groups-bench", 0, 0)])
    consumer.commit(offsets=[TopicPartition("groups-bench", 0, 0)], asynchronous=False)
    done[0] = 0
    started = time.perf_counter()
    for i in range(commits):
        consumer.commit(offsets=[TopicPartition("groups-bench", i % 6, i)], asynchronous=True)
        if i % 100 == 0:
            consumer.poll(0)
    deadline = time.time() + 120
    while done[0] < commits and time.time() < deadline:
        consumer.poll(0.01)
    elapsed = time.perf_counter() - started
    consumer.close()
    return done[0] / elapsed


def _member(bootstrap: str, group: str, assigned: dict[int, float], index: int) -> Consumer:
    def on_assign(consumer, partitions) -> None:  # type: ignore[no-untyped-def]
        assigned[index] = time.perf_counter() if partitions else 0.0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.subscribe(["groups-bench"], on_assign=on_assign)
    return consumer


def rebalance_metric(metrics_url: str) -> tuple[float, float]:
    """(sum, count) of shoal_group_rebalance_seconds: last JoinGroup -> join phase answered."""
    values = {}
    for line in urllib.request.urlopen(metrics_url, timeout=5).read().decode().splitlines():
        if line.startswith("shoal_group_rebalance_seconds_sum") or line.startswith(
            "shoal_group_rebalance_seconds_count"
        ):
            name, value = line.split()
            values[name.rsplit("_", 1)[1]] = float(value)
    return values.get("sum", 0.0), values.get("count", 0.0)


def rebalance_times(bootstrap: str, metrics_url: str) -> tuple[float, float, float, float]:
    """(formation s, broker s for it, hand-over after a clean leave s, broker s for it)."""
    assigned: dict[int, float] = {}
    metric0 = rebalance_metric(metrics_url)
    started = time.perf_counter()
    members = [_member(bootstrap, "bench-rebalance", assigned, i) for i in range(3)]
    deadline = time.time() + 60
    while len([t for t in assigned.values() if t]) < 3 and time.time() < deadline:
        for member in members:
            member.poll(0.02)
    formation = max(assigned.values()) - started
    metric1 = rebalance_metric(metrics_url)
    leaving = members.pop()
    assigned.clear()
    left_at = time.perf_counter()
    leaving.close()
    while len([t for t in assigned.values() if t]) < 2 and time.time() < deadline:
        for member in members:
            member.poll(0.02)
    rebalance = max(assigned.values()) - left_at
    metric2 = rebalance_metric(metrics_url)
    for member in members:
        member.close()
    return formation, metric1[0] - metric0[0], rebalance, metric2[0] - metric1[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=50_000)
    args = parser.parse_args()
    with running_broker("groups", "groups-bench", 6) as (_, bootstrap, metrics_url):
        rate = commit_throughput(bootstrap, args.commits)
        print(f"offset commits: {rate:,.0f} commits/s ({args.commits} async commits, one consumer)")
        formation, formation_broker, handover, handover_broker = rebalance_times(bootstrap, metrics_url)
        print(
            f"3-member group formation: {formation:.2f} s "
            f"(broker: {formation_broker:.3f} s from the last JoinGroup, initial delay included)"
        )
        print(
            f"rebalance after a clean leave: {handover:.2f} s "
            f"(broker: {handover_broker:.3f} s from the last JoinGroup to the join answers)"
        )


if __name__ == "__main__":
    main()
