"""Diskless topics with clients as they come (issue 12): a confluent-kafka producer at its
default settings (linger 5 ms, non-idempotent, pipelining per connection) spreading records
over 8 partitions of a diskless topic, the broker on S3 behind the latency proxy (20 ms per
PUT, 10 ms per GET), and a consumer at its default settings tailing along. Every record is
delivered with a delivery report and no error (no client-side timeout), and read back once,
in order per partition. No timings asserted: the benchmark (`make bench`) measures them."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer

from tests.s3proxy import running_s3proxy

from .clients import create_topic, unique_topic
from .harness import wait_until

pytestmark = pytest.mark.integration

PARTITIONS = 8
RECORDS = 3000
RATE = 300  # records per second, round-robin over the partitions


@pytest.fixture
def proxied_broker(broker_factory, moto_server, tmp_path):
    with contextlib.ExitStack() as stack:
        port = stack.enter_context(
            running_s3proxy(moto_server.port, log_path=tmp_path / "s3proxy.log", delay_ms={"PUT": 20, "GET": 10})
        )
        url = f"s3://{moto_server.bucket}/{unique_topic('untuned')}?endpoint=http://127.0.0.1:{port}&region=us-east-1"
        broker = broker_factory("broker", extra_args=["--object-store", url])  # every broker setting at its default
        stack.callback(broker.stop)
        yield broker


def test_a_default_librdkafka_producer_over_eight_diskless_partitions(proxied_broker) -> None:
    bootstrap = proxied_broker.bootstrap
    topic = unique_topic("untuned")
    create_topic(bootstrap, topic, partitions=PARTITIONS)
    delivered: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}  # partition -> record numbers, in ack order
    errors: list[str] = []
    lock = threading.Lock()

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        with lock:
            if err is not None:
                errors.append(str(err))
            else:
                delivered[msg.partition()].append(int(msg.value()))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})  # the rest at librdkafka's defaults
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    received: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}  # (offset, record number)
    started = time.monotonic()
    for n in range(RECORDS):  # paced: RATE records per second
        while time.monotonic() < started + n / RATE:
            producer.poll(0.001)
            _drain(consumer, received, 0)
        producer.produce(topic, value=str(n).encode(), partition=n % PARTITIONS, on_delivery=on_delivery)
    assert producer.flush(120) == 0, "every record got its delivery report"
    wait_until(lambda: _drain(consumer, received, 0.2) >= RECORDS, 120, what="the consumer read every record")
    consumer.close()
    assert errors == []
    for partition in range(PARTITIONS):
        sent = list(range(partition, RECORDS, PARTITIONS))
        assert delivered[partition] == sent, f"partition {partition}: acknowledged in the order sent"
        offsets = [offset for offset, _n in received[partition]]
        assert offsets == list(range(len(sent))), f"partition {partition}: offsets dense, each record once"
        assert [n for _offset, n in received[partition]] == sent, f"partition {partition}: read in the order sent"


def _drain(consumer: Consumer, received: dict[int, list[tuple[int, int]]], timeout_s: float) -> int:
    for message in consumer.consume(500, timeout_s):
        if message.error() is None:
            received[message.partition()].append((message.offset(), int(message.value())))
    return sum(len(r) for r in received.values())
