"""`make bench`, third part: one broker, one diskless topic on S3 (moto behind a latency proxy).

Workload as in the classic benchmark (tests/bench/produce_consume.py): 1 KiB random
(incompressible) records, confluent-kafka producers with acks=all and idempotence, records
spread round-robin over the partitions. The broker runs with
`--object-store s3://shoal-bench/bench?endpoint=http://127.0.0.1:<proxy>&region=us-east-1`;
the proxy (tests/s3proxy.py) adds 20 ms to every PUT and 10 ms to every GET in front of a
moto S3 server, which costs 3-5 ms per small request by itself (~90 ms per 8 MiB PUT).

Producer tuning (PRODUCER, --partitions, --producers): a Produce request is answered only
after its WAL object is sealed (8 MiB or 250 ms), uploaded and committed, so each client
must keep many MiB in flight. librdkafka puts one partition in each ProduceRequest, allows
5 requests in flight per connection (the idempotent maximum) and, when idempotent, keeps one
request per partition in flight once batches hold 5 or more records (it compares in-flight
*records* with the 5-request window). So ingest needs partitions x batch size and several
connections: 32 partitions over 4 producers (8 partitions each; with fewer than 6 per
producer librdkafka busy-loops while waiting), 1 MB batches, linger.ms 100.

Phases, each measured with broker metrics (/metrics deltas) and /proc CPU counters:
 1. full load: --records as fast as the producers go (ingest MiB/s, PUTs per GiB and per s,
    broker CPU-s per GiB);
 2. half load: paced at half the full-load rate for --seconds, a tailing consumer reading
    along (produce p50/p99 from delivery reports; the tailing consumer's GETs per GiB);
 3. steady --e2e-rate records/s (200) for --seconds, twice: records round-robin over the
    partitions, then keyless records (librdkafka's sticky partitioner), with a tailing
    consumer (end to end: send time written in the record -> poll time in the consumer);
 4. idle 5 s (PUTs/s without load);
 5. broker restart (cold cache), a catch-up consumer reads everything from offset 0 (GETs
    per GiB, MiB/s, broker CPU-s per GiB out); then again after another restart with a
    "lockstep" consumer (max.partition.fetch.bytes 1 MiB, so all partitions advance together).

Not a test: no assertions, nothing runs it in CI. Record figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.moto_server import FAKE_AWS_ENV, start_moto, stop_process
from tests.s3proxy import running_s3proxy

from .produce_consume import CLK_TCK, cpu_seconds, peak_rss_mib, start_broker, stop_broker

BUCKET = "shoal-bench"
TOPIC = "bench-diskless"
DEFAULT_PARTITIONS = 32
DEFAULT_PRODUCERS = 4
PUT_DELAY_MS = 20
GET_DELAY_MS = 10
WAL_LINGER_MS = 250  # the broker default (the produce target assumes it; --broker-set is for experiments)

# A diskless deployment's producer (see the module docstring for why): 1 MB batches (the
# broker's message.max.bytes is 1 MiB), requests up to 16 MB, 5 in flight per connection.
PRODUCER = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 100,
    "batch.size": 1_000_000,
    "message.max.bytes": 16_000_000,
    "max.in.flight.requests.per.connection": 5,
    "queue.buffering.max.kbytes": 1_048_576,
    "queue.buffering.max.messages": 1_000_000,
    "sticky.partitioning.linger.ms": 100,  # keyless records: one partition per linger period
}
CONSUMER = {  # as in the classic benchmark
    "group.id": "bench-diskless",
    "enable.auto.commit": False,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 8_388_608,
}
LOCKSTEP_CONSUMER = {**CONSUMER, "max.partition.fetch.bytes": 1_048_576}

TARGETS = {
    "ingest": 64.0,  # MiB/s at full load
    "puts_per_gib": 130.0,  # at full load
    "puts_per_s": 4.0,  # at any load
    "produce_p99_ms": WAL_LINGER_MS + 250.0,  # at half load
    "e2e_p99_ms": 1000.0,
    "tail_gets_per_gib": 20.0,
}

PHASE_LIMIT_S = 600.0  # no phase runs longer than this, whatever the options say

# -- metrics and CPU ---------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    samples: Samples = {}
    for line in urllib.request.urlopen(url, timeout=10).read().decode().splitlines():
        match = _SAMPLE.match(line)
        if match and not line.startswith("#"):
            samples[(match.group(1), frozenset(_LABEL.findall(match.group(2) or "")))] = float(match.group(3))
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels match `labels` (a wanted value may be "a|b")."""
    result = 0.0
    for (sample_name, sample_labels), value in samples.items():
        if sample_name == name:
            have = dict(sample_labels)
            if all(have.get(key) in wanted.split("|") for key, wanted in labels.items()):
                result += value
    return result


def process_cpu(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    try:
        return cpu_seconds(pid)
    except (OSError, IndexError, ValueError):
        return float("nan")


def machine_busy_seconds() -> float:
    """CPU time spent by everything on the machine (all cores, /proc/stat minus idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / CLK_TCK


@dataclass
class Snapshot:
    at: float
    metrics: Samples
    cpu: dict[str, float]


@dataclass
class Delta:
    """What happened between two snapshots."""

    seconds: float
    before: Samples
    after: Samples
    cpu: dict[str, float]  # CPU seconds per process, plus "machine" (everything)

    def d(self, name: str, **labels: str) -> float:
        return total(self.after, name, **labels) - total(self.before, name, **labels)

    def mean_ms(self, histogram: str, **labels: str) -> float:
        count = self.d(f"{histogram}_count", **labels)
        return self.d(f"{histogram}_sum", **labels) / count * 1000 if count else float("nan")

    @property
    def puts(self) -> float:
        return self.d("shoal_object_store_requests_total", operation="put|put_if_absent")

    @property
    def gets(self) -> float:
        return self.d("shoal_object_store_requests_total", operation="get")

    @property
    def puts_per_s(self) -> float:
        return self.puts / self.seconds

    def share(self, who: str) -> float:
        """`who`'s CPU time over the phase's wall time (1.0 = one core busy)."""
        return self.cpu[who] / self.seconds

    def cpu_line(self) -> str:
        ours = [who for who in ("broker", "moto", "proxy", "client") if self.cpu.get(who, float("nan")) >= 0]
        parts = [f"{who} {self.share(who) * 100:.0f}%" for who in ours]
        others = self.cpu["machine"] - sum(self.cpu[who] for who in ours)
        parts.append(f"other processes {max(others, 0.0) / self.seconds * 100:.0f}%")
        return f"CPU (% of one core; 2 cores): {', '.join(parts)}"

    def wal_line(self) -> str:
        reasons = {
            r: self.d("shoal_wal_seals_total", reason=r)
            for r in ("size", "linger", "quiet", "backpressure", "shutdown")
        }
        objects = self.d("shoal_wal_object_bytes_count")
        mean = self.d("shoal_wal_object_bytes_sum") / objects / 2**20 if objects else float("nan")
        return (
            f"WAL objects {objects:.0f}, mean {mean:.2f} MiB (seals: "
            + ", ".join(f"{r} {n:.0f}" for r, n in reasons.items() if n)
            + f"); mean PUT {self.mean_ms('shoal_wal_upload_seconds'):.0f} ms, commit "
            f"{self.mean_ms('shoal_wal_commit_seconds'):.1f} ms, Produce request in the broker "
            f"{self.mean_ms('shoal_request_seconds', api='Produce'):.0f} ms; backpressure waits "
            f"{self.d('shoal_wal_backpressure_waits_total'):.0f}"
        )


@dataclass
class Probe:
    """Snapshots of the broker's metrics and of the CPU time of every process in play."""

    metrics_url: str
    pids: dict[str, int | None]

    def snap(self) -> Snapshot:
        cpu = {who: process_cpu(pid) for who, pid in self.pids.items()}
        cpu["client"] = process_cpu(os.getpid())
        cpu["machine"] = machine_busy_seconds()
        return Snapshot(time.perf_counter(), scrape(self.metrics_url), cpu)

    @staticmethod
    def delta(a: Snapshot, b: Snapshot) -> Delta:
        return Delta(b.at - a.at, a.metrics, b.metrics, {who: b.cpu[who] - a.cpu[who] for who in a.cpu})


# -- the S3 endpoint and the broker ------------------------------------------------------------


@contextlib.contextmanager
def s3_endpoint(work_dir: str) -> Iterator[tuple[int, int, int | None]]:
    """moto with the bench bucket behind tests/s3proxy.py: (proxy port, moto pid, proxy pid)."""
    with s3_endpoint_and_moto_port(work_dir) as (port, _moto_port, moto_pid, proxy_pid):
        yield port, moto_pid, proxy_pid


@contextlib.contextmanager
def s3_endpoint_and_moto_port(work_dir: str) -> Iterator[tuple[int, int, int, int | None]]:
    """As s3_endpoint, with moto's own port for clients that bypass the proxy:
    (proxy port, moto port, moto pid, proxy pid)."""
    moto, server = start_moto(os.path.join(work_dir, "moto.log"), bucket=BUCKET)
    try:
        with running_s3proxy(
            server.port,
            delay_ms={"PUT": PUT_DELAY_MS, "GET": GET_DELAY_MS},
            log_path=os.path.join(work_dir, "s3proxy.log"),
        ) as port:
            yield port, server.port, moto.pid, child_pid("tests.s3proxy")
    finally:
        stop_process(moto)


def child_pid(marker: str) -> int | None:
    """The pid of our child process whose command line contains `marker` (for its CPU time)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                if marker.encode() in (stat.parent / "cmdline").read_bytes():
                    return int(stat.parent.name)
    return None


def object_store_url(proxy_port: int) -> str:
    return f"s3://{BUCKET}/bench?endpoint=http://127.0.0.1:{proxy_port}&region=us-east-1"


def start_diskless_broker(data_dir: str, proxy_port: int, settings: list[str]) -> tuple[subprocess.Popen, str, str]:
    """A broker on the S3 object store (fake credentials); `settings` are KEY=VALUE overrides."""
    flags = [arg for setting in settings for arg in ("--set", setting)]
    return start_broker(data_dir, ["--object-store", object_store_url(proxy_port), *flags], env=FAKE_AWS_ENV)


# -- clients -----------------------------------------------------------------------------------


class ClientStats:
    """librdkafka's own view of where produce time goes, from its statistics (one window per
    second per producer): int_latency (record enqueued -> its ProduceRequest built),
    outbuf_latency (request built -> sent, i.e. waiting for an in-flight slot) and rtt
    (request sent -> response received, i.e. the broker plus loopback)."""

    def __init__(self) -> None:
        self.windows: list[dict[str, dict[str, int]]] = []
        self.last: dict[str, float] = {}

    def on_stats(self, text: str) -> None:
        for broker in json.loads(text)["brokers"].values():
            if broker["nodeid"] >= 0 and broker["rtt"]["cnt"]:
                self.windows.append({k: broker[k] for k in ("int_latency", "outbuf_latency", "rtt")})

    def line(self) -> str:
        """Median over the windows since the last call of each window's p50 and p99, in ms."""
        windows, self.windows = self.windows, []
        if not windows:
            return "librdkafka statistics: no windows"

        def median(key: str, pct: str) -> float:
            return sorted(w[key][pct] for w in windows)[len(windows) // 2] / 1000

        self.last = {
            f"{key}_{pct}": median(key, pct)
            for key in ("int_latency", "outbuf_latency", "rtt")
            for pct in ("p50", "p99")
        }
        return (
            "in librdkafka (median of 1 s windows, p50/p99 ms): record queued until its request is built "
            f"{median('int_latency', 'p50'):.0f}/{median('int_latency', 'p99'):.0f}, waiting for an "
            f"in-flight slot {median('outbuf_latency', 'p50'):.0f}/{median('outbuf_latency', 'p99'):.0f}, "
            f"request round trip {median('rtt', 'p50'):.0f}/{median('rtt', 'p99'):.0f}"
        )


def new_producers(bootstrap: str, count: int, partitions: int, stats: ClientStats) -> list[Producer]:
    """`count` producers (partition p goes through producer p % count), warmed up: connected,
    producer id fetched, one record per partition delivered."""
    producers = [
        Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"bench-{i}",
                **PRODUCER,
                "statistics.interval.ms": 1000,
                "stats_cb": stats.on_stats,
            }
        )
        for i in range(count)
    ]
    for partition in range(partitions):
        producers[partition % count].produce(TOPIC, b"warm-up", partition=partition)
    for producer in producers:
        if producer.flush(30):
            raise SystemExit("warm-up records not delivered within 30 s")
    return producers


def produce(
    producers: list[Producer],
    partitions: int,
    records: int,
    size: int,
    rate_rps: float = 0.0,
    timestamped: bool = False,
    keyless: bool = False,
) -> dict[str, float]:
    """Produce `records` records, as fast as possible or paced at `rate_rps`: round-robin over
    the partitions (partition p through producers[p % len]), or `keyless` (round-robin over
    the producers, librdkafka's sticky partitioner picks partitions). `timestamped` writes
    time.time() into each record's first 8 bytes. Returns elapsed seconds, records, bytes and
    delivery-report latency percentiles. Bounded by PHASE_LIMIT_S."""
    payload = bytearray(os.urandom(size))
    fixed = bytes(payload)
    latencies: list[float] = []
    failures: list[object] = []

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            failures.append(err)
        else:
            latencies.append(msg.latency())

    started = time.perf_counter()
    deadline = started + PHASE_LIMIT_S
    step = 1 if 0 < rate_rps < 1000 else 100
    sent = 0
    for i in range(records):
        if i % step == 0:
            if time.perf_counter() > deadline:
                break
            if rate_rps:
                ahead = started + i / rate_rps - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
            for producer in producers:
                producer.poll(0)
        if timestamped:
            struct.pack_into(">d", payload, 0, time.time())
        value = bytes(payload) if timestamped else fixed
        partition = i % partitions
        producer = producers[(i if keyless else partition) % len(producers)]
        for _attempt in range(10_000):  # a full queue for ~50 s at most
            try:
                if keyless:
                    producer.produce(TOPIC, value, on_delivery=on_delivery)
                else:
                    producer.produce(TOPIC, value, partition=partition, on_delivery=on_delivery)
                sent += 1
                break
            except BufferError:
                producer.poll(0.005)
        else:
            raise SystemExit("producer queue stayed full for 50 s")
    flush_deadline = time.perf_counter() + 120
    left = sum(p.flush(max(1.0, flush_deadline - time.perf_counter())) for p in producers)
    elapsed = time.perf_counter() - started
    if failures or left:
        raise SystemExit(f"{len(failures)} deliveries failed, {left} undelivered; first failure: {failures[:1]}")
    latencies.sort()
    return {
        "elapsed": elapsed,
        "records": sent,
        "bytes": sent * size,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))] if values else float("nan")


def end_offsets(bootstrap: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, **CONSUMER})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(partitions)}
    finally:
        consumer.close()


@dataclass
class Reader:
    """A consumer of all partitions from `start` offsets, in a thread: counts records and
    value bytes and, for timestamped records, the end-to-end latency of each."""

    bootstrap: str
    start: dict[int, int]
    timestamped: bool = False
    config: dict = field(default_factory=lambda: dict(CONSUMER))
    records: int = 0
    bytes: int = 0
    latencies: list[float] = field(default_factory=list)
    positions: dict[int, int] = field(default_factory=dict)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-reader", daemon=True)
        self.positions = dict(self.start)

    def begin(self) -> "Reader":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            consumer = Consumer({"bootstrap.servers": self.bootstrap, **self.config})
            consumer.assign([TopicPartition(TOPIC, p, o) for p, o in self.start.items()])
            deadline = time.monotonic() + 2 * PHASE_LIMIT_S
            while not self._stop.is_set() and time.monotonic() < deadline:
                for message in consumer.consume(10_000, 0.1):
                    if message.error() is not None:
                        continue
                    now = time.time()
                    value = message.value()
                    self.records += 1
                    self.bytes += len(value)
                    self.positions[message.partition()] = message.offset() + 1
                    if self.timestamped and len(value) >= 8:
                        self.latencies.append(now - struct.unpack_from(">d", value)[0])
            consumer.close()
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def caught_up(self, ends: dict[int, int]) -> bool:
        return all(self.positions.get(p, 0) >= end for p, end in ends.items())

    def finish(self, ends: dict[int, int], timeout_s: float) -> float:
        """Wait (bounded) until every partition reached `ends`, then stop; returns the wait."""
        started = time.perf_counter()
        deadline = started + timeout_s
        while not self.caught_up(ends) and time.perf_counter() < deadline and self.error is None:
            time.sleep(0.05)
        waited = time.perf_counter() - started
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise SystemExit(f"consumer failed: {self.error!r}")
        if not self.caught_up(ends):
            raise SystemExit(f"consumer reached {self.positions}, not {ends}, within {timeout_s:.0f} s")
        return waited


# -- the benchmark -----------------------------------------------------------------------------


def verdict(value: float, target: float, at_least: bool = False) -> str:
    met = value >= target if at_least else value <= target
    return f"target {'>=' if at_least else '<='} {target:g}: {'met' if met else 'MISSED'}"


def per_gib(count: float, nbytes: float) -> float:
    return count / (nbytes / 2**30) if nbytes else float("nan")


class Bench:
    def __init__(
        self, args: argparse.Namespace, data_dir: str, proxy_port: int, moto_pid: int, proxy_pid: int | None
    ) -> None:
        self.args = args
        self.partitions = args.partitions
        self.data_dir = data_dir
        self.proxy_port = proxy_port
        self.pids: dict[str, int | None] = {"moto": moto_pid, "proxy": proxy_pid}
        self.results: dict[str, float] = {}
        self.stats = ClientStats()

    def full_load(self, probe: Probe, producers: list[Producer]) -> float:
        s0 = probe.snap()
        full = produce(producers, self.partitions, self.args.records, self.args.size)
        d = probe.delta(s0, probe.snap())
        ingest = full["bytes"] / 2**20 / full["elapsed"]
        puts_per_gib = per_gib(d.puts, full["bytes"])
        print(f"\n[full load] {full['records']:,} records in {full['elapsed']:.1f} s")
        print(
            f"  ingest {ingest:.1f} MiB/s ({verdict(ingest, TARGETS['ingest'], at_least=True)}), "
            f"{full['records'] / full['elapsed']:,.0f} records/s; delivery p50 {full['p50_ms']:.0f} ms / p99 "
            f"{full['p99_ms']:.0f} ms (queueing in the saturated producers)"
        )
        print(
            f"  PUTs {d.puts:.0f}: {puts_per_gib:.1f} per GiB ({verdict(puts_per_gib, TARGETS['puts_per_gib'])}), "
            f"{d.puts_per_s:.1f} per s ({verdict(d.puts_per_s, TARGETS['puts_per_s'])})"
        )
        print(f"  {d.wal_line()}")
        print(f"  broker {d.cpu['broker'] / (full['bytes'] / 2**30):.2f} CPU-s/GiB in; {d.cpu_line()}")
        self.results.update(
            ingest=ingest,
            full_puts_per_gib=puts_per_gib,
            full_puts_per_s=d.puts_per_s,
            cpu_in=d.cpu["broker"] / (full["bytes"] / 2**30),
        )
        return ingest

    def half_load(self, probe: Probe, producers: list[Producer], bootstrap: str, ingest: float) -> None:
        rate_rps = ingest / 2 * 2**20 / self.args.size
        tail = Reader(bootstrap, end_offsets(bootstrap, self.partitions)).begin()
        time.sleep(1.0)  # assigned and long-polling at the end of the log
        self.stats.line()  # forget earlier windows
        s0 = probe.snap()
        half = produce(producers, self.partitions, int(rate_rps * self.args.seconds), self.args.size, rate_rps=rate_rps)
        lag = tail.finish(end_offsets(bootstrap, self.partitions), 120)
        d = probe.delta(s0, probe.snap())
        gets_per_gib = per_gib(d.gets, tail.bytes)
        within = d.d("shoal_request_seconds_bucket", api="Produce", le="0.5") / d.d(
            "shoal_request_seconds_count", api="Produce"
        )
        print(
            f"\n[half load] {half['records']:,} records paced at {ingest / 2:.1f} MiB/s "
            f"(achieved {half['bytes'] / 2**20 / half['elapsed']:.1f} MiB/s) for {half['elapsed']:.0f} s"
        )
        print(
            f"  produce (delivery report) p50 {half['p50_ms']:.0f} ms, p99 {half['p99_ms']:.0f} ms "
            f"({verdict(half['p99_ms'], TARGETS['produce_p99_ms'])}); in the broker: mean "
            f"{d.mean_ms('shoal_request_seconds', api='Produce'):.0f} ms, {within * 100:.1f}% of Produce "
            "requests answered within 0.5 s"
        )
        print(f"  {self.stats.line()}")
        self.results["half_rtt_p99"] = self.stats.last.get("rtt_p99", float("nan"))
        print(
            f"  PUTs {d.puts_per_s:.1f} per s ({verdict(d.puts_per_s, TARGETS['puts_per_s'])}), "
            f"{per_gib(d.puts, half['bytes']):.1f} per GiB"
        )
        print(
            f"  tailing consumer: {tail.records:,} records ({tail.bytes / 2**20:.0f} MiB), caught up {lag:.2f} s "
            f"after the last delivery; {d.gets:.0f} GETs = {gets_per_gib:.1f} per GiB consumed "
            f"({verdict(gets_per_gib, TARGETS['tail_gets_per_gib'])}); cache hits "
            f"{d.d('shoal_cache_requests_total', result='hit'):.0f}, misses "
            f"{d.d('shoal_cache_requests_total', result='miss'):.0f}"
        )
        print(f"  {d.wal_line()}")
        print(f"  {d.cpu_line()}")
        self.results.update(
            half_p50=half["p50_ms"],
            half_p99=half["p99_ms"],
            half_within=within,
            half_puts_per_s=d.puts_per_s,
            tail_gets_per_gib=gets_per_gib,
            half_rate=half["bytes"] / 2**20 / half["elapsed"],
        )

    def steady(self, probe: Probe, producers: list[Producer], bootstrap: str, keyless: bool) -> None:
        mode = "keyless" if keyless else "round-robin"
        tail = Reader(bootstrap, end_offsets(bootstrap, self.partitions), timestamped=True).begin()
        time.sleep(1.0)
        self.stats.line()
        s0 = probe.snap()
        low = produce(
            producers,
            self.partitions,
            int(self.args.e2e_rate * self.args.seconds),
            self.args.size,
            rate_rps=self.args.e2e_rate,
            timestamped=True,
            keyless=keyless,
        )
        tail.finish(end_offsets(bootstrap, self.partitions), 60)
        d = probe.delta(s0, probe.snap())
        tail.latencies.sort()
        p50, p99 = percentile(tail.latencies, 0.5) * 1000, percentile(tail.latencies, 0.99) * 1000
        print(
            f"\n[steady {self.args.e2e_rate:g} records/s, {mode}] {low['records']:,} records in {low['elapsed']:.0f} s"
        )
        print(
            f"  end to end p50 {p50:.0f} ms, p99 {p99:.0f} ms ({verdict(p99, TARGETS['e2e_p99_ms'])}); "
            f"produce p50 {low['p50_ms']:.0f} ms, p99 {low['p99_ms']:.0f} ms"
        )
        print(f"  {self.stats.line()}")
        print(f"  PUTs {d.puts_per_s:.2f} per s ({verdict(d.puts_per_s, TARGETS['puts_per_s'])}); GETs {d.gets:.0f}")
        print(f"  {d.wal_line()}")
        print(f"  {d.cpu_line()}")
        self.results.update({f"e2e_{mode}_p50": p50, f"e2e_{mode}_p99": p99, f"steady_{mode}_puts_per_s": d.puts_per_s})

    def idle(self, probe: Probe) -> None:
        s0 = probe.snap()
        time.sleep(5.0)
        d = probe.delta(s0, probe.snap())
        print(
            f"\n[idle 5 s] PUTs {d.puts_per_s:.2f} per s, GETs {d.gets:.0f}; broker CPU {d.share('broker') * 100:.1f}%"
        )
        self.results.update(idle_puts_per_s=d.puts_per_s)

    def catch_up(self, label: str, config: dict) -> None:
        """Restart the broker (cold cache) and read everything from offset 0."""
        proc, bootstrap, metrics_url = start_diskless_broker(self.data_dir, self.proxy_port, self.args.broker_set)
        try:
            probe = Probe(metrics_url, {"broker": proc.pid, **self.pids})
            ends = end_offsets(bootstrap, self.partitions)
            s0 = probe.snap()
            reader = Reader(bootstrap, {p: 0 for p in range(self.partitions)}, config=config).begin()
            reader.finish(ends, PHASE_LIMIT_S)
            d = probe.delta(s0, probe.snap())
            rss = peak_rss_mib(proc.pid)
        finally:
            stop_broker(proc)
        gib = reader.bytes / 2**30
        down = d.d("shoal_object_store_bytes_total", direction="down")
        print(
            f"\n[catch-up after a restart (cold cache), {label}] {reader.records:,} records "
            f"({reader.bytes / 2**20:.0f} MiB) from offset 0 in {d.seconds:.1f} s: "
            f"{reader.bytes / 2**20 / d.seconds:.1f} MiB/s"
        )
        print(
            f"  GETs {d.gets:.0f} = {d.gets / gib:.1f} per GiB consumed "
            f"(mean GET {down / max(d.gets, 1) / 2**20:.2f} "
            f"MiB, {down / reader.bytes:.2f}x the records downloaded); broker {d.cpu['broker'] / gib:.2f} CPU-s/GiB "
            f"out, peak RSS {rss:.0f} MiB"
        )
        print(f"  {d.cpu_line()}")
        self.results.update(
            {
                f"catchup_{label}_gets_per_gib": d.gets / gib,
                f"catchup_{label}_mib_s": reader.bytes / 2**20 / d.seconds,
                f"catchup_{label}_cpu_out": d.cpu["broker"] / gib,
                f"catchup_{label}_rss": rss,
            }
        )

    def run(self) -> None:
        args = self.args
        proc, bootstrap, metrics_url = start_diskless_broker(self.data_dir, self.proxy_port, args.broker_set)
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            topic = NewTopic(TOPIC, self.partitions, 1, config={"diskless.enable": "true"})
            admin.create_topics([topic])[TOPIC].result(30)
            del admin
            probe = Probe(metrics_url, {"broker": proc.pid, **self.pids})
            producers = new_producers(bootstrap, args.producers, self.partitions, self.stats)
            print(
                f"diskless topic, {self.partitions} partitions, {args.size} B random records; {args.producers} "
                f"confluent-kafka producers: {', '.join(f'{k}={v}' for k, v in PRODUCER.items())}"
            )
            print(
                f"object store: moto behind tests/s3proxy.py adding {PUT_DELAY_MS} ms per PUT, {GET_DELAY_MS} ms "
                "per GET; broker defaults (wal.buffer.max.bytes 8 MiB, wal.linger.ms 250, cache.max.bytes 256 MiB)"
                + (f" except {', '.join(args.broker_set)}" if args.broker_set else "")
            )
            ingest = self.full_load(probe, producers)
            self.half_load(probe, producers, bootstrap, ingest)
            self.steady(probe, producers, bootstrap, keyless=False)
            self.steady(probe, producers, bootstrap, keyless=True)
            self.idle(probe)
            del producers
            self.results["rss_produce"] = peak_rss_mib(proc.pid)
        finally:
            stop_broker(proc)
        self.catch_up("consumer as above", CONSUMER)
        self.catch_up("lockstep consumer", LOCKSTEP_CONSUMER)
        self.summary()

    def summary(self) -> None:
        r, t = self.results, TARGETS
        rows = [
            ("ingest at full load, MiB/s", f"{r['ingest']:.1f}", f">= {t['ingest']:g}"),
            ("PUTs per GiB at full load", f"{r['full_puts_per_gib']:.1f}", f"<= {t['puts_per_gib']:g}"),
            (
                "PUTs/s: full / half / 200 rec/s / idle",
                f"{r['full_puts_per_s']:.1f} / {r['half_puts_per_s']:.1f} / {r['steady_round-robin_puts_per_s']:.1f} / "
                f"{r['idle_puts_per_s']:.1f}",
                f"<= {t['puts_per_s']:g}",
            ),
            (
                "produce p50 / p99 at half load, ms",
                f"{r['half_p50']:.0f} / {r['half_p99']:.0f} (request RTT p99 {r['half_rtt_p99']:.0f})",
                f"p99 <= {t['produce_p99_ms']:g}",
            ),
            (
                "e2e p50 / p99 at 200 rec/s, round-robin, ms",
                f"{r['e2e_round-robin_p50']:.0f} / {r['e2e_round-robin_p99']:.0f}",
                f"p99 <= {t['e2e_p99_ms']:g}",
            ),
            (
                "e2e p50 / p99 at 200 rec/s, keyless, ms",
                f"{r['e2e_keyless_p50']:.0f} / {r['e2e_keyless_p99']:.0f}",
                f"p99 <= {t['e2e_p99_ms']:g}",
            ),
            ("GETs per GiB, tailing consumer", f"{r['tail_gets_per_gib']:.1f}", f"<= {t['tail_gets_per_gib']:g}"),
            (
                "GETs per GiB, catch-up (cold cache)",
                f"{r['catchup_consumer as above_gets_per_gib']:.0f} (lockstep consumer "
                f"{r['catchup_lockstep consumer_gets_per_gib']:.0f})",
                "no target",
            ),
            (
                "broker CPU-s/GiB in / out (catch-up)",
                f"{r['cpu_in']:.2f} / {r['catchup_consumer as above_cpu_out']:.2f}",
                "",
            ),
            (
                "broker peak RSS, MiB: produce / catch-up",
                f"{r['rss_produce']:.0f} / {r['catchup_consumer as above_rss']:.0f}",
                "",
            ),
        ]
        print("\nsummary (measured, target from the issue)")
        for name, value, target in rows:
            print(f"  {name:45} {value:>28}   {target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records of the full-load phase")
    parser.add_argument("--size", type=int, default=1024, help="record size in bytes (>= 8)")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the half-load and steady phases")
    parser.add_argument("--e2e-rate", type=float, default=200.0, help="records/s of the steady phases")
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument(
        "--producers",
        type=int,
        default=DEFAULT_PRODUCERS,
        help="producer instances (connections); partition p goes through producer p %% N",
    )
    parser.add_argument(
        "--broker-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker setting for experiments (repeatable); the documented figures use none",
    )
    args = parser.parse_args()
    if args.size < 8:
        parser.error("--size must be at least 8 (the steady phases write a timestamp)")
    work_dir = tempfile.mkdtemp(prefix="shoal-bench-diskless-")
    data_dir = os.path.join(work_dir, "data")
    os.mkdir(data_dir)
    try:
        with s3_endpoint(work_dir) as (proxy_port, moto_pid, proxy_pid):
            Bench(args, data_dir, proxy_port, moto_pid, proxy_pid).run()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
