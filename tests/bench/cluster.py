"""`make bench`, fourth part: the cost of replication and the time of a leader failover, on a
dev cluster (broker/devcluster: etcd, moto and broker processes on loopback).

Two clusters, one after the other: (a) one broker, RF=1; (b) three brokers in three AZs, RF=3,
min.insync.replicas=2. Each gets a classic topic (`diskless.enable=false`) and a diskless one,
--partitions each, and for each topic in turn --producers confluent-kafka producers (acks=all,
idempotent; partition p through producer p % N) send 1 KiB random records round-robin over the
partitions:
 1. full load for --seconds: ingest MiB/s (acknowledged bytes over the time to the last ack);
 2. half load (paced at half of phase 1's rate) for --paced-seconds: produce p50/p99 from
    delivery reports, without the producer-queue waits that dominate phase 1's latencies.
For (b), each phase also reads `shoal_replication_fetched_bytes_total` from every broker:
partition-log entry bytes followers copied, per MiB produced. A classic follower copies every
record; a diskless one copies ~120-byte entries that point into WAL objects.
 3. (b) only, --failovers times, with a paced producer on both topics: kill -9 the leader of
    diskless partition 0, poll Metadata on one connection to a surviving broker every 100 ms
    until every partition the victim led names a live leader; then restart the victim and
    wait until it is back in every ISR.

Producers: classic as tests/bench/produce_consume.py (linger.ms 5, 1 MB batches); diskless as
tests/bench/diskless.py (linger.ms 100, 1 MB batches, larger requests, 6 partitions per
producer or more: fewer make librdkafka busy-loop). Producer queues are capped (QUEUE_RECORDS)
so a phase ends within seconds of its deadline.

The object store is the cluster's moto, without tests/s3proxy.py: DevCluster passes
`--object-store <moto>` to every broker, and a flag overrides `--set object.store=...`, so
`settings` cannot put the proxy in between. Diskless latencies are therefore moto's (3-5 ms per
small request, ~90 ms per 8 MiB PUT), not a real S3's.

Not a test: no assertions, nothing runs it in CI. Record figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.metadata import MetadataRequest

from broker.devcluster import DevCluster
from tests.integration.clients import RawConnection

from .diskless import PRODUCER as DISKLESS_PRODUCER
from .diskless import Samples, machine_busy_seconds, percentile, process_cpu, scrape, total
from .pacing import QueueStayedFull, send_for

TOPICS = {"classic": "bench-classic", "diskless": "bench-diskless"}
QUEUE_RECORDS = 20_000  # per producer: ~20 MiB buffered, so a flush after the deadline is short
PRODUCERS = {
    "classic": {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.size": 1_000_000},
    "diskless": DISKLESS_PRODUCER,
}
FLUSH_LIMIT_S = 60.0
READY_LIMIT_S = 60.0  # for leaders and full ISRs after creation or a restart
FAILOVER_LIMIT_S = 60.0
POLL_S = 0.1
TRICKLE_RPS = 500  # the producer running during failovers, per topic
REPLICATED = "shoal_replication_fetched_bytes_total"


# -- metadata ----------------------------------------------------------------------------------


@dataclass
class PartitionState:
    leader: int
    isr: list[int]


def metadata(conn: RawConnection, topics: list[str]) -> tuple[int, dict[tuple[str, int], PartitionState]]:
    """(controller id, (topic, partition) -> leader and ISR) as the broker behind `conn` answers."""
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics], allow_auto_topic_creation=False
    )
    response = conn.request(request, 12, timeout_s=2.0)
    states = {
        (t.name, p.partition_index): PartitionState(p.leader_id, sorted(p.isr_nodes))
        for t in response.topics
        for p in t.partitions
    }
    return response.controller_id, states


def metadata_via(address: str, topics: list[str]) -> tuple[int, dict[tuple[str, int], PartitionState]] | None:
    """Metadata on a fresh connection; None while the broker is unreachable."""
    try:
        with RawConnection(address, timeout_s=2.0) as conn:
            return metadata(conn, topics)
    except (OSError, ConnectionError):
        return None


def fully_replicated(cluster: DevCluster, topics: list[str], partitions: int, replicas: int) -> bool:
    """Every broker names a live leader and a full ISR for every partition."""
    live = set(range(cluster.num_brokers))
    for broker in cluster.brokers:
        answer = metadata_via(broker.bootstrap, topics)
        if answer is None:
            return False
        states = answer[1]
        if len(states) != len(topics) * partitions or any(
            s.leader not in live or len(s.isr) != replicas for s in states.values()
        ):
            return False
    return True


def wait_for(condition: Callable[[], bool], what: str, limit_s: float = READY_LIMIT_S) -> float:
    """Seconds until `condition()` holds; SystemExit after `limit_s`."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > limit_s:
            raise SystemExit(f"{what}: not within {limit_s:.0f} s")
        time.sleep(POLL_S)
    return time.monotonic() - started


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class Snapshot:
    at: float
    metrics: list[Samples]
    cpu: dict[str, float]


def snap(cluster: DevCluster) -> Snapshot:
    """Every broker's metrics and the CPU seconds of every process in play."""
    pids = cluster.pids()
    cpu = {
        "brokers": sum(process_cpu(pid) for name, pid in pids.items() if name.startswith("broker")),
        "moto": process_cpu(pids["s3"]),
        "etcd": process_cpu(pids["etcd"]),
        "client": process_cpu(os.getpid()),
        "machine": machine_busy_seconds(),
    }
    metrics = [scrape(f"http://127.0.0.1:{b.metrics_port}/metrics") for b in cluster.brokers]
    return Snapshot(time.perf_counter(), metrics, cpu)


def replicated_bytes(a: Snapshot, b: Snapshot) -> float:
    return sum(total(after, REPLICATED) - total(before, REPLICATED) for before, after in zip(a.metrics, b.metrics))


def cpu_line(a: Snapshot, b: Snapshot) -> str:
    seconds = b.at - a.at
    used = {who: b.cpu[who] - a.cpu[who] for who in a.cpu}
    ours = ("brokers", "moto", "etcd", "client")
    others = max(used["machine"] - sum(used[who] for who in ours), 0.0)
    return (
        "CPU (% of one core; 2 cores): "
        + ", ".join(f"{who} {used[who] / seconds * 100:.0f}%" for who in ours)
        + f", other processes {others / seconds * 100:.0f}%"
    )


@dataclass
class Phase:
    records: int
    seconds: float
    p50_ms: float
    p99_ms: float
    size: int
    replicated: float = 0.0  # follower bytes, all brokers

    @property
    def mib(self) -> float:
        return self.records * self.size / 2**20

    @property
    def mib_s(self) -> float:
        return self.mib / self.seconds

    @property
    def replicated_per_mib(self) -> float:
        return self.replicated / self.mib


def produce_for(
    producers: list[Producer], topic: str, partitions: int, seconds: float, size: int, rate_rps: float = 0.0
) -> Phase:
    """Send for `seconds` (as fast as the producers take records, or paced at `rate_rps`), then
    flush; the phase lasts until the last acknowledgement."""
    payload = os.urandom(size)
    latencies: list[float] = []
    failures: list[object] = []
    last_ack = [0.0]

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            failures.append(err)
        else:
            latencies.append(msg.latency())
            last_ack[0] = time.perf_counter()

    try:
        started = send_for(producers, topic, partitions, payload, seconds, rate_rps, on_delivery, FLUSH_LIMIT_S)
    except QueueStayedFull as exc:
        raise SystemExit(str(exc)) from None
    flush_deadline = time.perf_counter() + FLUSH_LIMIT_S
    left = sum(p.flush(max(1.0, flush_deadline - time.perf_counter())) for p in producers)
    if failures or left:
        raise SystemExit(f"{topic}: {len(failures)} deliveries failed, {left} undelivered; first: {failures[:1]}")
    latencies.sort()
    return Phase(
        len(latencies),
        last_ack[0] - started,
        percentile(latencies, 0.5) * 1000,
        percentile(latencies, 0.99) * 1000,
        size,
    )


def new_producers(bootstrap: str, mode: str, topic: str, count: int, partitions: int) -> list[Producer]:
    """`count` producers, warmed up: connected, producer ids fetched, one record per partition acked."""
    config = {**PRODUCERS[mode], "queue.buffering.max.messages": QUEUE_RECORDS}
    producers = [
        Producer({"bootstrap.servers": bootstrap, "client.id": f"bench-{mode}-{i}", **config}) for i in range(count)
    ]
    for partition in range(partitions):
        producers[partition % count].produce(topic, b"warm-up", partition=partition)
    if sum(p.flush(30) for p in producers):
        raise SystemExit(f"{topic}: warm-up records not acknowledged within 30 s")
    return producers


@dataclass
class TopicResult:
    full: Phase
    half: Phase


def measure_topic(cluster: DevCluster, mode: str, args: argparse.Namespace) -> TopicResult:
    topic = TOPICS[mode]
    producers = new_producers(cluster.bootstrap, mode, topic, args.producers, args.partitions)
    s0 = snap(cluster)
    full = produce_for(producers, topic, args.partitions, args.seconds, args.size)
    time.sleep(0.5)  # acks=all waited for the whole ISR; this covers the followers' next fetch
    s1 = snap(cluster)
    full.replicated = replicated_bytes(s0, s1)
    half = produce_for(
        producers, topic, args.partitions, args.paced_seconds, args.size, rate_rps=full.records / full.seconds / 2
    )
    time.sleep(0.5)
    s2 = snap(cluster)
    half.replicated = replicated_bytes(s1, s2)
    print(
        f"  {mode:8} full load {full.mib_s:6.1f} MiB/s ({full.records:,} records in {full.seconds:.1f} s), "
        f"p50 {full.p50_ms:.0f} ms, p99 {full.p99_ms:.0f} ms; replication {full.replicated_per_mib:,.0f} B/MiB"
    )
    print(f"  {'':8}   {cpu_line(s0, s1)}")
    print(
        f"  {'':8} half load {half.mib_s:6.1f} MiB/s for {half.seconds:.1f} s, p50 {half.p50_ms:.1f} ms, "
        f"p99 {half.p99_ms:.1f} ms; replication {half.replicated_per_mib:,.0f} B/MiB"
    )
    print(f"  {'':8}   {cpu_line(s1, s2)}")
    return TopicResult(full, half)


# -- failover ----------------------------------------------------------------------------------


@dataclass
class Trickle:
    """A paced acks=all idempotent producer on every partition of `topics`, in a thread, while
    the failovers run: records (ack time, latency) to find the slowest delivery of each one."""

    bootstrap: str
    topics: list[str]
    partitions: int
    limit_s: float
    acks: list[tuple[float, float]] = field(default_factory=list)
    failures: list[object] = field(default_factory=list)
    undelivered: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-trickle", daemon=True)

    def _on_delivery(self, err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            self.failures.append(err)
        else:
            self.acks.append((time.monotonic(), msg.latency()))

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, **PRODUCERS["classic"]})
        payload = os.urandom(1024)
        started = time.monotonic()
        i = 0
        while not self._stop.is_set() and time.monotonic() - started < self.limit_s:
            for topic in self.topics:
                producer.produce(topic, payload, partition=i % self.partitions, on_delivery=self._on_delivery)
            i += 1
            producer.poll(0)
            time.sleep(max(0.0, started + i / TRICKLE_RPS - time.monotonic()))
        self.undelivered = producer.flush(FLUSH_LIMIT_S)

    def start(self) -> Trickle:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(FLUSH_LIMIT_S + 5)

    def slowest_ms(self, start: float, end: float) -> float:
        return max((latency for at, latency in self.acks if start <= at <= end), default=float("nan")) * 1000


@dataclass
class Failover:
    victim: int
    was_controller: bool
    led: int  # partitions the victim led
    first_s: float  # kill -> diskless partition 0 has a new leader
    all_s: float  # kill -> every partition the victim led has one
    rejoin_s: float  # restart -> back in every ISR
    slowest_ms: float  # slowest delivery acknowledged between the kill and the victim's return to the ISRs


def failover(cluster: DevCluster, args: argparse.Namespace, trickle: Trickle) -> Failover:
    topics = list(TOPICS.values())
    controller, states = (
        metadata_via(cluster.brokers[0].bootstrap, topics)
        or metadata_via(cluster.brokers[1].bootstrap, topics)
        or (None, {})
    )
    if not states:
        raise SystemExit("no Metadata before the failover")
    victim = states[(TOPICS["diskless"], 0)].leader
    led = [key for key, s in states.items() if s.leader == victim]
    survivor = next(b for b in cluster.brokers if b.node_id != victim)
    moved: dict[tuple[str, int], float] = {}
    with RawConnection(survivor.bootstrap, timeout_s=2.0) as conn:
        killed_at = time.monotonic()
        cluster.kill(victim)
        while len(moved) < len(led):
            now = time.monotonic()
            if now - killed_at > FAILOVER_LIMIT_S:
                raise SystemExit(f"no new leader for {sorted(set(led) - set(moved))} within {FAILOVER_LIMIT_S:.0f} s")
            current = metadata(conn, topics)[1]
            for key in led:
                if key not in moved and current[key].leader not in (victim, -1):
                    moved[key] = now - killed_at
            time.sleep(max(0.0, now + POLL_S - time.monotonic()))
    restarted_at = time.monotonic()
    cluster.restart(victim, graceful=False)
    wait_for(lambda: fully_replicated(cluster, topics, args.partitions, 3), f"broker {victim} back in every ISR")
    return Failover(
        victim,
        controller == victim,
        len(led),
        moved[(TOPICS["diskless"], 0)],
        max(moved.values()),
        time.monotonic() - restarted_at,
        trickle.slowest_ms(killed_at, time.monotonic()),
    )


# -- the runs ----------------------------------------------------------------------------------


@dataclass
class ClusterResult:
    brokers: int
    topics: dict[str, TopicResult]
    failovers: list[Failover] = field(default_factory=list)


def run_cluster(brokers: int, args: argparse.Namespace) -> ClusterResult:
    replicas = min(3, brokers)
    started = time.monotonic()
    with DevCluster(brokers, brokers) as cluster:
        print(
            f"\n[{brokers} broker{'s' * (brokers > 1)}, {brokers} AZ{'s' * (brokers > 1)}, RF={replicas}"
            f"{', min.insync.replicas=2' if replicas > 1 else ''}] started in {time.monotonic() - started:.1f} s"
        )
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        configs = {"min.insync.replicas": "2"} if replicas > 1 else {}
        new = [
            NewTopic(
                TOPICS[mode],
                args.partitions,
                replicas,
                config={**configs, "diskless.enable": str(mode == "diskless").lower()},
            )
            for mode in TOPICS
        ]
        for future in admin.create_topics(new).values():
            future.result(30)
        del admin  # a live client would log the cluster's shutdown as connection failures
        wait_for(
            lambda: fully_replicated(cluster, list(TOPICS.values()), args.partitions, replicas),
            "leaders and full ISRs after creation",
        )
        result = ClusterResult(brokers, {mode: measure_topic(cluster, mode, args) for mode in TOPICS})
        if brokers > 1 and args.failovers:
            trickle = Trickle(
                cluster.bootstrap, list(TOPICS.values()), args.partitions, limit_s=args.failovers * 90.0
            ).start()
            try:
                time.sleep(2.0)
                for n in range(args.failovers):
                    done = failover(cluster, args, trickle)
                    result.failovers.append(done)
                    print(
                        f"  failover {n + 1}: kill -9 broker {done.victim} (controller: {done.was_controller}, "
                        f"led {done.led} partitions): diskless-0 has a new leader after {done.first_s:.2f} s, "
                        f"all {done.led} after {done.all_s:.2f} s; slowest produce ack {done.slowest_ms:.0f} ms; "
                        f"restarted broker back in every ISR {done.rejoin_s:.1f} s after its restart"
                    )
            finally:
                trickle.stop()
            print(
                f"  producer during the failovers: {len(trickle.acks):,} records acknowledged, "
                f"{len(trickle.failures)} failed, {trickle.undelivered} undelivered"
            )
    return result


def summary(runs: list[ClusterResult], args: argparse.Namespace) -> None:
    print(
        f"\nsummary: {args.partitions} partitions, {args.producers} producers, {args.size} B records, "
        f"full load {args.seconds:g} s then half load {args.paced_seconds:g} s"
    )
    print(f"  {'':22} {'ingest MiB/s':>13} {'half-load p50 / p99 ms':>24} {'replicated B/MiB full / half':>30}")
    for run in runs:
        for mode, r in run.topics.items():
            label = f"{run.brokers} broker{'s' * (run.brokers > 1)}, {mode}"
            repl = f"{r.full.replicated_per_mib:,.0f} / {r.half.replicated_per_mib:,.0f}" if run.brokers > 1 else "-"
            print(f"  {label:22} {r.full.mib_s:13.1f} {f'{r.half.p50_ms:.1f} / {r.half.p99_ms:.1f}':>24} {repl:>30}")
    for run in runs:
        if run.brokers > 1:
            classic, diskless = run.topics["classic"], run.topics["diskless"]
            print(
                f"  replication, diskless / classic: full load "
                f"{diskless.full.replicated_per_mib / classic.full.replicated_per_mib * 100:.3f}%, half load "
                f"{diskless.half.replicated_per_mib / classic.half.replicated_per_mib * 100:.3f}% (target <= 2%)"
            )
        if run.failovers:
            for what, values in (
                ("diskless-0", [f.first_s for f in run.failovers]),
                ("all the victim's partitions", [f.all_s for f in run.failovers]),
            ):
                print(
                    f"  kill -9 -> new leader ({what}), s: min {min(values):.2f}, "
                    f"median {statistics.median(values):.2f}, max {max(values):.2f}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="full-load phase per topic")
    parser.add_argument("--paced-seconds", type=float, default=10.0, help="half-load phase per topic")
    parser.add_argument("--partitions", type=int, default=12, help="per topic")
    parser.add_argument("--producers", type=int, default=2, help="partition p goes through producer p %% N")
    parser.add_argument("--size", type=int, default=1024, help="record size in bytes")
    parser.add_argument("--failovers", type=int, default=3, help="kill -9 repetitions on the 3-broker cluster")
    parser.add_argument("--brokers", type=int, nargs="+", default=[1, 3], help="cluster sizes to run")
    args = parser.parse_args()
    started = time.monotonic()
    runs = [run_cluster(brokers, args) for brokers in args.brokers]
    summary(runs, args)
    print(f"  wall time {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
