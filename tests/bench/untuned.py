"""`make bench`: diskless topics with clients as they come (issue 12).

One broker at its defaults on S3 (moto behind tests/s3proxy.py: 20 ms per PUT, 10 ms per
GET), a diskless topic of 8 partitions, 1 KiB records spread round-robin over the partitions
by ONE producer at its library's default settings except acks=all:
  - confluent-kafka (librdkafka: linger 5 ms, non-idempotent, 1,000,000 requests in flight),
  - confluent-kafka with enable.idempotence=true (5 in flight),
  - kafka-python's KafkaProducer (idempotent by default in 3.x).
For each: full-load ingest (as fast as the producer goes), then 200 records/s for
--seconds with a tailing consumer at its defaults (confluent-kafka, group, earliest), for
end-to-end latency (send time written in the record -> poll time in the consumer). PUTs per
GiB and per second in each phase, from the broker's metrics.

Not a test: no assertions, nothing runs it in CI. Record figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from .diskless import (
    TOPIC,
    Probe,
    Reader,
    end_offsets,
    per_gib,
    percentile,
    s3_endpoint,
    start_diskless_broker,
    verdict,
)
from .produce_consume import stop_broker

PARTITIONS = 8
PHASE_LIMIT_S = 300.0
TARGETS = {"ingest": 64.0, "e2e_p99_ms": 1000.0, "e2e_p99_stretch_ms": 600.0, "puts_per_s": 4.0, "puts_per_gib": 130.0}
DEFAULT_CONSUMER = {"group.id": "bench-untuned", "auto.offset.reset": "earliest"}


class Client:
    """One producer behind a small interface: send, serve callbacks, flush."""

    def __init__(
        self,
        name: str,
        send: Callable[[bytes, int, Callable[[bool], None]], None],
        poll: Callable[[], None],
        flush: Callable[[float], int],
        close: Callable[[], None],
    ) -> None:
        self.name, self.send, self.poll, self.flush, self.close = name, send, poll, flush, close


def confluent(bootstrap: str, **extra: Any) -> Client:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **extra})

    def send(value: bytes, partition: int, done: Callable[[bool], None]) -> None:
        while True:
            try:
                producer.produce(TOPIC, value, partition=partition, on_delivery=lambda err, _m: done(err is None))
                return
            except BufferError:
                producer.poll(0.005)

    name = "confluent-kafka, defaults" + ("".join(f", {k}={v}" for k, v in extra.items()))
    return Client(name, send, lambda: producer.poll(0), lambda t: producer.flush(t), lambda: None)


def kafka_python(bootstrap: str, **extra: Any) -> Client:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **extra)
    pending: list[Any] = []

    def send(value: bytes, partition: int, done: Callable[[bool], None]) -> None:
        future = producer.send(TOPIC, value, partition=partition)
        future.add_callback(lambda _m: done(True))
        future.add_errback(lambda _e: done(False))
        pending.append(future)

    def flush(timeout_s: float) -> int:
        producer.flush(timeout_s)
        return sum(1 for f in pending if not f.is_done)

    name = "kafka-python KafkaProducer, defaults" + ("".join(f", {k}={v}" for k, v in extra.items()) or " (idempotent)")
    return Client(name, send, lambda: None, flush, producer.close)


def run_phase(client: Client, records: int, size: int, rate_rps: float = 0.0) -> dict[str, float]:
    """Send `records` records round-robin over the partitions, paced at `rate_rps` (0: as
    fast as the client takes them), each stamped with its send time."""
    payload = bytearray(os.urandom(size))
    acked, failed = [0], [0]
    lock = threading.Lock()

    def done(ok: bool) -> None:
        with lock:
            (acked if ok else failed)[0] += 1

    started = time.perf_counter()
    deadline = started + PHASE_LIMIT_S
    sent = 0
    for i in range(records):
        if rate_rps:
            ahead = started + i / rate_rps - time.perf_counter()
            if ahead > 0:
                time.sleep(ahead)
        if i % 100 == 0:
            client.poll()
            if time.perf_counter() > deadline:
                break
        struct.pack_into(">d", payload, 0, time.time())
        client.send(bytes(payload), i % PARTITIONS, done)
        sent += 1
    left = client.flush(120)
    elapsed = time.perf_counter() - started
    if failed[0] or left:
        raise SystemExit(f"{client.name}: {failed[0]} deliveries failed, {left} undelivered")
    return {"elapsed": elapsed, "records": sent, "bytes": sent * size}


def measure(bootstrap: str, probe: Probe, client: Client, args: argparse.Namespace) -> dict[str, float]:
    s0 = probe.snap()
    full = run_phase(client, args.records, args.size)
    d = probe.delta(s0, probe.snap())
    ingest = full["bytes"] / 2**20 / full["elapsed"]
    full_puts_per_gib = per_gib(d.puts, full["bytes"])
    print(f"\n[{client.name}]")
    print(
        f"  full load: {full['records']:,} records in {full['elapsed']:.1f} s: {ingest:.1f} MiB/s "
        f"({verdict(ingest, TARGETS['ingest'], at_least=True)}); PUTs {full_puts_per_gib:.1f} per GiB, "
        f"{d.puts_per_s:.1f} per s"
    )
    print(f"    {d.wal_line()}")
    print(f"    {d.cpu_line()}")
    tail = Reader(
        bootstrap, end_offsets(bootstrap, PARTITIONS), timestamped=True, config=dict(DEFAULT_CONSUMER)
    ).begin()
    time.sleep(2.0)  # the consumer is assigned and long-polling at the end of the log
    s1 = probe.snap()
    steady = run_phase(client, int(args.e2e_rate * args.seconds), args.size, rate_rps=args.e2e_rate)
    tail.finish(end_offsets(bootstrap, PARTITIONS), 60)
    d = probe.delta(s1, probe.snap())
    tail.latencies.sort()
    p50, p99 = percentile(tail.latencies, 0.5) * 1000, percentile(tail.latencies, 0.99) * 1000
    print(
        f"  {args.e2e_rate:g} records/s for {steady['elapsed']:.0f} s: end to end p50 {p50:.0f} ms, p99 {p99:.0f} ms "
        f"({verdict(p99, TARGETS['e2e_p99_ms'])}; stretch {verdict(p99, TARGETS['e2e_p99_stretch_ms'])}); "
        f"PUTs {d.puts_per_s:.2f} per s"
    )
    print(f"    {d.wal_line()}")
    return {
        "ingest": ingest,
        "full_puts_per_gib": full_puts_per_gib,
        "e2e_p50": p50,
        "e2e_p99": p99,
        "steady_puts_per_s": d.puts_per_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000, help="records of each full-load phase")
    parser.add_argument("--size", type=int, default=1024, help="record size in bytes (>= 8)")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each 200 records/s phase")
    parser.add_argument("--e2e-rate", type=float, default=200.0)
    parser.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--only", choices=["confluent", "idempotent", "kafka-python"], action="append")
    parser.add_argument(
        "--client-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a producer setting on top of the defaults (librdkafka names for confluent, "
        "KafkaProducer keyword arguments for kafka-python; integers are passed as such)",
    )
    args = parser.parse_args()
    work_dir = tempfile.mkdtemp(prefix="shoal-bench-untuned-")
    data_dir = os.path.join(work_dir, "data")
    os.mkdir(data_dir)
    rows = []
    try:
        with s3_endpoint(work_dir) as (proxy_port, moto_pid, proxy_pid):
            proc, bootstrap, metrics_url = start_diskless_broker(data_dir, proxy_port, args.broker_set)
            try:
                admin = AdminClient({"bootstrap.servers": bootstrap})
                admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={"diskless.enable": "true"})])[TOPIC].result(
                    30
                )
                probe = Probe(metrics_url, {"broker": proc.pid, "moto": moto_pid, "proxy": proxy_pid})
                print(
                    f"one producer, {PARTITIONS} diskless partitions round-robin, {args.size} B records, acks=all, "
                    "everything else at the client's and the broker's defaults; S3 via moto + 20 ms PUT / 10 ms GET"
                )
                extra = dict(_setting(kv) for kv in args.client_set)
                makers = {
                    "confluent": lambda: confluent(bootstrap, **extra),
                    "idempotent": lambda: confluent(bootstrap, **{"enable.idempotence": True, **extra}),
                    "kafka-python": lambda: kafka_python(bootstrap, **extra),
                }
                for key in args.only or list(makers):
                    client = makers[key]()
                    rows.append((client.name, measure(bootstrap, probe, client, args)))
                    client.close()
            finally:
                stop_broker(proc)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    print("\nsummary: ingest MiB/s | PUTs/GiB full load | e2e p50 / p99 ms at 200 rec/s | PUTs/s at 200 rec/s")
    for name, r in rows:
        print(
            f"  {name:58} {r['ingest']:6.1f} | {r['full_puts_per_gib']:6.1f} | {r['e2e_p50']:5.0f} / "
            f"{r['e2e_p99']:5.0f} | {r['steady_puts_per_s']:.2f}"
        )


def _setting(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    return key, int(value) if value.lstrip("-").isdigit() else value


if __name__ == "__main__":
    main()
