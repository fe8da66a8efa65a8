"""`make bench`, failover at partition scale (issue 28): three brokers in three AZs on etcd
(a DevCluster: etcd, moto and broker processes on loopback) holding --partitions partitions
of replication factor 3, and the controller killed (-9).

It measures: topic creation (topics of --topic-partitions, one CreateTopics each: larger
ones outlast the admin client's 10 s timeout), the time until every broker names a live
leader and a full ISR, each process's idle CPU over --idle-seconds, then, after kill -9 of
the broker that is controller: the time until every partition it led has a new leader (the
partition states in etcd, listed every 100 ms: first, median, last; Metadata cannot tell, as
it names a broker in the client's AZ for a diskless partition), the time until one record
produced to every partition (librdkafka defaults, acks=all) is acknowledged, and, after the
broker restarts, the time until it is back in every ISR. --mode picks the topics' mode.

Not a test: no assertions; nothing runs it in CI. Record figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.clock import SystemClock
from broker.devcluster import DevCluster
from broker.metadata import records
from broker.metadata.etcd import EtcdMetadataStore
from broker.partition_ids import TopicIdPartition

from .cluster import cpu_line, fully_replicated, snap, wait_for

POLL_S = 0.1
LIMIT_S = 600.0


def create_topics(cluster: DevCluster, names: list[str], partitions: int, mode: str) -> float:
    started = time.monotonic()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    config = {"diskless.enable": str(mode == "diskless").lower()}
    for name in names:
        admin.create_topics([NewTopic(name, partitions, 3, config=config)])[name].result(120)
    del admin
    return time.monotonic() - started


def produce_everywhere(bootstrap: str, names: list[str], partitions: int, since: float) -> float:
    """Seconds from `since` until one record to every partition is acknowledged."""
    acked: list[float] = []
    failed: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            acked.append(time.monotonic())
        else:
            failed.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for name in names:
        for index in range(partitions):
            producer.produce(name, b"after the kill", partition=index, on_delivery=on_delivery)
            producer.poll(0)
    producer.flush(LIMIT_S)
    if failed or len(acked) != len(names) * partitions:
        raise SystemExit(f"produce after the kill: {len(acked)} acknowledged, {len(failed)} failed: {failed[:3]}")
    return max(acked) - since


async def kill_the_controller(cluster: DevCluster) -> tuple[int, int, float, list[float]]:
    """(the controller's node id, how many partitions it led, when it was killed (-9), seconds
    from then until each of them had another leader), read from the partition states in etcd."""
    store = EtcdMetadataStore(cluster.metadata_url, clock=SystemClock())
    try:
        current = await store.get(records.CONTROLLER_KEY)
        if current is None:
            raise SystemExit("no controller before the kill")
        victim = records.decode(current.value, records.ControllerRecord).node_id
        led = {pid for pid, state in (await leaders(store)).items() if state.leader == victim}
        moved: dict[TopicIdPartition, float] = {}
        killed_at = time.monotonic()
        cluster.kill(victim)
        while len(moved) < len(led):
            now = time.monotonic()
            if now - killed_at > LIMIT_S:
                raise SystemExit(f"{len(led) - len(moved)} partitions without a new leader after {LIMIT_S:.0f} s")
            for pid, state in (await leaders(store)).items():
                if pid in led and pid not in moved and state.leader not in (victim, records.NO_LEADER):
                    moved[pid] = time.monotonic() - killed_at
            await asyncio.sleep(max(0.0, now + POLL_S - time.monotonic()))
        return victim, len(led), killed_at, list(moved.values())
    finally:
        await store.close()


async def leaders(store: EtcdMetadataStore) -> dict[TopicIdPartition, records.PartitionStateRecord]:
    return {
        records.parse_partition_key(kv.key): records.decode(kv.value, records.PartitionStateRecord)
        for kv in await store.list(records.PARTITION_PREFIX)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=3000)
    parser.add_argument("--topic-partitions", type=int, default=250)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--mode", choices=("diskless", "classic"), default="diskless")
    args = parser.parse_args()
    names = [f"scale-{n}" for n in range(args.partitions // args.topic_partitions)]
    total = len(names) * args.topic_partitions
    started = time.monotonic()
    with DevCluster(3, 3) as cluster:
        print(f"3 brokers, 3 AZs, etcd; {total:,} {args.mode} partitions of RF 3 in {len(names)} topics")
        print(f"  cluster started in {time.monotonic() - started:.1f} s")
        print(f"  topics created in {create_topics(cluster, names, args.topic_partitions, args.mode):.1f} s")
        ready = wait_for(lambda: fully_replicated(cluster, names, args.topic_partitions, 3), "full ISRs", LIMIT_S)
        print(f"  every broker names a leader and a full ISR {ready:.1f} s later")
        before = snap(cluster)
        time.sleep(args.idle_seconds)
        print(f"  idle over {args.idle_seconds:.0f} s: {cpu_line(before, snap(cluster))} (brokers: all three)")
        victim, led, killed_at, moved = asyncio.run(kill_the_controller(cluster))
        times = sorted(moved)
        print(
            f"  kill -9 of broker {victim} (the controller, leader of {led:,}): new leaders after "
            f"first {times[0]:.2f} s, median {statistics.median(times):.2f} s, last {times[-1]:.2f} s"
        )
        survivor = next(b for b in cluster.brokers if b.node_id != victim)
        produced = produce_everywhere(survivor.bootstrap, names, args.topic_partitions, killed_at)
        print(f"  one record to each of {total:,} partitions acknowledged {produced:.1f} s after the kill")
        restarted_at = time.monotonic()
        cluster.restart(victim, graceful=False, timeout_s=LIMIT_S)
        wait_for(lambda: fully_replicated(cluster, names, args.topic_partitions, 3), "back in every ISR", LIMIT_S)
        print(f"  broker {victim} back in every ISR {time.monotonic() - restarted_at:.1f} s after its restart")


if __name__ == "__main__":
    main()
