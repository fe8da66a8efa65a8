"""The operator's metrics on a real broker's /metrics (docs/metrics.md): identity series,
requests and errors by API name, the leader's per-partition offsets and sizes, the group
coordinator's committed offsets, process metrics, and no `_created` series."""

from __future__ import annotations

import urllib.request

import pytest

from tests.observability.shipped import EXTERNAL, dashboard_exprs, metric_names, recorded_names, rules

from .clients import RawConnection, api_versions, create_topic, make_records, produce_kafka_python, raw_fetch
from .harness import wait_until

pytestmark = pytest.mark.integration

RECORDS = 10
COMMITTED = 7


def scrape_text(broker) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(snapshot, name: str, **labels: str) -> float | None:
    want = set(labels.items())
    found = [v for (n, ls), v in snapshot.items() if n == name and want <= set(ls)]
    return sum(found) if found else None


def commit_offset(bootstrap: str, group: str, topic: str, partition: int, offset: int) -> None:
    """OffsetCommit without joining (a manually assigned consumer commits with generation -1)."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(offset, None, -1)})
    finally:
        consumer.close(autocommit=False)


def test_operator_metrics_on_a_real_broker(broker):
    bs = broker.bootstrap
    diskless, classic, group = "om-dl", "om-cl", "om-group"
    create_topic(bs, diskless)
    create_topic(bs, classic, configs={"diskless.enable": "false"})
    for topic in (diskless, classic):
        offsets = produce_kafka_python(bs, topic, make_records(RECORDS, 1, tag=topic))
        assert sorted(offsets) == list(range(RECORDS))
    commit_offset(bs, group, diskless, 0, COMMITTED)
    with RawConnection(bs) as conn:  # a partition that does not exist: one error on Fetch
        assert raw_fetch(conn, api_versions(bs), diskless, 5, 0).error_code == 3

    def settled():
        snap = samples(scrape_text(broker))
        ok = (
            all(
                value(snap, "shoal_partition_high_watermark", topic=t, partition="0") == RECORDS
                for t in (diskless, classic)
            )
            and value(snap, "shoal_group_committed_offset", group=group) is not None
        )
        return snap if ok else None

    snap = wait_until(settled, 10, interval_s=0.2, what="per-partition and group series")
    for topic in (diskless, classic):
        labels = {"topic": topic, "partition": "0"}
        assert value(snap, "shoal_partition_log_end_offset", **labels) == RECORDS
        assert value(snap, "shoal_partition_log_start_offset", **labels) == 0
        size = value(snap, "shoal_partition_log_size_bytes", **labels)
        assert size is not None and RECORDS * 10 < size < 100_000, (topic, size)
    assert value(snap, "shoal_group_committed_offset", group=group, topic=diskless, partition="0") == COMMITTED
    assert value(snap, "shoal_group_members", group=group) == 0  # committed without joining

    assert (value(snap, "shoal_requests_total", api="Produce") or 0) >= 2
    assert (value(snap, "shoal_requests_total", api="OffsetCommit") or 0) >= 1
    assert (value(snap, "shoal_requests_total", api="ApiVersions") or 0) >= 1
    assert (value(snap, "shoal_request_seconds_count", api="Metadata") or 0) >= 1
    assert value(snap, "shoal_request_errors_total", api="Fetch", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert value(snap, "shoal_build_info") == 1
    assert value(snap, "shoal_broker_info", node_id=str(broker.node_id), stateless="false") == 1
    assert value(snap, "shoal_offline_partitions") == 0  # the lone broker is the controller
    assert value(snap, "shoal_under_min_isr_partitions") == 0
    # A new topic's leaders come with its creation write, not from the controller: no election.
    assert value(snap, "shoal_leader_elections_total") == 0
    assert value(snap, "shoal_unclean_leader_elections_total") == 0
    assert (value(snap, "process_resident_memory_bytes") or 0) > 10 << 20
    assert value(snap, "process_open_fds") is not None and value(snap, "python_info") == 1
    assert (value(snap, "shoal_event_loop_lag_seconds_count") or 0) >= 1

    text = scrape_text(broker)
    assert not [line for line in text.splitlines() if "_created" in line]

    # Everything the chart's alerts and dashboard read is served, before any fault happened.
    served = {name for name, _ in snap}
    used = set().union(*map(metric_names, [r["expr"] for r in rules()] + dashboard_exprs()))
    used -= EXTERNAL | recorded_names()
    assert [n for n in used if n not in served and f"{n}_bucket" not in served] == []
