"""Acknowledged records survive kill -9, a torn segment tail, and SIGTERM under load."""

from __future__ import annotations

import os
import signal

import pytest

from .clients import (
    BackgroundProducer,
    assert_same_records,
    check_sequences,
    consume_confluent,
    create_topic,
    make_records,
    produce_kafka_python,
    read_all,
    unique_topic,
)
from .harness import wait_until

pytestmark = pytest.mark.integration


def test_acked_records_survive_kill9(broker):
    bs = broker.bootstrap
    topic = unique_topic("dur")
    create_topic(bs, topic, partitions=2)
    recs = make_records(2000, partitions=2)
    produce_kafka_python(bs, topic, recs, acks="all")
    broker.kill()
    broker.start()
    got = consume_confluent(bs, topic, 2, len(recs), settle_s=1.0)
    assert_same_records(recs, got)
    # The log continues where it ended: new records get the next offsets.
    more = make_records(2, partitions=2, tag="after")
    assert produce_kafka_python(bs, topic, more) == [1000, 1000]


RESUMED_ACKS = 500  # records acknowledged by the restarted broker before the producer stops
# Longer than a restart on a loaded machine: records pending across the restart are retried
# (idempotently) until the broker is back, instead of expiring.
DELIVERY_TIMEOUT_MS = 90_000


def _producer_survives_restart(broker, topic: str, stop) -> None:  # type: ignore[no-untyped-def]
    """An idempotent producer keeps sending while `stop(broker)` takes the broker down and it
    is started again: it carries on (new records are acknowledged by the restarted broker),
    every record it sent is acknowledged, and the log holds them once each, in order."""
    bs = broker.bootstrap
    create_topic(bs, topic, partitions=2)
    producer = BackgroundProducer(bs, topic, 2, delivery_timeout_ms=DELIVERY_TIMEOUT_MS).start()
    try:
        wait_until(lambda: producer.acked_count() >= 3000, 60, what="3000 acks")
        stop(broker)
        at_stop = producer.acked_count()
        broker.start()
        wait_until(
            lambda: producer.acked_count() >= at_stop + RESUMED_ACKS,
            60,
            what=f"{RESUMED_ACKS} more acks from the restarted broker",
        )
        producer.close(60)
    finally:
        producer.close(0)
    producer.assert_all_delivered()
    check_sequences(read_all(bs, topic, 2), producer.acked)


def test_kill9_with_active_producer(broker):
    _producer_survives_restart(broker, unique_topic("dur-active"), lambda b: b.kill())


def _torn_tail_setup(broker):
    """Returns (topic, records before the last entry, the last record alone); the last record
    is produced separately so it is the newest log entry; then kill -9."""
    bs = broker.bootstrap
    topic = unique_topic("torn")
    create_topic(bs, topic, partitions=1)
    recs = make_records(300, partitions=1)
    produce_kafka_python(bs, topic, recs)
    last = make_records(1, partitions=1, tag="last", base_ts=recs[-1].timestamp + 10)
    assert produce_kafka_python(bs, topic, last) == [300]
    broker.kill()
    return topic, recs, last


def test_torn_tail_garbage_is_truncated(broker):
    topic, recs, last = _torn_tail_setup(broker)
    segment = broker.newest_segment(topic, 0)
    size = segment.stat().st_size
    # Looks like the start of an entry (offset, huge length) followed by junk.
    with open(segment, "ab") as f:
        f.write((301).to_bytes(8, "big") + (10_000).to_bytes(4, "big") + os.urandom(50))
    broker.start()
    got = consume_confluent(broker.bootstrap, topic, 1, 301, settle_s=1.0)
    assert_same_records(recs + last, got)
    assert broker.running()
    new = make_records(1, 1, tag="new", base_ts=last[0].timestamp + 10)
    assert produce_kafka_python(broker.bootstrap, topic, new) == [301]
    assert segment.stat().st_size >= size  # did not eat into acknowledged data
    # The garbage was really cut from the file: the record appended after recovery survives
    # another crash (appending behind garbage would lose it at the next recovery).
    broker.kill()
    broker.start()
    got = consume_confluent(broker.bootstrap, topic, 1, 302, settle_s=1.0)
    assert_same_records(recs + last + new, got)


def test_torn_tail_cut_is_truncated(broker):
    topic, recs, _last = _torn_tail_setup(broker)
    segment = broker.newest_segment(topic, 0)
    with open(segment, "r+b") as f:
        f.truncate(segment.stat().st_size - 7)  # tear the newest entry
    broker.start()
    got = consume_confluent(broker.bootstrap, topic, 1, 300, settle_s=1.0)
    # Only the torn entry (the last record) is gone; everything before it is intact.
    assert_same_records(recs, got)
    assert broker.running()
    new = make_records(1, 1, tag="new")
    assert produce_kafka_python(broker.bootstrap, topic, new) == [300]
    broker.kill()  # and again: still consistent
    broker.start()
    got = consume_confluent(broker.bootstrap, topic, 1, 301, settle_s=0.5)
    assert got[-1].value == new[0].value and got[-1].offset == 300
    assert_same_records(recs, got[:300])


def test_sigterm_with_active_producer(broker):
    def sigterm(b) -> None:  # type: ignore[no-untyped-def]
        b.signal(signal.SIGTERM)
        code = b.wait_exit(30)
        assert code is not None, "broker still running 30 s after SIGTERM"
        assert code == 0, f"exit code {code} after SIGTERM"

    _producer_survives_restart(broker, unique_topic("term"), sigterm)
