"""`shoal transactions` against a real broker (issue 18, hanging transactions): a transaction a
librdkafka producer leaves open is listed and described; a hanging one (a producer id that
no coordinator knows, written 20 minutes ago with verification off, as clients before
KIP-890 could leave one) is found by find-hanging and the open one is not; the hanging
transaction shows in shoal_partition_open_transaction_age_seconds; `abort` by start offset
and by producer id moves the partition's last stable offset to the high watermark, and a
read_committed consumer reads what was stuck behind them."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from .clients import RawConnection, api_versions, build_batch, consume_confluent, create_topic, raw_produce
from .harness import wait_until
from .test_operator_cli import shoal
from .test_transaction_coordinator import FAST, producer
from .test_transactions import UNVERIFIED, init_producer_id, latest

pytestmark = pytest.mark.integration

TOPIC = "txop-orders"
READ_COMMITTED, READ_UNCOMMITTED = 1, 0
TWENTY_MINUTES_MS = 20 * 60_000


def run_json(*args: str) -> object:
    result = shoal("transactions", *args, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def open_txn_age(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    line = next(
        line
        for line in text.splitlines()
        if line.startswith("shoal_partition_open_transaction_age_seconds{") and f'topic="{TOPIC}"' in line
    )
    return float(line.rsplit(" ", 1)[1])


def test_list_describe_find_and_abort_hanging_transactions(broker_factory) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import Producer

    broker = broker_factory(extra_args=FAST + UNVERIFIED)
    b = ("--bootstrap-server", broker.bootstrap)
    create_topic(broker.bootstrap, TOPIC, partitions=1, configs={"diskless.enable": "true"})
    with RawConnection(broker.bootstrap) as conn:
        versions = api_versions(broker.bootstrap)
        # the hanging one: offset 0, a producer id without a transactional id, 20 minutes old
        hung_pid, hung_epoch = init_producer_id(conn, versions)
        batch = build_batch(
            [(b"k", b"hung")],
            timestamp_ms=int(time.time() * 1000) - TWENTY_MINUTES_MS,
            transactional=True,
            producer_id=hung_pid,
            producer_epoch=hung_epoch,
            base_sequence=0,
        )
        assert raw_produce(conn, versions, TOPIC, 0, batch) == (0, 0)
        # the open one: offset 1, its coordinator knows it
        live = producer(broker.bootstrap, "txop-live")
        live.init_transactions(15)
        live.begin_transaction()
        live.produce(TOPIC, value=b"open", partition=0)
        live.flush(10)
        plain = Producer({"bootstrap.servers": broker.bootstrap})
        plain.produce(TOPIC, value=b"after", partition=0)
        plain.flush(10)
        assert latest(conn, versions, TOPIC, READ_COMMITTED) == 0
        assert latest(conn, versions, TOPIC, READ_UNCOMMITTED) == 3

        listed = run_json("list", *b)
        [row] = [r for r in listed if r["transactional_id"] == "txop-live"]
        assert row["state"] == "Ongoing" and row["coordinator"] == 0
        text = shoal("transactions", "list", *b)
        assert text.returncode == 0 and "TRANSACTIONAL-ID" in text.stdout and "txop-live" in text.stdout

        described = run_json("describe", "--transactional-id", "txop-live", *b)
        assert described["state"] == "Ongoing" and described["partitions"] == [{"topic": TOPIC, "partition": 0}]
        live_pid, live_epoch = described["producer_id"], described["producer_epoch"]
        unknown = shoal("transactions", "describe", "--transactional-id", "txop-nobody", *b)
        assert unknown.returncode == 1 and "no transactional id 'txop-nobody'" in unknown.stderr

        producers = {
            p["producer_id"]: p for p in run_json("describe-producers", "--topic", TOPIC, "--partition", "0", *b)
        }
        assert producers[hung_pid]["current_transaction_start_offset"] == 0
        assert producers[live_pid]["current_transaction_start_offset"] == 1
        assert producers[live_pid]["coordinator_epoch"] == -1  # no marker yet
        missing = shoal("transactions", "describe-producers", "--topic", "txop-none", "--partition", "0", *b)
        assert missing.returncode == 1 and "UnknownTopicOrPartition" in missing.stderr

        # 15 minutes: only the old one is a candidate, and it hangs
        [found] = run_json("find-hanging", "--broker-id", "0", *b)
        assert (found["producer_id"], found["start_offset"], found["topic"]) == (hung_pid, 0, TOPIC)
        assert found["duration_min"] >= 19.9
        # a few ms: the live one is a candidate too, but its coordinator still has the partition
        [again] = run_json("find-hanging", "--topic", TOPIC, "--max-transaction-timeout", "0.0001", *b)
        assert again["producer_id"] == hung_pid
        wait_until(lambda: open_txn_age(broker.metrics_port) > 1190, 5, interval_s=0.2, what="the hung one's age")

        aborted = shoal("transactions", "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "0", *b)
        assert aborted.returncode == 0 and f"producer {hung_pid}" in aborted.stdout, aborted.stderr
        assert latest(conn, versions, TOPIC, READ_COMMITTED) == 1  # now held by the live one
        assert run_json("find-hanging", "--broker-id", "0", *b) == []
        gone = shoal("transactions", "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "0", *b)
        assert gone.returncode == 1 and "no open transaction starts at offset 0" in gone.stderr

        explicit = ("--producer-id", str(live_pid), "--producer-epoch", str(live_epoch), "--coordinator-epoch", "-1")
        assert shoal("transactions", "abort", "--topic", TOPIC, "--partition", "0", *explicit, *b).returncode == 0
        assert latest(conn, versions, TOPIC, READ_COMMITTED) == latest(conn, versions, TOPIC, READ_UNCOMMITTED) == 5
    committed = consume_confluent(broker.bootstrap, TOPIC, 1, 1, timeout_s=10, isolation_level="read_committed")
    assert [r.value for r in committed] == [b"after"]
    wait_until(lambda: open_txn_age(broker.metrics_port) == 0, 5, interval_s=0.2, what="the age back to 0")
