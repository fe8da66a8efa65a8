"""`make bench`, what consumers that read many partitions cost a broker (issue 28, found by
the soak).

One broker at its defaults (classic topics, no object store), --partitions partitions in
topics of 100, a producer at its defaults writing --rate records/s to every partition in
turn (so data trickles in everywhere, as in the soak), and --consumers consumers at their
defaults, each assigned every partition from the start. librdkafka, like most non-Java
clients, uses no fetch sessions (KIP-227): every Fetch names every partition it reads from
that broker, and with data arriving somewhere all the time every Fetch is answered at once.
Prints the broker's CPU (% of one core) over --seconds, for 0 consumers and then for
--consumers.

Not a test: no assertions, nothing runs it in CI. Record figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .produce_consume import cpu_seconds, start_broker, stop_broker

TOPIC_PARTITIONS = 100


def measure(partitions: int, consumers: int, rate: float, seconds: float) -> str:
    topics = [f"fanout-{n}" for n in range(partitions // TOPIC_PARTITIONS)]
    targets = [(t, i) for t in topics for i in range(TOPIC_PARTITIONS)]
    with tempfile.TemporaryDirectory(prefix="shoal-fanout-") as data_dir:
        proc, bootstrap, _metrics = start_broker(data_dir)
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for name in topics:
                admin.create_topics([NewTopic(name, TOPIC_PARTITIONS, 1)])[name].result(120)
            stop = threading.Event()
            read = [0] * consumers

            def tail(k: int) -> None:
                consumer = Consumer(
                    {"bootstrap.servers": bootstrap, "group.id": f"fanout-{k}", "enable.auto.commit": False}
                )
                consumer.assign([TopicPartition(t, i, OFFSET_BEGINNING) for t, i in targets])
                while not stop.is_set():
                    read[k] += sum(1 for m in consumer.consume(1000, 0.5) if not m.error())
                consumer.close()

            readers = [threading.Thread(target=tail, args=(k,)) for k in range(consumers)]
            for reader in readers:
                reader.start()
            producer = Producer({"bootstrap.servers": bootstrap})
            time.sleep(5.0)  # the consumers have fetched once
            cpu_before, started, n = cpu_seconds(proc.pid), time.monotonic(), 0
            while time.monotonic() - started < seconds:
                for _ in range(max(1, int(rate / 10))):
                    topic, index = targets[n % len(targets)]
                    producer.produce(topic, b"x", partition=index)
                    n += 1
                producer.poll(0)
                time.sleep(0.1)
            producer.flush(30)
            elapsed = time.monotonic() - started
            cpu = (cpu_seconds(proc.pid) - cpu_before) / elapsed
            stop.set()
            for reader in readers:
                reader.join()
        finally:
            stop_broker(proc)
    return (
        f"{partitions:,} partitions, {rate:.0f} records/s spread over them, {consumers} consumer(s) reading all: "
        f"broker CPU {100 * cpu:.0f}% of a core (produced {n:,}, read {sum(read):,})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--consumers", type=int, default=1)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    for consumers in (0, args.consumers):
        print(measure(args.partitions, consumers, args.rate, args.seconds), flush=True)


if __name__ == "__main__":
    main()
