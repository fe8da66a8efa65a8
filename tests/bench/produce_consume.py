"""`make bench`: one broker, 8 partitions, 1 KiB records, confluent-kafka producer with
acks=all, then a consumer reading everything back. Prints MB/s, records/s, produce
p50/p99, consume MB/s, broker CPU-seconds per GiB and peak RSS.

The topic is classic (`diskless.enable=false`): topics are diskless by default, and the
diskless benchmark is tests/bench/diskless.py.

Not a test: no assertions, nothing runs it in CI. Record figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


CLASSIC = {"diskless.enable": "false"}


@contextlib.contextmanager
def running_broker(
    name: str, topic: str, partitions: int, topic_config: Mapping[str, str] = CLASSIC
) -> Iterator[tuple[subprocess.Popen, str, str]]:
    """A broker in a temp data dir with one topic (classic unless `topic_config` says
    otherwise): (process, bootstrap, metrics URL); stopped gracefully and its data removed
    afterwards."""
    data_dir = tempfile.mkdtemp(prefix=f"shoal-bench-{name}-")
    proc, bootstrap, metrics_url = start_broker(data_dir)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 1, config=dict(topic_config))])[topic].result(30)
        yield proc, bootstrap, metrics_url
    finally:
        stop_broker(proc)
        shutil.rmtree(data_dir, ignore_errors=True)


def stop_broker(proc: subprocess.Popen) -> None:
    """SIGTERM (graceful: the broker seals and commits what it buffered), SIGKILL after 30 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def start_broker(
    data_dir: str, extra_args: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen, str, str]:
    """Start a broker (optional extra flags and environment variables); return (process,
    bootstrap address, metrics URL)."""
    port, metrics = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker",
            "broker",
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            data_dir,
            "--metrics-listen",
            f"127.0.0.1:{metrics}",
            "--log-level",
            "WARNING",
            *extra_args,
        ],
        env={**os.environ, **env} if env else None,
    )
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{metrics}/readyz", timeout=1).status == 200:
                return proc, f"127.0.0.1:{port}", f"http://127.0.0.1:{metrics}/metrics"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("broker did not become ready")


def topic_config(bootstrap: str, topic: str, key: str) -> str:
    """One config value of a topic, as DescribeConfigs reports it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(30)[key].value


def produce(bootstrap: str, topic: str, records: int, size: int, rate_mib: float = 0.0) -> dict[str, float]:
    """Produce as fast as possible, or paced at `rate_mib` MiB/s to measure latency without queueing."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "enable.idempotence": True,
        }
    )
    payload = os.urandom(size)
    latencies: list[float] = []
    failures: list[object] = []

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            failures.append(err)
        else:
            latencies.append(msg.latency())

    producer.produce(topic, payload, partition=0)  # warm-up: connect, metadata, producer id
    producer.flush(30)
    started = time.perf_counter()
    per_record_s = size / (rate_mib * 2**20) if rate_mib else 0.0
    for i in range(records):
        if per_record_s and i % 100 == 0:
            ahead = started + i * per_record_s - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
            producer.poll(0)
        while True:
            try:
                producer.produce(topic, payload, partition=i % 8, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
    producer.flush(300)
    elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"{len(failures)} deliveries failed, first: {failures[0]}")
    latencies.sort()
    return {
        "elapsed": elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def consume(bootstrap: str, topic: str, records: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 8_388_608,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(8)])
    records += 1  # the producer's warm-up record
    seen = 0
    started = time.perf_counter()
    deadline = started + 300
    while seen < records and time.perf_counter() < deadline:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen < records:
        raise SystemExit(f"consumed only {seen} of {records}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument(
        "--paced-mib",
        type=float,
        default=50.0,
        help="also run a paced produce at this rate to report unqueued latency (0 = skip)",
    )
    args = parser.parse_args()
    with running_broker("produce", "bench", 8) as (proc, bootstrap, _):
        total_gib = args.records * args.size / 2**30
        cpu0 = cpu_seconds(proc.pid)
        result = produce(bootstrap, "bench", args.records, args.size)
        cpu1 = cpu_seconds(proc.pid)
        consume_s = consume(bootstrap, "bench", args.records)
        cpu2 = cpu_seconds(proc.pid)
        mib = total_gib * 1024
        print(
            f"records={args.records} size={args.size}B partitions=8 acks=all idempotent producer, "
            f"topic diskless.enable={topic_config(bootstrap, 'bench', 'diskless.enable')}"
        )
        print(
            f"produce: {mib / result['elapsed']:.1f} MiB/s, {args.records / result['elapsed']:,.0f} records/s, "
            f"p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, "
            f"broker {(cpu1 - cpu0) / total_gib:.2f} CPU-s/GiB"
        )
        print(f"consume: {mib / consume_s:.1f} MiB/s, broker {(cpu2 - cpu1) / total_gib:.2f} CPU-s/GiB")
        print(f"broker peak RSS: {peak_rss_mib(proc.pid):.0f} MiB")
        if args.paced_mib:
            paced_records = min(args.records, int(args.paced_mib * 2**20 / args.size * 10))
            paced = produce(bootstrap, "bench", paced_records, args.size, args.paced_mib)
            print(
                f"paced produce at {args.paced_mib:.0f} MiB/s ({paced_records} records): "
                f"p50 {paced['p50_ms']:.1f} ms, p99 {paced['p99_ms']:.1f} ms"
            )


if __name__ == "__main__":
    main()
