"""`make bench`, partition-count part (issue 28): one broker holding more partitions than it
has file descriptors for, the way the embedded default is run.

The broker runs with RLIMIT_NOFILE lowered to --nofile (default 2,000; `log.open.files.max`
then defaults to half of it) and gets --partitions diskless partitions (default 4,000, in
topics of 250: larger CreateTopics outlast the admin client's 10 s timeout, issue 28 item 3)
and --classic-partitions classic ones (default 0; issue 28's goal is 20,000 plus 2,000).
Each partition was three open files before the bound, so the old broker failed at about a
third of --nofile. It measures: creation time, one record produced to every partition with
librdkafka's defaults and read back, open descriptors and RSS, then kill -9 and the time
until the broker is ready again, the longest event-loop stall during that start (the
`shoal_event_loop_lag_seconds` histogram's largest non-empty bucket), every record read
back again, the broker's CPU over 30 idle seconds, and one Metadata request for every topic.

Not a test: no assertions beyond reading back what was acknowledged; nothing runs it in CI.
Record figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import urllib.request
from pathlib import Path

from kafka.protocol.metadata import MetadataRequest

from tests.integration.clients import (
    RawConnection,
    assert_same_records,
    consume_confluent,
    create_topic,
    produce_confluent,
)
from tests.integration.harness import BrokerProcess
from tests.integration.test_open_files import low_nofile, one_record_each

from .diskless import process_cpu

TOPIC_PARTITIONS = 250
IDLE_S = 30.0


def metrics(broker: BrokerProcess) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def longest_stall_bucket(values: dict[str, float]) -> str:
    """The smallest `le` bucket holding every event-loop lag sample so far."""
    total = values["shoal_event_loop_lag_seconds_count"]
    buckets = sorted(
        (float(key.split('le="')[1].rstrip('"}')), count)
        for key, count in values.items()
        if key.startswith("shoal_event_loop_lag_seconds_bucket")
    )
    return next(f"<= {le * 1000:g} ms" for le, count in buckets if count >= total)


def read_back(broker: BrokerProcess, sent: dict[str, list]) -> None:
    for topic, recs in sent.items():
        got = consume_confluent(broker.bootstrap, topic, TOPIC_PARTITIONS, len(recs), timeout_s=300)
        assert_same_records(recs, got)


def full_metadata_s(broker: BrokerProcess) -> float:
    """Seconds for one Metadata request naming no topic (all of them), as a client sees it."""
    with RawConnection(broker.bootstrap, timeout_s=60.0) as conn:
        started = time.monotonic()
        conn.request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12, timeout_s=60.0)
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=4000)
    parser.add_argument("--classic-partitions", type=int, default=0)
    parser.add_argument("--nofile", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shoal-bench-partitions-") as work:
        broker = BrokerProcess(Path(work) / "data", Path(work) / "broker.log", command=low_nofile(args.nofile))
        try:
            broker.start()
            modes = {f"scale-{i}": "true" for i in range(args.partitions // TOPIC_PARTITIONS)}
            modes.update({f"classic-{i}": "false" for i in range(args.classic_partitions // TOPIC_PARTITIONS)})
            topics = list(modes)
            started = time.monotonic()
            for topic, diskless in modes.items():
                create_topic(
                    broker.bootstrap, topic, partitions=TOPIC_PARTITIONS, configs={"diskless.enable": diskless}
                )
            print(f"created {len(topics) * TOPIC_PARTITIONS} partitions in {time.monotonic() - started:.1f} s")
            sent = {topic: one_record_each(TOPIC_PARTITIONS, topic) for topic in topics}
            started = time.monotonic()
            for topic, recs in sent.items():
                produce_confluent(broker.bootstrap, topic, recs, timeout_s=300)
            print(f"one record to each partition: {time.monotonic() - started:.1f} s")
            read_back(broker, sent)
            rss_kib = next(
                int(line.split()[1]) for line in open(f"/proc/{broker.pid}/status") if line.startswith("VmRSS")
            )
            values = metrics(broker)
            print(
                f"read back; descriptors {len(os.listdir(f'/proc/{broker.pid}/fd'))} (limit {args.nofile}), "
                f"segment files open {values['shoal_log_open_files']:.0f} of {values['shoal_log_open_files_max']:.0f}, "
                f"RSS {rss_kib // 1024} MiB"
            )
            broker.kill()
            started = time.monotonic()
            broker.start(timeout_s=600)
            ready_s = time.monotonic() - started
            values = metrics(broker)
            print(f"kill -9 to ready: {ready_s:.1f} s; longest event-loop stall {longest_stall_bucket(values)}")
            read_back(broker, sent)
            values = metrics(broker)
            print(f"read back after the restart; files reopened {values['shoal_log_file_reopens_total']:.0f}")
            cpu = process_cpu(broker.pid)
            time.sleep(IDLE_S)
            print(f"idle CPU over {IDLE_S:.0f} s: {(process_cpu(broker.pid) - cpu) / IDLE_S * 100:.1f}% of a core")
            print(f"full Metadata (every topic): {full_metadata_s(broker):.2f} s")
        finally:
            broker.kill()


if __name__ == "__main__":
    main()
