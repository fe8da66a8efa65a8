"""`make bench`, WAL file manager part: what garbage collection costs and how fast it drains.

One broker on S3 (moto behind the latency proxy, as tests/bench/diskless.py), one diskless
topic with `retention.ms=120000` (and `segment.ms=10000`, so retention has segments to drop
at that granularity; Kafka's default of 7 days would keep a whole week's segment), the
broker checking retention every 10 s (`log.retention.check.interval.ms`; Kafka's 5 min
default would dominate a 2-minute retention). The producers of the diskless benchmark.

Phases:
 1. steady load, paced at --rate MiB/s for --seconds, GC with its defaults: every 10 s the
    broker's metrics give bytes stored (`shoal_walfiles_bytes`, the manager's last listing)
    and bytes retained (`shoal_walfiles_referenced_bytes`: the batch bytes the logs keep);
    the ratio at steady state (after retention + 2 cycles + grace), and the LIST, GET
    (no consumer runs: every GET is an index read) and DeleteObjects calls per hour;
 2. the same load with `wal.file.manager.enable=false` for --compare-seconds: the broker's
    CPU without GC (phase 1 minus this = GC's share);
 3. deletion capacity: --backlog objects (default 100,000, tiny, created a day ago) put in
    the broker's WAL prefix (in its directory for the file store, with boto3 for S3), then
    the time until the manager has deleted them all, once on the embedded default's file
    store (the manager's own capacity) and once on moto (moto's DeleteObjects and LIST set it).
Extra KEY=VALUE settings (--broker-set) apply to phases 1 and 3, e.g. a shorter grace.

Not a test: no assertions, nothing runs it in CI. Record figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import tempfile
import threading
import time

from confluent_kafka.admin import AdminClient, NewTopic

from walfiles.keys import format_wal_key

from .diskless import (
    BUCKET,
    DEFAULT_PARTITIONS,
    DEFAULT_PRODUCERS,
    TOPIC,
    ClientStats,
    Probe,
    new_producers,
    produce,
    s3_endpoint_and_moto_port,
    start_diskless_broker,
    total,
)
from .produce_consume import start_broker, stop_broker

RETENTION_MS = 120_000
BASE_SETTINGS = ["log.retention.check.interval.ms=10000"]
SAMPLE_S = 10.0
CHUNK_S = 60.0  # produce() calls are bounded; a long phase is a series of these


def create_topic(bootstrap: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"retention.ms": str(RETENTION_MS), "segment.ms": "10000"}
    admin.create_topics([NewTopic(TOPIC, partitions, 1, config=configs)])[TOPIC].result(30)


def steady_load(bootstrap: str, args: argparse.Namespace, seconds: float) -> float:
    """Paced produce for `seconds`; returns MiB/s achieved."""
    producers = new_producers(bootstrap, DEFAULT_PRODUCERS, args.partitions, ClientStats())
    rate_rps = args.rate * 2**20 / args.size
    started = time.perf_counter()
    sent = 0
    while time.perf_counter() - started < seconds:
        chunk = min(CHUNK_S, seconds - (time.perf_counter() - started))
        result = produce(producers, args.partitions, int(rate_rps * chunk), args.size, rate_rps=rate_rps)
        sent += int(result["bytes"])
    return sent / 2**20 / (time.perf_counter() - started)


class Sampler(threading.Thread):
    """Every SAMPLE_S: (seconds since start, stored bytes, retained bytes, objects)."""

    def __init__(self, probe: Probe) -> None:
        super().__init__(daemon=True)
        self.probe = probe
        self.samples: list[tuple[float, float, float, float]] = []
        self.stop = threading.Event()
        self.started = time.perf_counter()

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            metrics = self.probe.snap().metrics
            self.samples.append(
                (
                    time.perf_counter() - self.started,
                    total(metrics, "shoal_walfiles_bytes"),
                    total(metrics, "shoal_walfiles_referenced_bytes"),
                    total(metrics, "shoal_walfiles_objects"),
                )
            )


def phase_steady(args: argparse.Namespace, proxy_port: int, pids: dict, work: str, gc: bool) -> None:
    data_dir = os.path.join(work, f"steady-{gc}")
    settings = BASE_SETTINGS + (list(args.broker_set) if gc else ["wal.file.manager.enable=false"])
    proc, bootstrap, metrics_url = start_diskless_broker(data_dir, proxy_port, settings)
    try:
        create_topic(bootstrap, args.partitions)
        probe = Probe(metrics_url, {"broker": proc.pid, **pids})
        sampler = Sampler(probe)
        before = probe.snap()
        sampler.start()
        seconds = args.seconds if gc else args.compare_seconds
        achieved = steady_load(bootstrap, args, seconds)
        after = probe.snap()
        sampler.stop.set()
        delta = Probe.delta(before, after)
        hours = delta.seconds / 3600
        label = "GC on (defaults" + (", " + ", ".join(args.broker_set) if args.broker_set else "") + ")"
        print(f"\n== steady load, {label if gc else 'GC off'}: {achieved:.1f} MiB/s for {delta.seconds:.0f} s")
        print(f"   broker CPU {delta.share('broker') * 100:.0f}% of one core; {delta.cpu_line()}")
        if not gc:
            return
        warm = RETENTION_MS / 1000 + 90
        steady = [(s, r, o) for t, s, r, o in sampler.samples if t >= warm and r > 0]
        for t, s, r, o in sampler.samples[:: max(1, len(sampler.samples) // 20)]:
            print(f"   t={t:5.0f}s stored {s / 2**20:8.1f} MiB, retained {r / 2**20:8.1f} MiB, objects {o:.0f}")
        if steady:
            ratios = sorted(s / r for s, r, _o in steady)
            print(
                f"   stored / retained at steady state (t >= {warm:.0f} s, {len(ratios)} samples): "
                f"median {ratios[len(ratios) // 2]:.3f}, max {ratios[-1]:.3f}"
            )
        ops = {
            op: delta.d("shoal_object_store_requests_total", operation=op) / hours
            for op in ("list", "get", "delete_many", "put_if_absent")
        }
        deleted = delta.d("shoal_walfiles_deleted_objects_total")
        print(
            f"   GC requests per hour: LIST {ops['list']:.0f}, GET (index reads) {ops['get']:.0f}, "
            f"DeleteObjects {ops['delete_many']:.0f} (for {deleted / hours:.0f} objects deleted per hour; "
            f"PUTs per hour {ops['put_if_absent']:.0f}); index reads "
            f"{delta.d('shoal_walfiles_index_reads_total'):.0f}; cycles "
            f"{delta.d('shoal_walfiles_cycles_total'):.0f}"
        )
    finally:
        stop_broker(proc)


def phase_backlog(args: argparse.Namespace, proxy_port: int, moto_port: int, work: str, store: str) -> None:
    """The manager's own loop is slowed to one cycle an hour: cycles are run back to back
    with the admin API, and only those after the grace period (the deleting ones) timed.
    `store`: "s3" (moto behind the proxy) or "file" (the embedded default's directory)."""
    import boto3

    data_dir = os.path.join(work, f"backlog-{store}")
    settings = BASE_SETTINGS + ["wal.file.manager.interval.ms=3600000", *args.broker_set]
    if store == "s3":
        proc, bootstrap, metrics_url = start_diskless_broker(data_dir, proxy_port, settings)
    else:
        proc, bootstrap, metrics_url = start_broker(data_dir, [arg for s in settings for arg in ("--set", s)])
    try:
        cluster_id = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).cluster_id
        created = int(time.time() * 1000) - 86_400_000
        ids = [format_wal_key("", cluster_id, created + i // 100, 99, i) for i in range(args.backlog)]
        started = time.perf_counter()
        if store == "s3":
            s3 = boto3.client(
                "s3",
                endpoint_url=f"http://127.0.0.1:{moto_port}",
                region_name="us-east-1",
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
            )
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda k: s3.put_object(Bucket=BUCKET, Key="bench/" + k, Body=b"x"), ids, chunksize=256))
        else:
            for key in ids:
                path = os.path.join(data_dir, "objects", key)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(b"x")
        print(f"\n== deletion capacity ({store}): {len(ids)} objects put in {time.perf_counter() - started:.0f} s")
        probe = Probe(metrics_url, {"broker": proc.pid})
        from broker.admin_client import AdminClient as ShoalAdmin

        admin = ShoalAdmin([("127.0.0.1", int(bootstrap.rsplit(":", 1)[1]))], timeout_s=600)
        found = admin.call("walfiles.gc")
        print(f"   first cycle found {found['planned_total']} unreferenced; waiting out the grace period")
        time.sleep(grace_s(args) + 1)
        before = probe.snap()
        started = time.perf_counter()
        cycles = 0
        while time.perf_counter() - started < 1800:
            report = admin.call("walfiles.gc")
            cycles += 1
            if report["planned_total"] == 0:
                break
        elapsed = time.perf_counter() - started
        delta = Probe.delta(before, probe.snap())
        deleted = delta.d("shoal_walfiles_deleted_objects_total")
        print(
            f"   deleted {deleted:.0f} objects in {elapsed:.1f} s ({cycles} cycles back to back, "
            f"each listing what is left): "
            f"{deleted / elapsed:.0f} objects/s overall; DeleteObjects calls "
            f"{delta.d('shoal_object_store_requests_total', operation='delete_many'):.0f}, LIST pages "
            f"{delta.d('shoal_object_store_requests_total', operation='list'):.0f}; broker CPU "
            f"{delta.share('broker') * 100:.0f}% of one core"
        )
    finally:
        stop_broker(proc)


def grace_s(args: argparse.Namespace) -> float:
    for setting in args.broker_set:
        key, _, value = setting.partition("=")
        if key.strip() == "wal.file.manager.grace.ms":
            return int(value) / 1000
    return 30.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=48.0, help="MiB/s in phases 1 and 2 (half load: 48)")
    parser.add_argument("--seconds", type=float, default=900.0, help="phase 1 duration")
    parser.add_argument("--compare-seconds", type=float, default=180.0, help="phase 2 duration")
    parser.add_argument("--backlog", type=int, default=100_000, help="objects in phase 3")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--backlog-store", choices=["file", "s3"], action="append", help="default: both")
    parser.add_argument("--only", choices=["steady", "compare", "backlog"], action="append")
    args = parser.parse_args()
    phases = args.only or ["steady", "compare", "backlog"]
    work = tempfile.mkdtemp(prefix="shoal-bench-walgc-")
    try:
        with s3_endpoint_and_moto_port(work) as (proxy_port, moto_port, moto_pid, proxy_pid):
            pids = {"moto": moto_pid, "proxy": proxy_pid}
            if "steady" in phases:
                phase_steady(args, proxy_port, pids, work, gc=True)
            if "compare" in phases:
                phase_steady(args, proxy_port, pids, work, gc=False)
            if "backlog" in phases:
                for store in args.backlog_store or ["file", "s3"]:
                    phase_backlog(args, proxy_port, moto_port, work, store)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
