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
import signal
import shutil
import tempfile
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .produce_consume import start_broker


def commit_throughput(bootstrap: str, commits: int) -> float:
    done = [0]

    def on_commit(err, partitions) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            raise SystemExit(f"commit failed: {err}")
        done[0] += 1

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-commits", "enable.auto.commit": False,
                         "on_commit": on_commit})
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


def rebalance_times(bootstrap: str) -> tuple[float, float]:
    assigned: dict[int, float] = {}
    started = time.perf_counter()
    members = [_member(bootstrap, "bench-rebalance", assigned, i) for i in range(3)]
    deadline = time.time() + 60
    while len([t for t in assigned.values() if t]) < 3 and time.time() < deadline:
        for member in members:
            member.poll(0.02)
    formation = max(assigned.values()) - started
    leaving = members.pop()
    assigned.clear()
    left_at = time.perf_counter()
    leaving.close()
    while len([t for t in assigned.values() if t]) < 2 and time.time() < deadline:
        for member in members:
            member.poll(0.02)
    rebalance = max(assigned.values()) - left_at
    for member in members:
        member.close()
    return formation, rebalance


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=50_000)
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="shoal-bench-groups-")
    proc, bootstrap = start_broker(data_dir)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("groups-bench", 6, 1)])["groups-bench"].result(30)
        rate = commit_throughput(bootstrap, args.commits)
        print(f"offset commits: {rate:,.0f} commits/s ({args.commits} async commits, one consumer)")
        formation, rebalance = rebalance_times(bootstrap)
        print(f"3-member group formation: {formation:.2f} s; rebalance after a clean leave: {rebalance:.2f} s")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
