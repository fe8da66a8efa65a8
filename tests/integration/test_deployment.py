"""A broker that is safe to deploy (issue 17's defects found when tried as a new operator),
each against a real broker process: SHOAL_ variables Kubernetes injects are ignored, and a
bracketed IPv6 listen address binds and is what clients are given."""

from __future__ import annotations

import os

import pytest

from tests.integration.harness import BrokerProcess, free_port, wait_until

pytestmark = pytest.mark.integration


def test_kubernetes_service_variables_do_not_stop_the_broker(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Regression: SHOAL_PORT=tcp://... (a Service named shoal) was read as a config key and
    the broker refused to start."""
    env = {**os.environ, "SHOAL_PORT": "tcp://10.96.0.12:9092", "SHOAL_PORT_9092_TCP_ADDR": "10.96.0.12"}
    broker = BrokerProcess(tmp_path / "data", tmp_path / "broker.log", env=env).start()
    try:
        log = (tmp_path / "broker.log").read_text()
        assert "ignoring environment variable(s) SHOAL_PORT, SHOAL_PORT_9092_TCP_ADDR" in log
    finally:
        broker.stop()


def test_an_ipv6_listener_binds_and_serves_clients(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Regression: `--listen [::1]:PORT` passed validation but the brackets reached bind()."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    port = free_port()
    address = f"[::1]:{port}"
    broker = BrokerProcess(
        tmp_path / "data", tmp_path / "broker.log", extra_args=["--listen", address, "--advertise", address]
    )
    broker.start()
    try:
        producer = KafkaProducer(bootstrap_servers=address, acks="all")
        producer.send("v6", b"over ipv6", partition=0).get(timeout=30)
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=address, consumer_timeout_ms=3000)
        consumer.assign([TopicPartition("v6", 0)])
        consumer.seek_to_beginning()
        assert [m.value for m in consumer] == [b"over ipv6"]
        consumer.close()
    finally:
        broker.stop()


def test_a_broker_started_before_etcd_waits_for_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Regression: etcd unreachable at start ended the broker with a Python traceback (exit 1);
    now it retries with backoff, one line per attempt, and starts once etcd is up."""
    from broker.devcluster.etcd import EtcdServer
    from broker.devcluster.process import free_ports

    from tests.etcd_server import require_etcd_binary

    binary = require_etcd_binary()
    client_port, peer_port = free_ports(2)
    etcd = EtcdServer(tmp_path / "etcd", client_port, peer_port, binary=binary)
    metadata = f"etcd://127.0.0.1:{client_port}/late"
    broker = BrokerProcess(
        tmp_path / "data",
        tmp_path / "broker.log",
        rpc_port=free_port(),
        extra_args=["--metadata", metadata],
    )
    broker.start(wait=False)
    try:
        wait_until(
            lambda: (tmp_path / "broker.log").read_text().count("unreachable") >= 2 or not broker.running(),
            60,
            what="retry lines",
        )
        assert broker.running(), "the broker gave up instead of waiting for etcd"
        log = (tmp_path / "broker.log").read_text()
        assert f"metadata store {metadata} unreachable" in log and "retrying in" in log
        assert "Traceback" not in log
        etcd.start()
        broker.wait_ready(60)
    finally:
        broker.stop()
        etcd.stop()


def test_a_wrong_bucket_keeps_the_broker_unready_and_says_why(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Regression: with a bucket that does not exist /readyz said ready and every diskless
    produce failed; now /readyz answers 503 naming the store's error."""
    import urllib.error
    import urllib.request

    from broker.devcluster.process import stop_process
    from broker.devcluster.s3 import fake_aws_environ, start_moto

    process, moto = start_moto(tmp_path / "moto.log")
    try:
        url = moto.object_store_url("x").replace(f"s3://{moto.bucket}/", "s3://no-such-bucket/")
        broker = BrokerProcess(
            tmp_path / "data", tmp_path / "broker.log", env=fake_aws_environ(), extra_args=["--object-store", url]
        )
        broker.start(wait=False)

        def readyz() -> tuple[int, str]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/readyz", timeout=2) as answer:
                    return answer.status, answer.read().decode()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read().decode()
            except OSError:
                return 0, ""

        try:
            wait_until(lambda: "cannot be used" in readyz()[1], 60, what="a 503 from /readyz")
            status, body = readyz()
            assert status == 503 and "NoSuchBucket" in body, body
            assert "cannot be used" in (tmp_path / "broker.log").read_text()
        finally:
            broker.stop()
    finally:
        stop_process(process)


def test_json_logs_a_quiet_start_and_a_serving_line_with_version_and_port(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Regression: a fresh broker logged a line per __consumer_offsets partition, its serving
    line had no version, and there was no JSON log format."""
    import json

    from kafka import KafkaConsumer, KafkaProducer

    from broker import __version__

    broker = BrokerProcess(tmp_path / "data", tmp_path / "broker.log", extra_args=["--log-format", "json"]).start()
    try:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
        producer.send("logs", b"x").get(timeout=30)
        producer.close()
        consumer = KafkaConsumer("logs", bootstrap_servers=broker.bootstrap, group_id="g", consumer_timeout_ms=4000)
        list(consumer)  # the group creates __consumer_offsets and its 50 partitions
        consumer.commit()
        consumer.close()
    finally:
        broker.stop()
    lines = [line for line in (tmp_path / "broker.log").read_text().splitlines() if not line.startswith("=====")]
    entries = [json.loads(line) for line in lines if line.strip()]
    assert entries and all({"ts", "level", "logger", "message"} <= set(e) for e in entries)
    serving = [e["message"] for e in entries if "serving Kafka" in e["message"]]
    assert serving and f"shoal {__version__}" in serving[0] and f"127.0.0.1:{broker.port}" in serving[0], serving
    offsets_lines = [e for e in entries if "__consumer_offsets-" in e["message"]]
    assert len(offsets_lines) <= 5, [e["message"] for e in offsets_lines[:10]]
