"""`make bench`, tiering part (issue 15): catch-up reads from tiered segments against WAL objects.

One broker setup on S3 (moto behind tests/s3proxy.py: 20 ms per PUT, 10 ms per GET, as
tests/bench/diskless.py), broker settings `tiering.interval.ms=2000` and
`log.retention.check.interval.ms=2000` (plus any --broker-set), Spark local mode as the
broker's subprocess (`python -m spark_jobs.assemble_segments`, `tiering.spark.master`
local[2]). Each phase gets its own data dir (a fresh broker, the same settings and S3
endpoint) with one diskless topic of --partitions partitions, and the same workload: --mib MiB
of 1 KiB random records spread round-robin over the partitions by one confluent-kafka
producer with librdkafka's default settings (acks=all, linger.ms 5, batch.size 1 MB, no
idempotence), through diskless.produce. Every catch-up read is done by one confluent-kafka
consumer with default fetch settings (fetch.max.bytes 50 MiB, max.partition.fetch.bytes
1 MiB; a group.id, auto commit off: offsets are assigned, not committed), reading every
partition from offset 0 up to the end of the produced records, after a broker restart (SIGTERM,
same data dir): a cold object cache, as the WAL path would otherwise serve most of the data
from the cache its produce path wrote through.

Phases:
 1. wal: a topic without tiering. Produce (every delivery acknowledged = committed), stop the
    broker, count the partition-log entries (below), restart, catch-up read: MiB/s, GETs per
    GiB (the broker's `shoal_object_store_requests_total{operation="get"}`, delta over the
    read), broker CPU-seconds per GiB (/proc/<broker pid>/stat).
 2. tiered: a topic with `remote.storage.enable=true` and `segment.bytes` = --segment-mib
    (counted in batch bytes on a diskless topic). It is created holding its data locally
    (`local.retention.ms=3600000`) so that tiering does not compete with the producer for the
    two cores. Produce, stop the broker, count entries (as in phase 1), restart; then
    `segment.ms=1000` rolls each partition's active segment (the bench watches the new
    segment files appear), then one IncrementalAlterConfigs removes the `segment.ms` override and sets `local.retention.ms=1000`, so every produced record lies in
    a sealed segment ready to offload and the marker entries tiering appends land in a fresh
    active segment that never rolls. The bench then waits (`shoal tiering status`, bounded by
    --tier-timeout) until every partition's tiered end and local log start have reached the end
    of the produced records: all of it tiered and the superseded local entries dropped. Job
    figures: jobs and segments (`shoal_tiering_jobs_total`, `shoal_tiering_segments_total`),
    job wall seconds (`shoal_tiering_job_seconds` sum/count: Spark start included), MiB/s
    (`shoal_tiering_bytes_total` / job seconds), and CPU-seconds per GiB of the job's whole
    process tree (the Python driver, its Spark JVM, the Python workers): every 0.1 s the bench
    reads utime+stime from /proc of every descendant of the broker (kept by pid and start
    time, so a JVM orphaned when its driver exits is still counted). The broker's
    cutime+cstime is printed beside it: it only counts children the broker waited for, and
    PySpark never waits for the JVM it starts, so it undercounts. The job's own S3 requests
    are the proxy's counters minus the broker's. Then stop, count entries, restart, and the
    same catch-up read (goal from the issue: at least 50% fewer GETs per GiB than phase 1,
    aim <= 150), plus `shoal_tiered_read_bytes_total`.

Partition-log entries: the partition logs have no metric, so after the broker stopped each
partition directory of the topic is copied and opened with
broker.log.partition_log.PartitionLog, and its entries (from the log start) are counted by
kind (COORDINATES: one per batch in a WAL object; REMOTE_SEGMENT: tiering markers), per GiB
produced; the bytes of the partition's `.log` files are reported beside them.

--segment-mib defaults to 8, not 64: the default --mib 256 over 8 partitions is 32 MiB per
partition, so 64 MiB segments would give one segment per partition (only the rolled tail);
8 MiB gives five (a segment rolls before its batches would pass 8 MiB: ~6.5 MiB each). Options: --only wal|tiered, --broker-set KEY=VALUE (both phases),
--consumer-set KEY=VALUE (the catch-up consumer; experiments only).

Not a test: no assertions, nothing runs it in CI. Record figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from broker.admin_client import AdminClient as ShoalAdmin
from broker.clock import SystemClock
from broker.log.config import LogConfig
from broker.log.entry import EntryKind
from broker.log.partition_log import PartitionLog
from tests.s3proxy import s3proxy_stats

from . import diskless
from .diskless import (
    PHASE_LIMIT_S,
    Probe,
    Reader,
    end_offsets,
    per_gib,
    produce,
    s3_endpoint_and_moto_port,
    start_diskless_broker,
)
from .produce_consume import CLK_TCK, stop_broker

TOPIC = diskless.TOPIC  # what diskless.produce, end_offsets and Reader read and write
BASE_SETTINGS = ["tiering.interval.ms=2000", "log.retention.check.interval.ms=2000"]
HOLD_MS = 3_600_000  # local.retention.ms while producing: nothing is ready to offload yet
LOCAL_RETENTION_MS = 1000
CONSUMER = {"group.id": "bench-tiering", "enable.auto.commit": False}  # fetch settings: the defaults
SAMPLE_S = 0.1


# -- CPU of the broker's child processes -------------------------------------------------------


def _stat(pid: int | str) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (fields[1] = ppid)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def reaped_children_cpu(pid: int) -> float:
    """cutime + cstime: CPU of the children `pid` waited for (and of theirs, transitively)."""
    fields = _stat(pid)
    return (int(fields[13]) + int(fields[14])) / CLK_TCK


class TreeCpu(threading.Thread):
    """Every SAMPLE_S, utime+stime of each process descended from `root` (not `root` itself),
    remembered by (pid, start time) so that a process stays counted once it exits or is
    reparented; `seconds()` is the CPU used since the first sample. A process loses at most
    its last SAMPLE_S."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True, name="bench-tree-cpu")
        self.root = root
        self.seen: dict[tuple[int, str], float] = {}
        self.peak_processes = 0
        self.baseline = 0.0
        self.stop = threading.Event()
        self._sample()
        self.baseline = sum(self.seen.values())

    def _sample(self) -> None:
        procs: dict[int, tuple[int, str, float]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                procs[int(stat.parent.name)] = (
                    int(fields[1]),
                    fields[19],
                    (int(fields[11]) + int(fields[12])) / CLK_TCK,
                )
            except (OSError, IndexError, ValueError):
                continue
        family = {self.root}
        grew = True
        while grew:
            grew = False
            for pid, (ppid, started, _cpu) in procs.items():
                if pid not in family and (ppid in family or (pid, started) in self.seen):
                    family.add(pid)
                    grew = True
        family.discard(self.root)
        self.peak_processes = max(self.peak_processes, len(family))
        for pid in family:
            _ppid, started, cpu = procs[pid]
            self.seen[(pid, started)] = cpu

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            self._sample()

    def seconds(self) -> float:
        self.stop.set()
        self.join(10)
        self._sample()
        return sum(self.seen.values()) - self.baseline


# -- partition logs ----------------------------------------------------------------------------


@dataclass
class LogCensus:
    coordinates: int = 0
    markers: int = 0
    other: int = 0
    log_file_bytes: int = 0


def count_entries(data_dir: str, partitions: int, work: str) -> LogCensus:
    """Entries of the topic's partition logs by kind, read from copies (the broker is stopped:
    opening a log may rewrite its checkpoint and indexes, so the broker's own files stay as
    they are)."""
    census = LogCensus()
    for p in range(partitions):
        source = Path(data_dir) / "logs" / f"{TOPIC}-{p}"
        census.log_file_bytes += sum(f.stat().st_size for f in source.glob("*.log"))
        copy = Path(work) / f"census-{p}"
        shutil.copytree(source, copy)
        log = PartitionLog.open(copy, LogConfig(size_by_batch_bytes=True), SystemClock())
        try:
            for entry in log.iter_entries(0):
                if entry.kind == EntryKind.COORDINATES:
                    census.coordinates += 1
                elif entry.kind == EntryKind.REMOTE_SEGMENT:
                    census.markers += 1
                else:
                    census.other += 1
        finally:
            log.close()
            shutil.rmtree(copy, ignore_errors=True)
    return census


# -- the benchmark -----------------------------------------------------------------------------


@dataclass
class PhaseResult:
    produced_bytes: int = 0
    produce_mib_s: float = float("nan")
    census_before: LogCensus = field(default_factory=LogCensus)  # after the produce
    census: LogCensus = field(default_factory=LogCensus)  # before the catch-up read
    read: dict[str, float] = field(default_factory=dict)
    job: dict[str, float] = field(default_factory=dict)


def alter_topic(bootstrap: str, changes: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs on the topic: SET each value, DELETE each None."""
    entries = [
        ConfigEntry(
            name,
            value,
            incremental_operation=AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET,
        )
        for name, value in changes.items()
    ]
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def tails_sealed(data_dir: str, data_end: dict[int, int]) -> bool:
    """Each partition's newest segment file is empty and starts at the end of the records."""
    for p, end in data_end.items():
        files = sorted((Path(data_dir) / "logs" / f"{TOPIC}-{p}").glob("*.log"))
        if not files or int(files[-1].stem) != end or files[-1].stat().st_size != 0:
            return False
    return True


class Bench:
    def __init__(self, args: argparse.Namespace, work: str, proxy_port: int, moto_pid: int, proxy_pid: int | None):
        self.args = args
        self.work = work
        self.proxy_port = proxy_port
        self.pids: dict[str, int | None] = {"moto": moto_pid, "proxy": proxy_pid}
        self.settings = BASE_SETTINGS + list(args.broker_set)
        self.consumer = {**CONSUMER, **dict(s.split("=", 1) for s in args.consumer_set)}
        self.records = args.mib * 2**20 // args.size

    def phase(self, kind: str) -> PhaseResult:
        args = self.args
        result = PhaseResult()
        data_dir = os.path.join(self.work, kind)
        config = {"diskless.enable": "true"}
        if kind == "tiered":
            config |= {
                "remote.storage.enable": "true",
                "segment.bytes": str(args.segment_mib << 20),
                "local.retention.ms": str(HOLD_MS),
            }
        proc, bootstrap, metrics_url = start_diskless_broker(data_dir, self.proxy_port, self.settings)
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(TOPIC, args.partitions, 1, config=config)])[TOPIC].result(30)
            del admin  # its connection would log reconnect attempts once the broker stops
            probe = Probe(metrics_url, {"broker": proc.pid, **self.pids})
            s0 = probe.snap()
            producer = Producer({"bootstrap.servers": bootstrap})
            sent = produce([producer], args.partitions, self.records, args.size)
            del producer
            d = probe.delta(s0, probe.snap())
            data_end = end_offsets(bootstrap, args.partitions)
        finally:
            stop_broker(proc)
        result.produced_bytes = int(sent["bytes"])
        result.produce_mib_s = sent["bytes"] / 2**20 / sent["elapsed"]
        objects = d.d("shoal_wal_objects_total", outcome="committed")
        mean = d.d("shoal_wal_object_bytes_sum") / objects / 2**20 if objects else float("nan")
        print(
            f"\n[{kind}] produced {sent['records']:,} records ({sent['bytes'] / 2**20:.0f} MiB) in "
            f"{sent['elapsed']:.1f} s: {result.produce_mib_s:.1f} MiB/s, {objects:.0f} WAL objects "
            f"(mean {mean:.2f} MiB); topic config {config}"
        )
        result.census_before = self.census(data_dir, result, "after the produce")
        result.census = result.census_before
        if kind == "tiered":
            proc, bootstrap, metrics_url = start_diskless_broker(data_dir, self.proxy_port, self.settings)
            try:
                result.job = self.tier(proc.pid, bootstrap, metrics_url, data_dir, data_end)
            finally:
                stop_broker(proc)
            result.census = self.census(data_dir, result, "after tiering")
        result.read = self.catch_up(kind, data_dir, data_end)
        return result

    def census(self, data_dir: str, result: PhaseResult, when: str) -> LogCensus:
        c = count_entries(data_dir, self.args.partitions, self.work)
        print(
            f"  partition logs {when} (broker stopped): {c.coordinates:,} coordinate entries "
            f"({per_gib(c.coordinates, result.produced_bytes):,.0f} per GiB produced), {c.markers} tiering markers, "
            f"{c.other} other; .log files {c.log_file_bytes / 2**20:.2f} MiB "
            f"({per_gib(c.log_file_bytes, result.produced_bytes) / 2**20:.2f} MiB per GiB)"
        )
        return c

    def tier(
        self, broker_pid: int, bootstrap: str, metrics_url: str, data_dir: str, data_end: dict[int, int]
    ) -> dict[str, float]:
        """Seal the active segments, start offloading, wait until everything is tiered."""
        alter_topic(bootstrap, {"segment.ms": "1000"})
        deadline = time.perf_counter() + 60
        while not tails_sealed(data_dir, data_end) and time.perf_counter() < deadline:
            time.sleep(0.1)
        sealed = tails_sealed(data_dir, data_end)
        probe = Probe(metrics_url, {"broker": broker_pid, **self.pids})
        tree = TreeCpu(broker_pid)
        reaped0 = reaped_children_cpu(broker_pid)
        proxy0 = s3proxy_stats(self.proxy_port)["requests"]
        s0 = probe.snap()
        tree.start()
        alter_topic(bootstrap, {"segment.ms": None, "local.retention.ms": str(LOCAL_RETENTION_MS)})
        print(
            f"  active segments {'rolled' if sealed else 'NOT all rolled within 60 s'} (segment.ms=1000, then "
            f"removed); local.retention.ms={LOCAL_RETENTION_MS}: tiering starts"
        )
        shoal = ShoalAdmin([("127.0.0.1", int(bootstrap.rsplit(":", 1)[1]))], timeout_s=60)
        deadline = time.perf_counter() + self.args.tier_timeout
        status: dict = {}
        done = False
        while time.perf_counter() < deadline:
            status = shoal.call("tiering.status", {"topic": TOPIC})
            parts = {s["partition"]: s for s in status["partitions"]}
            done = len(parts) == len(data_end) and all(
                parts[p]["tiered_end"] >= end and parts[p]["local_start"] >= end for p, end in data_end.items()
            )
            if done:
                break
            time.sleep(1.0)
        s1 = probe.snap()
        tree_cpu = tree.seconds()
        reaped = reaped_children_cpu(broker_pid) - reaped0
        proxy1 = s3proxy_stats(self.proxy_port)["requests"]
        d = probe.delta(s0, s1)
        if not done:
            print(f"  NOT everything tiered within {self.args.tier_timeout:.0f} s; last status: {status}")
        jobs_ok, jobs_failed = (
            d.d("shoal_tiering_jobs_total", outcome="ok"),
            d.d("shoal_tiering_jobs_total", outcome="failed"),
        )
        job_s = d.d("shoal_tiering_job_seconds_sum")
        job_n = d.d("shoal_tiering_job_seconds_count")
        tiered = d.d("shoal_tiering_bytes_total")
        segments = d.d("shoal_tiering_segments_total", event="committed")
        broker_gets = d.gets
        broker_puts = d.puts
        job_gets = proxy1.get("GET", 0) - proxy0.get("GET", 0) - broker_gets
        job_puts = proxy1.get("PUT", 0) - proxy0.get("PUT", 0) - broker_puts
        tgib = tiered / 2**30
        print(
            f"  {'all' if done else 'NOT all'} records tiered and dropped locally {d.seconds:.1f} s after the "
            f"config change: {segments:.0f} segments committed ({tiered / 2**20:.0f} MiB), "
            f"jobs ok {jobs_ok:.0f} / failed {jobs_failed:.0f}"
        )
        print(
            f"  job wall time {job_s:.1f} s over {job_n:.0f} job(s) (mean {job_s / max(job_n, 1):.1f} s, Spark start "
            f"included): {tiered / 2**20 / job_s if job_s else float('nan'):.1f} MiB/s"
        )
        print(
            f"  job process tree CPU {tree_cpu:.1f} s = {tree_cpu / tgib if tgib else float('nan'):.1f} CPU-s/GiB "
            f"(up to {tree.peak_processes} processes); the broker's cutime+cstime (children it waited for) "
            f"grew {reaped:.1f} s; broker's own CPU {d.cpu['broker']:.1f} s"
        )
        print(
            f"  job's S3 requests (proxy minus broker): {job_gets:.0f} GETs, {job_puts:.0f} PUTs; the broker's: "
            f"{broker_gets:.0f} GETs, {broker_puts:.0f} PUTs"
        )
        print(f"  {d.cpu_line()}")
        return {
            "done": float(done),
            "elapsed": d.seconds,
            "segments": segments,
            "jobs_ok": jobs_ok,
            "jobs_failed": jobs_failed,
            "job_s": job_s,
            "job_n": job_n,
            "tiered_bytes": tiered,
            "mib_s": tiered / 2**20 / job_s if job_s else float("nan"),
            "tree_cpu": tree_cpu,
            "reaped_cpu": reaped,
            "cpu_per_gib": tree_cpu / tgib if tgib else float("nan"),
            "job_gets": job_gets,
            "job_puts": job_puts,
        }

    def catch_up(self, kind: str, data_dir: str, data_end: dict[int, int]) -> dict[str, float]:
        """Restart the broker (cold cache) and read every produced record from offset 0."""
        proc, bootstrap, metrics_url = start_diskless_broker(data_dir, self.proxy_port, self.settings)
        try:
            probe = Probe(metrics_url, {"broker": proc.pid, **self.pids})
            s0 = probe.snap()
            reader = Reader(bootstrap, {p: 0 for p in data_end}, config=self.consumer).begin()
            reader.finish(data_end, PHASE_LIMIT_S)
            d = probe.delta(s0, probe.snap())
        finally:
            stop_broker(proc)
        gib = reader.bytes / 2**30
        down = d.d("shoal_object_store_bytes_total", direction="down")
        tiered_down = d.d("shoal_tiered_read_bytes_total")
        result = {
            "mib_s": reader.bytes / 2**20 / d.seconds,
            "gets": d.gets,
            "gets_per_gib": d.gets / gib,
            "mean_get_mib": down / max(d.gets, 1) / 2**20,
            "down_ratio": down / reader.bytes,
            "tiered_share": tiered_down / down if down else 0.0,
            "cpu_per_gib": d.cpu["broker"] / gib,
        }
        print(
            f"  catch-up after a restart (cold cache): {reader.records:,} records ({reader.bytes / 2**20:.0f} MiB) "
            f"from offset 0 in {d.seconds:.1f} s: {result['mib_s']:.1f} MiB/s"
        )
        print(
            f"  GETs {d.gets:.0f} = {result['gets_per_gib']:.1f} per GiB (mean GET {result['mean_get_mib']:.2f} MiB, "
            f"{result['down_ratio']:.2f}x the records downloaded, {tiered_down / 2**20:.0f} MiB of it from tiered "
            f"segments); cache hits {d.d('shoal_cache_requests_total', result='hit'):.0f}, misses "
            f"{d.d('shoal_cache_requests_total', result='miss'):.0f}; broker {result['cpu_per_gib']:.2f} CPU-s/GiB"
        )
        print(f"  {d.cpu_line()}")
        return result

    def run(self) -> None:
        args = self.args
        print(
            f"{args.mib} MiB of {args.size} B random records, {args.partitions} partitions, one default "
            f"confluent-kafka producer; catch-up consumer {self.consumer} (other settings: defaults); broker "
            f"settings {', '.join(self.settings)}; moto behind tests/s3proxy.py (20 ms per PUT, 10 ms per GET)"
        )
        results = {kind: self.phase(kind) for kind in (args.only or ["wal", "tiered"])}
        self.summary(results)

    def summary(self, results: dict[str, PhaseResult]) -> None:
        wal, tiered = results.get("wal"), results.get("tiered")

        def both(fmt: str, value: Callable[[PhaseResult], object]) -> tuple[str, str]:
            wal_cell = fmt.format(value(wal)) if wal is not None else "-"
            return wal_cell, fmt.format(value(tiered)) if tiered is not None else "-"

        rows = [
            ("produce (one default producer), MiB/s", *both("{:.1f}", lambda r: r.produce_mib_s)),
            ("catch-up read, MiB/s", *both("{:.1f}", lambda r: r.read["mib_s"])),
            ("GETs per GiB read", *both("{:.0f}", lambda r: r.read["gets_per_gib"])),
            ("mean GET, MiB", *both("{:.2f}", lambda r: r.read["mean_get_mib"])),
            ("bytes downloaded / bytes read", *both("{:.2f}", lambda r: r.read["down_ratio"])),
            ("broker CPU-s per GiB read", *both("{:.2f}", lambda r: r.read["cpu_per_gib"])),
            (
                "coordinate entries per GiB: produced / at read",
                *both(
                    "{}",
                    lambda r: (
                        f"{per_gib(r.census_before.coordinates, r.produced_bytes):,.0f} / "
                        f"{per_gib(r.census.coordinates, r.produced_bytes):,.0f}"
                    ),
                ),
            ),
            ("tiering marker entries (all partitions)", *both("{}", lambda r: r.census.markers)),
            (
                ".log files, MiB per GiB: produced / at read",
                *both(
                    "{}",
                    lambda r: (
                        f"{per_gib(r.census_before.log_file_bytes, r.produced_bytes) / 2**20:.2f} / "
                        f"{per_gib(r.census.log_file_bytes, r.produced_bytes) / 2**20:.2f}"
                    ),
                ),
            ),
        ]
        if tiered is not None and tiered.job:
            j = tiered.job
            rows += [
                (
                    "tiering: segments committed / jobs ok, failed",
                    "-",
                    f"{j['segments']:.0f} / {j['jobs_ok']:.0f}, {j['jobs_failed']:.0f}",
                ),
                ("tiering: job wall seconds (sum / jobs)", "-", f"{j['job_s']:.1f} / {j['job_n']:.0f}"),
                ("tiering: job MiB/s (tiered bytes / job s)", "-", f"{j['mib_s']:.1f}"),
                (
                    "tiering: job CPU-s per GiB (process tree)",
                    "-",
                    f"{j['cpu_per_gib']:.1f} ({j['tree_cpu']:.1f} s; cutime {j['reaped_cpu']:.1f} s)",
                ),
                ("tiering: job's GETs / PUTs", "-", f"{j['job_gets']:.0f} / {j['job_puts']:.0f}"),
            ]
        print("\nsummary                                               WAL objects     tiered segments")
        for name, a, b in rows:
            print(f"  {name:50} {a:>14}   {b:>18}")
        if wal is not None and tiered is not None:
            w, t = wal.read["gets_per_gib"], tiered.read["gets_per_gib"]
            ratio = t / w if w else float("nan")
            print(
                f"  GETs per GiB, tiered / WAL: {ratio:.2f}x (goal <= 0.50x: {'met' if ratio <= 0.5 else 'MISSED'}; "
                f"aim <= 150 per GiB: {'met' if t <= 150 else 'MISSED'})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB produced in each phase")
    parser.add_argument("--size", type=int, default=1024, help="record size in bytes")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--segment-mib", type=int, default=8, help="segment.bytes of the tiered topic, in MiB")
    parser.add_argument("--only", choices=["wal", "tiered"], action="append", help="default: both, in that order")
    parser.add_argument("--tier-timeout", type=float, default=600.0, help="seconds to wait for the tiering")
    parser.add_argument(
        "--broker-set", action="append", default=[], metavar="KEY=VALUE", help="extra broker setting (repeatable)"
    )
    parser.add_argument(
        "--consumer-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="catch-up consumer setting for experiments (repeatable); the documented figures use none",
    )
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="shoal-bench-tiering-")
    started = time.perf_counter()
    try:
        with s3_endpoint_and_moto_port(work) as (proxy_port, _moto_port, moto_pid, proxy_pid):
            Bench(args, work, proxy_port, moto_pid, proxy_pid).run()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        print(f"\nbenchmark ran {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
