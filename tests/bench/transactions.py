"""`make bench`: transactions on a classic and a diskless topic (issue 18).

One broker at its defaults on S3 (moto behind tests/s3proxy.py: 20 ms per PUT, 10 ms per
GET), a classic and a diskless topic of 4 partitions each, 1 KiB random records spread
round-robin over the partitions, confluent-kafka (librdkafka) at its default settings
except `transactional.id` (or, for the baseline, `enable.idempotence=true`, which a
transactional producer implies). For each topic:
 1. transactions of --records-per-txn (100) records, one after another, for --seconds:
    transactions/s and the commit_transaction p50/p99;
 2. the baseline without transactions: the same units of 100 records, each produced and
    flushed (what "done" means without a transaction), for --seconds: units/s, and the
    overhead of transactions against it;
 3. --e2e-rate (200) records/s for --seconds: a transactional producer committing every
    --commit-interval-ms (100, Kafka Streams' exactly-once default) read by a
    read_committed consumer, then a plain idempotent producer read by a read_uncommitted
    consumer (send time written in the record -> poll time in the consumer).

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

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from .diskless import percentile, s3_endpoint, start_diskless_broker
from .produce_consume import stop_broker

PARTITIONS = 4
RECORD_BYTES = 1024
TOPICS = {"classic": "bench-txn-classic", "diskless": "bench-txn-diskless"}


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(name, PARTITIONS, config={"diskless.enable": "true" if mode == "diskless" else "false"})
            for mode, name in TOPICS.items()
        ]
    )
    for future in futures.values():
        future.result(30)


def payload(sent_at: float | None = None) -> bytes:
    head = struct.pack(">d", time.time() if sent_at is None else sent_at)
    return head + os.urandom(RECORD_BYTES - len(head))


def send_unit(producer: Producer, topic: str, count: int, start: int) -> None:
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=payload(), partition=(start + i) % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)


def units(bootstrap: str, topic: str, args: argparse.Namespace, transactional_id: str | None) -> dict[str, float]:
    """Units of --records-per-txn records for --seconds, each ended by `commit_transaction`
    (with a transactional id) or by `flush` (an idempotent producer without one): units/s
    and the p50/p99 of that ending call."""
    if transactional_id:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
        producer.init_transactions(30)
    else:
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    endings: list[float] = []
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < args.seconds:
        if transactional_id:
            producer.begin_transaction()
        send_unit(producer, topic, args.records_per_txn, sent)
        sent += args.records_per_txn
        before = time.monotonic()
        if transactional_id:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
        endings.append(time.monotonic() - before)
    elapsed = time.monotonic() - started
    endings.sort()
    return {
        "units_per_s": len(endings) / elapsed,
        "p50_ms": percentile(endings, 0.5) * 1000,
        "p99_ms": percentile(endings, 0.99) * 1000,
    }


def end_to_end(bootstrap: str, topic: str, args: argparse.Namespace, transactional_id: str | None) -> dict[str, float]:
    """Records at --e2e-rate for --seconds; latencies seen by a tailing consumer."""
    isolation = "read_committed" if transactional_id else "read_uncommitted"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-e2e-{os.urandom(4).hex()}",
            "auto.offset.reset": "latest",
            "isolation.level": isolation,
        }
    )
    assigned = threading.Event()
    consumer.subscribe([topic], on_assign=lambda _consumer, _partitions: assigned.set())
    latencies: list[float] = []
    stop = threading.Event()

    def tail() -> None:
        while not stop.is_set():
            msg = consumer.poll(0.05)
            if msg is not None and msg.error() is None and msg.value():
                latencies.append(time.time() - struct.unpack(">d", msg.value()[:8])[0])

    reader = threading.Thread(target=tail, daemon=True)
    reader.start()
    assigned.wait(30)  # the consumer has joined its group
    time.sleep(1)  # and found the end of each partition
    config: dict[str, object] = {"bootstrap.servers": bootstrap}
    if transactional_id:
        config["transactional.id"] = transactional_id
    else:
        config["enable.idempotence"] = True
    producer = Producer(config)
    commit: Callable[[], None] = lambda: None  # noqa: E731
    if transactional_id:
        producer.init_transactions(30)
        producer.begin_transaction()

        def commit() -> None:
            producer.commit_transaction(30)
            producer.begin_transaction()

    interval = 1 / args.e2e_rate
    started = time.monotonic()
    last_commit = started
    sent = 0
    while time.monotonic() - started < args.seconds:
        producer.produce(topic, value=payload(), partition=sent % PARTITIONS)
        producer.poll(0)
        sent += 1
        now = time.monotonic()
        if now - last_commit >= args.commit_interval_ms / 1000:
            commit()
            last_commit = time.monotonic()
        time.sleep(max(0.0, started + sent * interval - time.monotonic()))
    commit()
    producer.flush(30)
    deadline = time.monotonic() + 15
    while len(latencies) < sent and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    reader.join(5)
    consumer.close()
    latencies.sort()
    return {
        "records": sent,
        "seen": len(latencies),
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--records-per-txn", type=int, default=100)
    parser.add_argument("--e2e-rate", type=float, default=200.0)
    parser.add_argument("--commit-interval-ms", type=float, default=100.0)
    parser.add_argument("--only", choices=sorted(TOPICS), help="one topic mode")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="shoal-bench-txn-")
    try:
        with s3_endpoint(work) as (proxy_port, _moto_pid, _proxy_pid):
            proc, bootstrap, _metrics = start_diskless_broker(os.path.join(work, "data"), proxy_port, [])
            try:
                create_topics(bootstrap)
                for mode, topic in TOPICS.items():
                    if args.only and mode != args.only:
                        continue
                    txn = units(bootstrap, topic, args, f"bench-{mode}")
                    plain = units(bootstrap, topic, args, None)
                    overhead = 1 - txn["units_per_s"] / plain["units_per_s"]
                    print(
                        f"{mode}: {args.records_per_txn} records per unit: transactions {txn['units_per_s']:.1f}/s "
                        f"(commit p50 {txn['p50_ms']:.0f} ms, p99 {txn['p99_ms']:.0f} ms); "
                        f"without transactions {plain['units_per_s']:.1f}/s (flush p50 {plain['p50_ms']:.0f} ms, "
                        f"p99 {plain['p99_ms']:.0f} ms); overhead {overhead:.0%}",
                        flush=True,
                    )
                    committed = end_to_end(bootstrap, topic, args, f"bench-e2e-{mode}")
                    uncommitted = end_to_end(bootstrap, topic, args, None)
                    print(
                        f"{mode}: {args.e2e_rate:.0f} records/s end to end: transactional (commit every "
                        f"{args.commit_interval_ms:.0f} ms) + read_committed p50 {committed['p50_ms']:.0f} ms, "
                        f"p99 {committed['p99_ms']:.0f} ms ({committed['seen']}/{committed['records']} seen); "
                        f"idempotent + read_uncommitted p50 {uncommitted['p50_ms']:.0f} ms, "
                        f"p99 {uncommitted['p99_ms']:.0f} ms ({uncommitted['seen']}/{uncommitted['records']} seen)",
                        flush=True,
                    )
            finally:
                stop_broker(proc)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
