"""`make bench`, load on one partition (issue 28 item 6, the seeds' phase 3).

One broker at its defaults on S3 (moto behind tests/s3proxy.py: 20 ms per PUT, 10 ms per
GET, as tests.bench.untuned), a topic of ONE partition per mode (--modes classic,diskless).
For each mode:
  - rate phases, each --seconds long (the issue asks for 600): 10,000 records/s of 100 B,
    then 1 Mbps (125 records/s of 1,000 B), from one confluent-kafka producer at its defaults
    (acks=all, idempotent off) paced in 10 ms ticks, read by one consumer at its defaults
    assigned to the partition. End-to-end latency is the poll time minus the send time
    written in the record; acknowledgement latency is send to delivery callback.
  - --producers idempotent producers (enable.idempotence=true) writing --records-each
    records each to the partition at once.
Every phase reports what it reached and whether every acknowledged record was read exactly
once and in each producer's order (lost / duplicated / out of order).

Not a test: no assertions, nothing runs it in CI. Record figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .diskless import percentile, s3_endpoint, start_diskless_broker
from .produce_consume import stop_broker

HEADER = struct.Struct(">qii")  # send time (ns), producer index, sequence
TICK_S = 0.01
DRAIN_S = 120.0  # how long the reader may take to read the last acknowledged record


@dataclass
class Tally:
    """What the reader saw: per producer the last sequence, and the latencies."""

    read: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    e2e_ms: list[float] = field(default_factory=list)
    seen: dict[int, set[int]] = field(default_factory=dict)
    last: dict[int, int] = field(default_factory=dict)

    def record(self, value: bytes, now_ns: int) -> None:
        sent_ns, producer, seq = HEADER.unpack_from(value)
        self.read += 1
        self.e2e_ms.append((now_ns - sent_ns) / 1e6)
        seen = self.seen.setdefault(producer, set())
        if seq in seen:
            self.duplicated += 1
            return
        seen.add(seq)
        if seq < self.last.get(producer, -1):
            self.out_of_order += 1
        self.last[producer] = max(seq, self.last.get(producer, -1))


class Reader:
    """One consumer at its defaults, assigned to the partition from its start, in a thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.tally = Tally()
        self._stop = threading.Event()
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}"})
        self._consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(1000, 0.1):
                if message.error() is None:
                    self.tally.record(message.value() or b"", time.time_ns())

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()


@dataclass
class Acks:
    """What the producers were told: acknowledged (producer, sequence) pairs and latencies."""

    acked: set[tuple[int, int]] = field(default_factory=set)
    failed: int = 0
    ack_ms: list[float] = field(default_factory=list)

    def callback(self, producer: int, seq: int, sent_ns: int):  # type: ignore[no-untyped-def]
        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                self.failed += 1
                return
            self.acked.add((producer, seq))
            self.ack_ms.append((time.time_ns() - sent_ns) / 1e6)

        return on_delivery


def send(producer: Producer, topic: str, index: int, seq: int, size: int, acks: Acks) -> None:
    sent_ns = time.time_ns()
    value = HEADER.pack(sent_ns, index, seq).ljust(size, b"x")
    while True:
        try:
            producer.produce(topic, value, partition=0, on_delivery=acks.callback(index, seq, sent_ns))
            return
        except BufferError:  # the client's queue is full: it pushes back, we wait
            producer.poll(0.01)


def report(name: str, seconds: float, acks: Acks, reader: Reader) -> None:
    deadline = time.monotonic() + DRAIN_S
    while reader.tally.read < len(acks.acked) and time.monotonic() < deadline:
        time.sleep(0.1)
    tally = reader.tally
    read = {(p, s) for p, seqs in tally.seen.items() for s in seqs}
    lost = len(acks.acked - read)
    e2e, ack = sorted(tally.e2e_ms), sorted(acks.ack_ms)
    print(
        f"  {name}: {len(acks.acked):,} acknowledged in {seconds:.0f} s ({len(acks.acked) / seconds:,.0f}/s), "
        f"{acks.failed} failed; end to end p50/p99/max {percentile(e2e, 0.5):.0f}/{percentile(e2e, 0.99):.0f}/"
        f"{e2e[-1] if e2e else float('nan'):.0f} ms; acknowledgement p50/p99 {percentile(ack, 0.5):.0f}/"
        f"{percentile(ack, 0.99):.0f} ms; lost {lost}, duplicated {tally.duplicated}, out of order {tally.out_of_order}",
        flush=True,
    )


def rate_phase(bootstrap: str, topic: str, per_s: int, size: int, seconds: float) -> None:
    reader = Reader(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap})
    acks = Acks()
    start = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - start) < seconds:
        for _ in range(int(elapsed * per_s) - sent):
            send(producer, topic, 0, sent, size, acks)
            sent += 1
        producer.poll(0)
        time.sleep(max(0.0, TICK_S - (time.monotonic() - start - elapsed)))
    producer.flush(60)
    report(f"{per_s:,} records/s of {size} B", seconds, acks, reader)
    reader.close()


def many_producers(bootstrap: str, topic: str, count: int, each: int) -> None:
    reader = Reader(bootstrap, topic)
    producers = [Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True}) for _ in range(count)]
    acks = Acks()
    start = time.monotonic()
    for seq in range(each):
        for index, producer in enumerate(producers):
            send(producer, topic, index + 1, seq, 100, acks)
            producer.poll(0)
    for producer in producers:
        producer.flush(120)
    report(f"{count} idempotent producers x {each:,} records", time.monotonic() - start, acks, reader)
    reader.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each rate phase (the issue: 600)")
    parser.add_argument("--modes", default="classic,diskless")
    parser.add_argument("--producers", type=int, default=100)
    parser.add_argument("--records-each", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shoal-bench-partition-load-") as work:
        data_dir = os.path.join(work, "data")
        os.mkdir(data_dir)
        with s3_endpoint(work) as (proxy_port, _moto_pid, _proxy_pid):
            proc, bootstrap, _metrics = start_diskless_broker(data_dir, proxy_port, [])
            try:
                admin = AdminClient({"bootstrap.servers": bootstrap})
                for mode in args.modes.split(","):
                    print(f"one partition, {mode}; one broker on S3 (moto + 20 ms PUT / 10 ms GET), client defaults")
                    for phase, (per_s, size) in enumerate(((10_000, 100), (125, 1000))):
                        topic = f"load-{mode}-{phase}"
                        configs = {"diskless.enable": "true" if mode == "diskless" else "false"}
                        admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
                        rate_phase(bootstrap, topic, per_s, size, args.seconds)
                    topic = f"load-{mode}-producers"
                    configs = {"diskless.enable": "true" if mode == "diskless" else "false"}
                    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
                    many_producers(bootstrap, topic, args.producers, args.records_each)
            finally:
                stop_broker(proc)


if __name__ == "__main__":
    main()
