"""Issue 28, item 1: the partition count no longer decides when a broker runs out of file
descriptors. Before `log.open.files.max`, each partition held its active segment's three
files open, so a broker with 20,000 descriptors failed every diskless produce at about 6,700
partitions. Here the same failure is brought within reach: brokers run with RLIMIT_NOFILE
lowered to 900 and hold 370 partitions (1,100 files the old way). The restart after it
failed too: opening 500 partitions had held the event loop past the broker's 6 s lease."""

from __future__ import annotations

import os
import sys
import time

from .clients import Rec, assert_same_records, consume_confluent, create_topic, produce_confluent
from .harness import BrokerProcess, broker_command, wait_until
from .test_az_routing import metric_value

NOFILE = 900
PARTITIONS = 160  # per topic, a classic and a diskless one: with the internal topics, 1,100 files the old way


def low_nofile(limit: int = NOFILE) -> list[str]:
    """The broker's command with its descriptor limit (soft and hard) set to `limit`."""
    set_limit_and_exec = (
        "import os, resource, sys; n = int(sys.argv[1]); "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); os.execvp(sys.argv[2], sys.argv[2:])"
    )
    return [sys.executable, "-c", set_limit_and_exec, str(limit), *broker_command()]


def one_record_each(partitions: int, tag: str) -> list[Rec]:
    now = int(time.time() * 1000)
    return [Rec(p, f"k{p}".encode(), f"{tag}-{p}".encode(), (), now) for p in range(partitions)]


def open_descriptors(broker: BrokerProcess) -> int:
    return len(os.listdir(f"/proc/{broker.pid}/fd"))


def test_partitions_beyond_the_descriptor_limit_keep_working(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(command=low_nofile())
    sent: dict[str, list[Rec]] = {}
    for topic, diskless in (("classic", "false"), ("diskless", "true")):
        create_topic(broker.bootstrap, topic, partitions=PARTITIONS, configs={"diskless.enable": diskless})
        sent[topic] = one_record_each(PARTITIONS, topic)
        produce_confluent(broker.bootstrap, topic, sent[topic])
    for topic, recs in sent.items():
        assert_same_records(recs, consume_confluent(broker.bootstrap, topic, PARTITIONS, len(recs)))
    bound = metric_value(broker, "shoal_log_open_files_max")
    assert bound == NOFILE // 2, "0 (the default) takes half of the process's descriptors"
    assert 0 < metric_value(broker, "shoal_log_open_files") <= bound
    assert open_descriptors(broker) < NOFILE
    # kill -9 and start: every partition is recovered and opened again within the limit, and the
    # lease is kept meanwhile (a graceful stop of this many partitions takes over 10 s here)
    broker.restart(graceful=False, timeout_s=120)
    for topic, recs in sent.items():
        assert_same_records(recs, consume_confluent(broker.bootstrap, topic, PARTITIONS, len(recs)))
    assert open_descriptors(broker) < NOFILE


def test_a_tight_bound_reopens_files_and_loses_nothing(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(extra_args=["--set", "log.open.files.max=20"])
    partitions = 60
    for diskless in ("false", "true"):
        topic = f"tight-{diskless}"
        create_topic(broker.bootstrap, topic, partitions=partitions, configs={"diskless.enable": diskless})
        recs = one_record_each(partitions, "first") + one_record_each(partitions, "second")
        for half in (recs[:partitions], recs[partitions:]):  # each partition's file closed in between
            produce_confluent(broker.bootstrap, topic, half)
        assert_same_records(recs, consume_confluent(broker.bootstrap, topic, partitions, len(recs)))
    assert metric_value(broker, "shoal_log_open_files") <= 20
    assert metric_value(broker, "shoal_log_file_reopens_total") > 0


def test_a_bound_the_limit_cannot_hold_is_refused_at_start(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(command=low_nofile(), extra_args=["--set", "log.open.files.max=1000"], start=False)
    broker.start(wait=False)
    assert broker.wait_exit(30) == 2
    wait_until(lambda: "log.open.files.max=1000 leaves fewer than 1024" in broker.tail(), 5, what="the message")
