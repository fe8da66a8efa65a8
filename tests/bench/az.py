"""`make bench`, fifth part: AZ-local diskless traffic on 3 AZs, what crosses an AZ boundary and
how many commit RPCs a WAL object costs.

One dev cluster (broker/devcluster): `DevCluster(3, 3, stateless_per_az=1)`, so each AZ
(az1..az3) has a broker with a data dir (node ids 0-2) and a stateless one (ids 3-5). One
diskless topic, RF=3, min.insync.replicas=2, --partitions partitions whose leaders go
round-robin over brokers 0-2 (replicas [p%3, (p+1)%3, (p+2)%3]). The brokers write to moto
behind tests/s3proxy.py (20 ms per PUT, 10 ms per GET), as in tests/bench/diskless.py: the
bench starts its own moto and proxy and passes `object.store` in DevCluster's settings
(DevCluster's own moto then idles).

One confluent-kafka producer per AZ, in its own thread: client.id `bench-az,shoal_az=<az>`,
bootstrapped to its AZ's brokers only, acks=all, idempotent, the diskless producer settings of
tests/bench/diskless.py with linger.ms --linger-ms, --size random records round-robin over all
partitions. Brokers answer Metadata per client AZ, so each producer sends every partition to
that partition's representative in its own AZ, which uploads WAL objects and sends one commit
per leader broker per object (locally when it leads partitions of the object itself).
 1. full load for --seconds: per-AZ MiB/s (acknowledged bytes over the time to the last ack)
    and delivery-report p50/p99 (mostly producer-queue waits at full load);
 2. half load, each producer paced at half its phase-1 rate, for --paced-seconds: p50/p99
    without those queue waits;
 3. idle, no clients, for --idle-seconds: what the brokers exchange across AZs by themselves;
 4. read: one consumer per AZ (client.rack and client.id name the AZ, bootstrapped to its AZ,
    its own group.id) reads every partition from offset 0, all three at once, for at most
    --read-seconds; the group coordinators' brokers are printed (they may be in another AZ).
Per phase, every broker's /metrics before and after (plus 1 s for commits and replication):
the sums over brokers of `shoal_produced_bytes_total`, `shoal_cross_az_bytes_total{kind}` (per
GiB produced, per second when idle, per GiB fetched in phase 4), `shoal_wal_commit_requests_total{target}` and
`shoal_wal_objects_total{outcome="committed"}` (commit RPCs per WAL object), and per AZ the
`shoal_fetched_bytes_total` of its brokers against what its consumer read.

Everything (6 brokers, etcd, 2 motos, the proxy and this client) shares the machine: the
figures are those of a loopback cluster on whatever cores there are, not of real AZs.

Not a test: no assertions, nothing runs it in CI. Record figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.devcluster import DevCluster

from .cluster import metadata_via, wait_for
from .pacing import QueueStayedFull, send_for
from .diskless import (
    CONSUMER,
    PRODUCER,
    Samples,
    machine_busy_seconds,
    object_store_url,
    percentile,
    process_cpu,
    s3_endpoint,
    scrape,
    total,
)

AZS = ("az1", "az2", "az3")
TOPIC = "bench-az"
QUEUE_RECORDS = 20_000  # per producer: ~20 MiB buffered, so a phase ends within seconds of its deadline
FLUSH_LIMIT_S = 60.0
SETTLE_S = 1.0  # after a phase, before the metrics: the last commits and follower fetches
KINDS = ("records", "metadata", "client")
GIB = 2**30
MIB = 2**20


# -- metrics -----------------------------------------------------------------------------------


@dataclass
class Snapshot:
    at: float
    metrics: list[Samples]  # per broker, in node id order
    cpu: dict[str, float]


class Probe:
    """Snapshots of every broker's metrics and of the CPU time of the processes in play."""

    def __init__(self, cluster: DevCluster, pids: dict[str, int | None]) -> None:
        self.cluster = cluster
        self.pids = pids

    def snap(self) -> Snapshot:
        brokers = self.cluster.pids()
        cpu = {
            "brokers": sum(process_cpu(pid) for name, pid in brokers.items() if name.startswith("broker")),
            "etcd": process_cpu(brokers["etcd"]),
            "client": process_cpu(os.getpid()),
            "machine": machine_busy_seconds(),
            "idle moto": process_cpu(brokers["s3"]),
            **{who: process_cpu(pid) for who, pid in self.pids.items()},
        }
        metrics = [scrape(f"http://127.0.0.1:{b.metrics_port}/metrics") for b in self.cluster.brokers]
        return Snapshot(time.perf_counter(), metrics, cpu)


@dataclass
class Delta:
    """What every broker counted between two snapshots."""

    a: Snapshot
    b: Snapshot

    def d(self, node: int, name: str, **labels: str) -> float:
        return total(self.b.metrics[node], name, **labels) - total(self.a.metrics[node], name, **labels)

    def all(self, name: str, **labels: str) -> float:
        return sum(self.d(node, name, **labels) for node in range(len(self.a.metrics)))

    @property
    def produced(self) -> float:
        return self.all("shoal_produced_bytes_total")

    @property
    def fetched(self) -> float:
        return self.all("shoal_fetched_bytes_total")

    def cross_az(self, kind: str) -> float:
        return self.all("shoal_cross_az_bytes_total", kind=kind)

    @property
    def objects(self) -> float:
        return self.all("shoal_wal_objects_total", outcome="committed")

    def commits(self, target: str = "local|remote") -> float:
        return self.all("shoal_wal_commit_requests_total", target=target)

    def cpu_line(self) -> str:
        seconds = self.b.at - self.a.at
        used = {who: self.b.cpu[who] - self.a.cpu[who] for who in self.a.cpu}
        ours = [who for who in used if who != "machine"]
        others = max(used["machine"] - sum(used[who] for who in ours), 0.0)
        return (
            "CPU (% of one core; "
            + f"{os.cpu_count()} cores): "
            + ", ".join(f"{who} {used[who] / seconds * 100:.0f}%" for who in ours)
            + f", other processes {others / seconds * 100:.0f}%"
        )


def broker_lines(cluster: DevCluster, delta: Delta) -> list[str]:
    lines = [
        f"    {'broker':10} {'produced MiB':>12} {'fetched MiB':>11} {'WAL objects':>11} "
        f"{'commits local/remote':>20}  cross-AZ bytes records/metadata/client"
    ]
    for b in cluster.brokers:
        n = b.node_id
        kind = f"{n} {b.az}{'*' if b.stateless else ''}"
        commits = (
            f"{delta.d(n, 'shoal_wal_commit_requests_total', target='local'):.0f} / "
            f"{delta.d(n, 'shoal_wal_commit_requests_total', target='remote'):.0f}"
        )
        cross = " / ".join(f"{delta.d(n, 'shoal_cross_az_bytes_total', kind=k):,.0f}" for k in KINDS)
        lines.append(
            f"    {kind:10} {delta.d(n, 'shoal_produced_bytes_total') / MIB:12.1f} "
            f"{delta.d(n, 'shoal_fetched_bytes_total') / MIB:11.1f} "
            f"{delta.d(n, 'shoal_wal_objects_total', outcome='committed'):11.0f} {commits:>20}  {cross}"
        )
    lines.append("    (* stateless)")
    return lines


# -- producing ---------------------------------------------------------------------------------


@dataclass
class Phase:
    records: int = 0
    seconds: float = 0.0
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    size: int = 0
    ends: dict[int, int] = field(default_factory=dict)  # partition -> highest acknowledged offset + 1

    @property
    def mib_s(self) -> float:
        return self.records * self.size / MIB / self.seconds if self.seconds else 0.0


class AzProducer:
    """The producer of one AZ; `run()` sends in a thread, `result()` waits for it."""

    def __init__(self, cluster: DevCluster, az: str, args: argparse.Namespace) -> None:
        self.az = az
        self.args = args
        self.producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_by_az[az],
                "client.id": f"bench-az,shoal_az={az}",
                **PRODUCER,
                "linger.ms": args.linger_ms,
                "queue.buffering.max.messages": QUEUE_RECORDS,
            }
        )
        self._thread: threading.Thread | None = None
        self._phase = Phase()
        self._error: str | None = None

    def warm_up(self) -> None:
        """Connected, producer id fetched, one record per partition acknowledged."""
        for partition in range(self.args.partitions):
            self.producer.produce(TOPIC, b"warm-up", partition=partition)
        if self.producer.flush(60):
            raise SystemExit(f"{self.az}: warm-up records not acknowledged within 60 s")

    def run(self, seconds: float, rate_rps: float = 0.0) -> None:
        self._phase, self._error = Phase(size=self.args.size), None
        self._thread = threading.Thread(
            target=self._send, args=(seconds, rate_rps), name=f"bench-{self.az}", daemon=True
        )
        self._thread.start()

    def result(self) -> Phase:
        assert self._thread is not None
        self._thread.join(self.args.seconds + self.args.paced_seconds + 2 * FLUSH_LIMIT_S)
        if self._thread.is_alive():
            raise SystemExit(f"{self.az}: the producer thread did not finish")
        if self._error is not None:
            raise SystemExit(f"{self.az}: {self._error}")
        return self._phase

    def _send(self, seconds: float, rate_rps: float) -> None:
        payload = os.urandom(self.args.size)
        partitions = self.args.partitions
        latencies: list[float] = []
        failures: list[object] = []
        ends: dict[int, int] = {}
        last_ack = [0.0]

        def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                failures.append(err)
                return
            latencies.append(msg.latency())
            last_ack[0] = time.perf_counter()
            if msg.offset() >= ends.get(msg.partition(), 0):
                ends[msg.partition()] = msg.offset() + 1

        try:
            started = send_for(
                [self.producer], TOPIC, partitions, payload, seconds, rate_rps, on_delivery, FLUSH_LIMIT_S
            )
        except QueueStayedFull as exc:
            self._error = str(exc)
            return
        left = self.producer.flush(FLUSH_LIMIT_S)
        if failures or left:
            self._error = f"{len(failures)} deliveries failed, {left} undelivered; first: {failures[:1]}"
            return
        latencies.sort()
        self._phase = Phase(
            len(latencies),
            last_ack[0] - started,
            percentile(latencies, 0.5) * 1000,
            percentile(latencies, 0.99) * 1000,
            self.args.size,
            ends,
        )


def produce_phase(
    producers: list[AzProducer], seconds: float, rates: dict[str, float] | None = None
) -> dict[str, Phase]:
    for producer in producers:
        producer.run(seconds, (rates or {}).get(producer.az, 0.0))
    return {producer.az: producer.result() for producer in producers}


# -- reading -----------------------------------------------------------------------------------


@dataclass
class Read:
    records: int = 0
    bytes: int = 0  # record values
    seconds: float = 0.0
    done: bool = False
    error: str | None = None


def read_az(cluster: DevCluster, az: str, ends: dict[int, int], limit_s: float, out: Read) -> None:
    """Every partition from offset 0 to `ends`, through the AZ's own brokers, for at most `limit_s`."""
    try:
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_by_az[az],
                **CONSUMER,
                "client.id": f"bench-az-reader,shoal_az={az}",
                "client.rack": az,
                "group.id": f"bench-az-{az}",
            }
        )
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in ends])
        positions = dict.fromkeys(ends, 0)
        started = time.perf_counter()
        while time.perf_counter() - started < limit_s:
            for message in consumer.consume(10_000, 0.1):
                if message.error() is None:
                    out.records += 1
                    out.bytes += len(message.value())
                    positions[message.partition()] = message.offset() + 1
            out.seconds = time.perf_counter() - started
            if all(positions[p] >= end for p, end in ends.items()):
                out.done = True
                break
        consumer.close()
    except Exception as exc:  # reported by the caller
        out.error = repr(exc)


# -- the run -----------------------------------------------------------------------------------


def create_topic(cluster: DevCluster, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    replicas = [[p % 3, (p + 1) % 3, (p + 2) % 3] for p in range(partitions)]  # leaders 0, 1, 2, 0, ...
    topic = NewTopic(
        TOPIC, partitions, replica_assignment=replicas, config={"diskless.enable": "true", "min.insync.replicas": "2"}
    )
    admin.create_topics([topic])[TOPIC].result(30)
    del admin  # a live client would log the cluster's shutdown as connection failures

    def ready() -> bool:  # every broker names a leader (or representative) and a full ISR everywhere
        for broker in cluster.brokers:
            answer = metadata_via(broker.bootstrap, [TOPIC])
            if (
                answer is None
                or len(answer[1]) != partitions
                or any(s.leader < 0 or len(s.isr) != 3 for s in answer[1].values())
            ):
                return False
        return True

    wait_for(ready, "leaders and full ISRs after creation")


@dataclass
class Result:
    full: dict[str, Phase]
    half: dict[str, Phase]
    full_delta: Delta
    half_delta: Delta
    idle_delta: Delta | None
    reads: dict[str, Read]
    read_delta: Delta | None
    fetched_by_az: dict[str, float]  # shoal_fetched_bytes_total of the AZ's brokers in the read phase


def print_produce(name: str, cluster: DevCluster, phases: dict[str, Phase], delta: Delta) -> None:
    records = sum(p.records for p in phases.values())
    print(
        f"  {name}: "
        + "; ".join(f"{az} {p.mib_s:.1f} MiB/s, p50/p99 {p.p50_ms:.0f}/{p.p99_ms:.0f} ms" for az, p in phases.items())
        + f"; {records:,} records"
    )
    produced = delta.produced
    seconds = delta.b.at - delta.a.at
    print(
        f"    produced {produced / MIB:.1f} MiB (batches); cross-AZ bytes per GiB produced: "
        + ", ".join(f"{k} {delta.cross_az(k) / produced * GIB:,.0f}" for k in KINDS)
        + f" (metadata {delta.cross_az('metadata') / seconds:,.0f} B/s)"
    )
    objects = delta.objects
    print(
        f"    WAL objects committed {objects:.0f}; commit requests local {delta.commits('local'):.0f}, remote "
        f"{delta.commits('remote'):.0f}: {delta.commits() / objects:.2f} per object "
        f"({delta.commits('remote') / objects:.2f} remote)"
        if objects
        else "    no WAL object committed"
    )
    print(f"    {delta.cpu_line()}")
    for line in broker_lines(cluster, delta):
        print(line)


def produce_phases(
    cluster: DevCluster, probe: Probe, args: argparse.Namespace
) -> tuple[dict[str, Phase], dict[str, Phase], Delta, Delta, Snapshot]:
    """Phases 1 and 2: (full, half, their deltas, the last snapshot). The producers are gone on
    return, so nothing but the brokers' own traffic runs afterwards."""
    producers = [AzProducer(cluster, az, args) for az in AZS]
    for producer in producers:
        producer.warm_up()
    s0 = probe.snap()
    full = produce_phase(producers, args.seconds)
    time.sleep(SETTLE_S)
    s1 = probe.snap()
    full_delta = Delta(s0, s1)
    print_produce(f"full load {args.seconds:g} s", cluster, full, full_delta)
    if args.paced_seconds <= 0:
        return full, {}, full_delta, full_delta, s1
    half = produce_phase(
        producers, args.paced_seconds, {az: p.records / p.seconds / 2 for az, p in full.items() if p.seconds}
    )
    time.sleep(SETTLE_S)
    s2 = probe.snap()
    half_delta = Delta(s1, s2)
    print_produce(f"half load {args.paced_seconds:g} s", cluster, half, half_delta)
    return full, half, full_delta, half_delta, s2


def print_idle(delta: Delta) -> None:
    seconds = delta.b.at - delta.a.at
    print(
        f"  idle {seconds:.0f} s (no clients): cross-AZ bytes per second: "
        + ", ".join(f"{k} {delta.cross_az(k) / seconds:,.0f}" for k in KINDS)
    )


def run(args: argparse.Namespace, proxy_port: int, pids: dict[str, int | None]) -> Result:
    started = time.monotonic()
    settings = {"object.store": object_store_url(proxy_port)}
    with DevCluster(3, 3, stateless_per_az=1, settings=settings) as cluster:
        print(
            f"[3 AZs: brokers 0-2 with data dirs, 3-5 stateless; {args.partitions} partitions RF=3] "
            f"started in {time.monotonic() - started:.1f} s"
        )
        create_topic(cluster, args.partitions)
        probe = Probe(cluster, pids)
        full, half, full_delta, half_delta, s2 = produce_phases(cluster, probe, args)
        idle_delta = None
        if args.idle_seconds > 0:
            time.sleep(args.idle_seconds)
            s3 = probe.snap()
            idle_delta = Delta(s2, s3)
            s2 = s3
            print_idle(idle_delta)

        reads: dict[str, Read] = {}
        read_delta = None
        fetched_by_az: dict[str, float] = {}
        if args.read_seconds > 0:
            ends: dict[int, int] = defaultdict(int)
            for phases in (full, half):
                for phase in phases.values():
                    for p, end in phase.ends.items():
                        ends[p] = max(ends[p], end)
            reads = {az: Read() for az in AZS}
            threads = [
                threading.Thread(
                    target=read_az, args=(cluster, az, dict(ends), args.read_seconds, reads[az]), daemon=True
                )
                for az in AZS
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(args.read_seconds + 30)
            time.sleep(SETTLE_S)
            read_delta = Delta(s2, probe.snap())
            fetched_by_az = {az: az_fetched(cluster, read_delta, az) for az in AZS}
            print_read(cluster, reads, read_delta, sum(ends.values()))
            print(f"    group coordinators: {coordinators(cluster)}")
            if any(r.error for r in reads.values()):
                raise SystemExit("a consumer failed")
    return Result(full, half, full_delta, half_delta, idle_delta, reads, read_delta, fetched_by_az)


def az_fetched(cluster: DevCluster, delta: Delta, az: str) -> float:
    return sum(delta.d(b.node_id, "shoal_fetched_bytes_total") for b in cluster.brokers if b.az == az)


def coordinators(cluster: DevCluster) -> str:
    """Which broker coordinates each consumer's group: a consumer with a group.id (mandatory in
    confluent-kafka-python) talks to it, whatever its AZ (the leader of a __consumer_offsets
    partition)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    try:
        found = admin.describe_consumer_groups([f"bench-az-{az}" for az in AZS])
        where = {b.node_id: b.az for b in cluster.brokers}
        return ", ".join(
            f"{group}: broker {(n := future.result(10).coordinator.id)} ({where.get(n)})"
            for group, future in found.items()
        )
    except Exception as exc:  # only informative
        return f"unknown ({exc!r})"
    finally:
        del admin


def print_read(cluster: DevCluster, reads: dict[str, Read], delta: Delta, records: int) -> None:
    print(
        f"  read ({records:,} records per consumer, from offset 0): "
        + "; ".join(
            f"{az} {r.bytes / MIB:.0f} MiB at {r.bytes / MIB / r.seconds if r.seconds else 0:.1f} MiB/s"
            f"{'' if r.done else ' (not finished)'}{f' ERROR {r.error}' if r.error else ''}"
            for az, r in reads.items()
        )
    )
    print(
        "    fetched by each AZ's brokers / read by its consumer: "
        + ", ".join(
            f"{az} {az_fetched(cluster, delta, az) / MIB:.0f} / {r.bytes / MIB:.0f} MiB" for az, r in reads.items()
        )
    )
    fetched = delta.fetched
    print(
        "    cross-AZ bytes per GiB fetched: "
        + ", ".join(f"{k} {delta.cross_az(k) / fetched * GIB if fetched else float('nan'):,.0f}" for k in KINDS)
    )
    print(f"    {delta.cpu_line()}")
    for line in broker_lines(cluster, delta):
        print(line)


def summary(result: Result, args: argparse.Namespace) -> None:
    print(
        f"\nsummary: 3 AZs x (1 broker + 1 stateless), {args.partitions} partitions RF=3, one producer per AZ, "
        f"{args.size} B records, linger.ms {args.linger_ms}"
    )
    print(
        f"  {'':10} {'full load MiB/s':>16} {'full p50 / p99 ms':>18} {'half load MiB/s':>16} {'half p50 / p99 ms':>18}"
    )
    for az in AZS:
        f, h = result.full[az], result.half.get(az, Phase())
        print(
            f"  {az:10} {f.mib_s:16.1f} {f'{f.p50_ms:.0f} / {f.p99_ms:.0f}':>18} {h.mib_s:16.1f} "
            f"{f'{h.p50_ms:.0f} / {h.p99_ms:.0f}':>18}"
        )
    tot_f = sum(p.mib_s for p in result.full.values())
    tot_h = sum(p.mib_s for p in result.half.values())
    print(f"  {'all AZs':10} {tot_f:16.1f} {'':>18} {tot_h:16.1f}")
    for name, delta in (("full load", result.full_delta), ("half load", result.half_delta)):
        if name == "half load" and not result.half:
            continue
        produced, objects, seconds = delta.produced, delta.objects, delta.b.at - delta.a.at
        print(
            f"  {name}: cross-AZ bytes per GiB produced "
            + ", ".join(f"{k} {delta.cross_az(k) / produced * GIB:,.0f}" for k in KINDS)
            + f" (metadata {delta.cross_az('metadata') / seconds:,.0f} B/s)"
            + (
                f"; commit RPCs per WAL object {delta.commits() / objects:.2f} "
                f"({delta.commits('remote') / objects:.2f} remote, {objects:.0f} objects)"
                if objects
                else ""
            )
        )
    if result.idle_delta is not None:
        delta = result.idle_delta
        seconds = delta.b.at - delta.a.at
        print(
            f"  idle {seconds:.0f} s: cross-AZ bytes per second "
            + ", ".join(f"{k} {delta.cross_az(k) / seconds:,.0f}" for k in KINDS)
        )
    if result.read_delta is not None:
        delta = result.read_delta
        fetched = delta.fetched
        print(
            "  read (one consumer per AZ, concurrently): fetched by the AZ's own brokers / read by its consumer, "
            "MiB: "
            + ", ".join(
                f"{az} {result.fetched_by_az[az] / MIB:.0f} / {r.bytes / MIB:.0f}" for az, r in result.reads.items()
            )
        )
        print(
            "  read: cross-AZ bytes per GiB fetched "
            + ", ".join(f"{k} {delta.cross_az(k) / fetched * GIB if fetched else float('nan'):,.0f}" for k in KINDS)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="full-load phase")
    parser.add_argument("--paced-seconds", type=float, default=10.0, help="half-load phase (0: none)")
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=5.0,
        help="no clients, after producing: the cross-AZ bytes the brokers exchange by themselves",
    )
    parser.add_argument("--read-seconds", type=float, default=20.0, help="limit of the read phase (0: none)")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--size", type=int, default=1024, help="record size in bytes")
    parser.add_argument("--linger-ms", type=int, default=100, help="producer linger.ms")
    args = parser.parse_args()
    started = time.monotonic()
    work_dir = tempfile.mkdtemp(prefix="shoal-bench-az-")
    try:
        with s3_endpoint(work_dir) as (proxy_port, moto_pid, proxy_pid):
            result = run(args, proxy_port, {"moto": moto_pid, "proxy": proxy_pid})
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    summary(result, args)
    print(f"  wall time {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
