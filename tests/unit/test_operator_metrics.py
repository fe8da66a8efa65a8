"""The metrics an operator's dashboards and alerts read (docs/metrics.md): request names and
error counting, leader-only per-partition series, offline / under-min-ISR counts, election
and ISR counters, group and transaction series collected at scrape time, the event-loop
lag probe. Pure: no sockets, no broker."""

from __future__ import annotations

import asyncio

from kafka.protocol.consumer import FetchResponse, OffsetFetchResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse
from prometheus_client import generate_latest

from broker.metadata import records
from broker.metrics import (
    LOOP_LAG_INTERVAL_S,
    NO_LEADER,
    BrokerMetrics,
    GroupStateCollector,
    LoopLagMonitor,
    api_name,
    error_name,
    offline_partitions,
    under_min_isr_partitions,
)
from broker.protocol.admin import SHOAL_ADMIN
from broker.protocol.api_keys import ApiKey
from broker.protocol.error_codes import error_codes
from broker.protocol.errors import ErrorCode


def sample(metrics: BrokerMetrics, name: str, **labels: str) -> float | None:
    value = metrics.registry.get_sample_value(name, labels)
    return value


def series(metrics: BrokerMetrics, name: str) -> list[dict[str, str]]:
    return [s.labels for m in metrics.registry.collect() for s in m.samples if s.name == name]


# -- requests by API name ---------------------------------------------------------------------


def test_api_names_are_kafkas() -> None:
    assert api_name(ApiKey.PRODUCE) == "Produce"
    assert api_name(ApiKey.FETCH) == "Fetch"
    assert api_name(ApiKey.LIST_OFFSETS) == "ListOffsets"
    assert api_name(ApiKey.OFFSET_COMMIT) == "OffsetCommit"
    assert api_name(ApiKey.API_VERSIONS) == "ApiVersions"
    assert api_name(ApiKey.INIT_PRODUCER_ID) == "InitProducerId"
    assert api_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert api_name(ApiKey.INCREMENTAL_ALTER_CONFIGS) == "IncrementalAlterConfigs"
    assert api_name(ApiKey.DESCRIBE_TOPIC_PARTITIONS) == "DescribeTopicPartitions"
    assert api_name(SHOAL_ADMIN) == "ShoalAdmin"
    assert api_name(9999) == "9999"
    assert error_name(6) == "NOT_LEADER_OR_FOLLOWER" and error_name(-1) == "UNKNOWN_SERVER_ERROR"
    assert error_name(30000) == "30000"


def test_requests_are_counted_by_api_name_with_children_made_once() -> None:
    metrics = BrokerMetrics()
    metrics.observe_request(ApiKey.PRODUCE, 0.002)
    metrics.observe_request(0, 0.004)  # the int from the wire is the same API
    metrics.observe_request(SHOAL_ADMIN, 0.1)
    assert sample(metrics, "shoal_requests_total", api="Produce") == 2
    assert sample(metrics, "shoal_request_seconds_count", api="Produce") == 2
    assert sample(metrics, "shoal_requests_total", api="ShoalAdmin") == 1
    assert not any("api_key" in labels for labels in series(metrics, "shoal_requests_total"))
    assert set(metrics._per_api) == {0, SHOAL_ADMIN}  # one (counter, histogram) pair per API


# -- error codes of responses -----------------------------------------------------------------


def produce_response(codes: list[int]) -> ProduceResponse:
    partition = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    return ProduceResponse(
        responses=[
            ProduceResponse.TopicProduceResponse(
                name="t",
                topic_id=None,
                partition_responses=[
                    partition(
                        index=i,
                        error_code=code,
                        base_offset=-1,
                        log_append_time_ms=-1,
                        log_start_offset=-1,
                        record_errors=[],
                        error_message=None,
                    )
                    for i, code in enumerate(codes)
                ],
            )
        ],
        throttle_time_ms=0,
    )


def fetch_response(top: int, codes: list[int]) -> FetchResponse:
    topic = FetchResponse.FetchableTopicResponse
    return FetchResponse(
        throttle_time_ms=0,
        error_code=top,
        session_id=0,
        responses=[
            topic(
                topic="t",
                topic_id=None,
                partitions=[
                    topic.PartitionData(
                        partition_index=i,
                        error_code=code,
                        high_watermark=0,
                        last_stable_offset=0,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=b"\0" * 100,
                    )
                    for i, code in enumerate(codes)
                ],
            )
        ],
    )


def test_error_codes_of_produce_and_fetch_are_the_partitions() -> None:
    assert error_codes(produce_response([0, 0, 0])) == []
    assert error_codes(produce_response([6, 0, 6, 19])) == [6, 6, 19]
    assert error_codes(fetch_response(0, [0, 1, 0])) == [1]
    assert error_codes(fetch_response(ErrorCode.INVALID_REQUEST, [])) == [ErrorCode.INVALID_REQUEST]


def test_error_codes_at_every_level() -> None:
    """Top-level, per topic and per partition (Metadata); nested groups (OffsetFetch v8+)."""
    topic = MetadataResponse.MetadataResponseTopic
    metadata = MetadataResponse(
        throttle_time_ms=0,
        brokers=[],
        cluster_id=None,
        controller_id=1,
        topics=[
            topic(error_code=3, name="gone", topic_id=None, is_internal=False, partitions=[]),
            topic(
                error_code=0,
                name="t",
                topic_id=None,
                is_internal=False,
                partitions=[
                    topic.MetadataResponsePartition(
                        error_code=5,
                        partition_index=0,
                        leader_id=-1,
                        leader_epoch=0,
                        replica_nodes=[],
                        isr_nodes=[],
                        offline_replicas=[],
                    )
                ],
            ),
        ],
    )
    assert sorted(error_codes(metadata)) == [3, 5]
    group = OffsetFetchResponse.OffsetFetchResponseGroup
    fetched = OffsetFetchResponse(
        throttle_time_ms=0,
        groups=[
            group(group_id="a", topics=[], error_code=16),
            group(
                group_id="b",
                topics=[
                    group.OffsetFetchResponseTopics(
                        name="t",
                        partitions=[
                            group.OffsetFetchResponseTopics.OffsetFetchResponsePartitions(
                                partition_index=0,
                                committed_offset=-1,
                                committed_leader_epoch=-1,
                                metadata=None,
                                error_code=3,
                            )
                        ],
                    )
                ],
                error_code=0,
            ),
        ],
    )
    assert sorted(error_codes(fetched)) == [3, 16]


def test_response_errors_are_counted_by_api_and_error_name() -> None:
    metrics = BrokerMetrics()
    metrics.observe_errors(ApiKey.PRODUCE, error_codes(produce_response([6, 0, 6])))
    metrics.observe_errors(ApiKey.FETCH, error_codes(fetch_response(0, [0, 0])))
    metrics.observe_errors(ApiKey.FETCH, error_codes(fetch_response(0, [56])))
    assert sample(metrics, "shoal_request_errors_total", api="Produce", error="NOT_LEADER_OR_FOLLOWER") == 2
    assert sample(metrics, "shoal_request_errors_total", api="Fetch", error="KAFKA_STORAGE_ERROR") == 1
    assert len(series(metrics, "shoal_request_errors_total")) == 2  # nothing for responses without errors


# -- per-partition series, reported by leaders only -------------------------------------------


def test_led_partition_series_follow_leadership() -> None:
    metrics = BrokerMetrics()
    led = metrics.led_partitions
    led.source = lambda: {("t", "0"): (1, -1, 500, 0, 10, 8, 0), ("t", "1"): (0, 4, 900, 2, 20, 20, 61.5)}
    assert sample(metrics, "shoal_partition_log_size_bytes", topic="t", partition="0") == 500
    assert sample(metrics, "shoal_partition_log_start_offset", topic="t", partition="1") == 2
    assert sample(metrics, "shoal_partition_log_end_offset", topic="t", partition="0") == 10
    assert sample(metrics, "shoal_partition_high_watermark", topic="t", partition="0") == 8
    assert sample(metrics, "shoal_partition_diskless", topic="t", partition="0") == 1
    assert sample(metrics, "shoal_partition_mode_since_offset", topic="t", partition="1") == 4
    assert sample(metrics, "shoal_partition_open_transaction_age_seconds", topic="t", partition="1") == 61.5

    led.source = lambda: {("t", "1"): (0, 4, 950, 2, 21, 21, 62)}  # partition 0's leadership moved away
    for name in (
        "shoal_partition_diskless",
        "shoal_partition_mode_since_offset",
        "shoal_partition_log_size_bytes",
        "shoal_partition_log_start_offset",
        "shoal_partition_log_end_offset",
        "shoal_partition_high_watermark",
        "shoal_partition_open_transaction_age_seconds",
    ):
        assert series(metrics, name) == [{"topic": "t", "partition": "1"}], name
    assert sample(metrics, "shoal_partition_high_watermark", topic="t", partition="1") == 21

    led.source = lambda: {}  # nothing led here any more (or the topic was deleted)
    assert series(metrics, "shoal_partition_log_end_offset") == []


class ReadAtScrape(dict):  # type: ignore[type-arg]
    """Rows that count how often they are read."""

    reads = 0

    def items(self):  # type: ignore[no-untyped-def]
        ReadAtScrape.reads += 1
        return super().items()


def test_led_partition_series_cost_nothing_between_scrapes() -> None:
    """Regression (issue 28): every mode-switch pass set seven labelled gauges per led
    partition on the event loop (0.6 s a pass at 2,000 partitions); the rows are now read
    only when the metrics are scraped."""
    metrics = BrokerMetrics()
    rows = ReadAtScrape({("t", str(i)): (0, -1, 0, 0, i, i, 0) for i in range(1000)})
    metrics.led_partitions.source = lambda: rows
    assert ReadAtScrape.reads == 0
    assert sample(metrics, "shoal_partition_log_end_offset", topic="t", partition="999") == 999
    assert ReadAtScrape.reads == 1


# -- cluster health -----------------------------------------------------------------------------


def test_offline_partitions_have_no_live_leader() -> None:
    assert NO_LEADER == records.NO_LEADER
    assert offline_partitions([1, 2, 3], {1, 2, 3}) == 0
    assert offline_partitions([1, NO_LEADER, 3, 3], {1, 2}) == 3  # no leader; leader 3 not live
    assert offline_partitions([], {1}) == 0


def test_under_min_isr_compares_isr_size_with_min_insync_replicas() -> None:
    assert under_min_isr_partitions([(3, 2), (2, 2), (1, 1)]) == 0
    assert under_min_isr_partitions([(1, 2), (2, 3), (3, 2)]) == 2


def state(leader: int, isr: list[int], replicas: list[int] | None = None) -> records.PartitionStateRecord:
    return records.PartitionStateRecord(records.RECORD_VERSION, replicas or [1, 2, 3], leader, 0, isr)


def test_leader_elections_clean_and_unclean() -> None:
    metrics = BrokerMetrics()
    metrics.observe_leader_assignment(None, state(1, [1, 2, 3]))  # a new partition gets its leader
    metrics.observe_leader_assignment(state(1, [1, 2, 3]), state(2, [2, 3]))  # failover within the ISR
    metrics.observe_leader_assignment(state(2, [2, 3]), state(2, [2]))  # ISR change only: no election
    metrics.observe_leader_assignment(state(2, [2]), state(NO_LEADER, [2]))  # offline: no election
    assert sample(metrics, "shoal_leader_elections_total") == 2
    assert sample(metrics, "shoal_unclean_leader_elections_total") == 0
    metrics.observe_leader_assignment(state(NO_LEADER, [2]), state(3, [3]))  # 3 was not in the ISR
    assert sample(metrics, "shoal_leader_elections_total") == 3
    assert sample(metrics, "shoal_unclean_leader_elections_total") == 1


def test_isr_changes() -> None:
    metrics = BrokerMetrics()
    metrics.observe_isr_change([1, 2, 3], [1, 2])
    metrics.observe_isr_change([1, 2], [1])
    metrics.observe_isr_change([1], [1, 3])
    assert sample(metrics, "shoal_isr_shrinks_total") == 2
    assert sample(metrics, "shoal_isr_expands_total") == 1


# -- groups, collected at scrape time ----------------------------------------------------------


def test_group_series_are_read_from_the_coordinator_at_each_scrape() -> None:
    metrics = BrokerMetrics()
    assert series(metrics, "shoal_group_committed_offset") == []  # no coordinator bound yet
    state: dict[str, object] = {
        "offsets": [("g", "t", 0, 42), ("g", "t", 1, 7), ("h", "u", 0, 3)],
        "members": [("g", 2), ("h", 0)],
    }
    metrics.group_state.source = lambda: (state["offsets"], state["members"])  # type: ignore[assignment,return-value]
    assert sample(metrics, "shoal_group_committed_offset", group="g", topic="t", partition="0") == 42
    assert sample(metrics, "shoal_group_committed_offset", group="h", topic="u", partition="0") == 3
    assert sample(metrics, "shoal_group_members", group="g") == 2
    state["offsets"], state["members"] = [("g", "t", 0, 50)], [("g", 1)]  # h's offsets expired, t-1 deleted
    assert series(metrics, "shoal_group_committed_offset") == [{"group": "g", "topic": "t", "partition": "0"}]
    assert sample(metrics, "shoal_group_committed_offset", group="g", topic="t", partition="0") == 50
    assert series(metrics, "shoal_group_members") == [{"group": "g"}]


def test_group_collector_describes_its_families() -> None:
    names = {family.name for family in GroupStateCollector().describe()}
    assert names == {"shoal_group_committed_offset", "shoal_group_members"}


def test_transactions_are_counted_by_state_at_each_scrape() -> None:
    metrics = BrokerMetrics()
    assert series(metrics, "shoal_transactions") == []  # no coordinator bound yet
    states = ["Ongoing", "Ongoing", "Empty"]
    metrics.transactions.watch(lambda: iter(states), ["Empty", "Ongoing", "PrepareCommit"])
    assert sample(metrics, "shoal_transactions", state="Ongoing") == 2
    assert sample(metrics, "shoal_transactions", state="Empty") == 1
    assert sample(metrics, "shoal_transactions", state="PrepareCommit") == 0  # reported from the start
    states[:] = ["CompleteCommit"]  # a state `always` does not name still counts
    assert sample(metrics, "shoal_transactions", state="Ongoing") == 0
    assert sample(metrics, "shoal_transactions", state="CompleteCommit") == 1
    assert {f.name for f in metrics.transactions.describe()} == {"shoal_transactions"}


# -- event-loop lag ----------------------------------------------------------------------------


class LateClock:
    """Each sleep takes the interval plus the next lateness."""

    def __init__(self, lateness: list[float]) -> None:
        self.now = 100.0
        self._lateness = iter(lateness)

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds + next(self._lateness)


def test_loop_lag_observes_how_late_the_probe_woke() -> None:
    metrics = BrokerMetrics()
    clock = LateClock([0.0, 0.003, 0.4, 12.0])
    monitor = LoopLagMonitor(clock, metrics.event_loop_lag)  # type: ignore[arg-type]
    asyncio.run(monitor.run(rounds=4))
    assert LOOP_LAG_INTERVAL_S == 0.25
    assert sample(metrics, "shoal_event_loop_lag_seconds_count") == 4
    assert abs((sample(metrics, "shoal_event_loop_lag_seconds_sum") or 0) - 12.403) < 1e-9
    assert sample(metrics, "shoal_event_loop_lag_seconds_bucket", le="0.001") == 1
    assert sample(metrics, "shoal_event_loop_lag_seconds_bucket", le="0.005") == 2
    assert sample(metrics, "shoal_event_loop_lag_seconds_bucket", le="0.5") == 3
    assert sample(metrics, "shoal_event_loop_lag_seconds_bucket", le="10.0") == 3
    assert sample(metrics, "shoal_event_loop_lag_seconds_bucket", le="+Inf") == 4


def test_loop_lag_monitor_starts_and_stops() -> None:
    metrics = BrokerMetrics()

    async def main() -> None:
        monitor = LoopLagMonitor(LateClock([0.0] * 1000), metrics.event_loop_lag)  # type: ignore[arg-type]
        monitor.start()
        for _ in range(5):
            await asyncio.sleep(0)
        await monitor.stop()

    asyncio.run(main())
    assert (sample(metrics, "shoal_event_loop_lag_seconds_count") or 0) >= 1


# -- exposition ----------------------------------------------------------------------------------


def test_exposition_has_process_metrics_and_no_created_series() -> None:
    metrics = BrokerMetrics()
    metrics.set_broker_info(3, None, True)
    metrics.observe_request(ApiKey.FETCH, 0.01)
    metrics.observe_errors(ApiKey.FETCH, [6])
    metrics.isr_shrinks.inc()
    text = generate_latest(metrics.registry).decode()
    assert "_created" not in text
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds", "python_info"):
        assert f"\n{name}" in text, name
    assert "python_gc_objects_collected_total" in text
    assert 'shoal_broker_info{az="",node_id="3",stateless="true"} 1.0' in text
    assert "shoal_build_info{" in text
