"""Prometheus metrics and the metrics listener (`/metrics`, `/healthz`, `/readyz`).

Every metric is documented in docs/metrics.md (a test enforces it). The HTTP side is a
few lines of asyncio on purpose: three fixed GET routes do not justify a web framework.
"""

from __future__ import annotations

import asyncio
import logging
import platform
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from . import __version__
from .protocol.admin import SHOAL_ADMIN
from .protocol.api_keys import ApiKey
from .protocol.errors import ErrorCode

if TYPE_CHECKING:
    from .clock import Clock
    from .metadata.records import PartitionStateRecord

log = logging.getLogger(__name__)

# No `*_created` series: they double the sample count of every counter and histogram and no
# dashboard or alert of ours reads them (process-wide setting of prometheus_client).
disable_created_metrics()

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_LOOP_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LOOP_LAG_INTERVAL_S = 0.25  # how long the event-loop lag probe sleeps between two observations
NO_LEADER = -1


def api_name(api_key: int) -> str:
    """Kafka's name of an API (its message type: ApiKey.LIST_OFFSETS is "ListOffsets"), the
    `api` label; Shoal's private admin API is "ShoalAdmin"."""
    if api_key == SHOAL_ADMIN:
        return "ShoalAdmin"
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


def error_name(code: int) -> str:
    """Kafka's name of an error code (ErrorCode.NOT_LEADER_OR_FOLLOWER); the number if unknown."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.build_info = Gauge(
            "shoal_build_info", "Always 1: the broker's version and Python's.", ["version", "python"], registry=r
        )
        self.build_info.labels(__version__, platform.python_version()).set(1)
        self.broker_info = Gauge(
            "shoal_broker_info",
            "Always 1: this broker's node id, AZ and whether it is stateless.",
            ["node_id", "az", "stateless"],
            registry=r,
        )
        self.requests = Counter("shoal_requests", "Kafka requests handled, by API name.", ["api"], registry=r)
        self.request_seconds = Histogram(
            "shoal_request_seconds",
            "Time to handle a Kafka request, by API name.",
            ["api"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.request_errors = Counter(
            "shoal_request_errors",
            "Non-zero error codes in Kafka responses (top-level, per resource, per partition), by API and error.",
            ["api", "error"],
            registry=r,
        )
        self.event_loop_lag = Histogram(
            "shoal_event_loop_lag_seconds",
            f"How late a task sleeping {LOOP_LAG_INTERVAL_S} s on the event loop woke up.",
            buckets=_LOOP_LAG_BUCKETS,
            registry=r,
        )
        self.connections = Gauge("shoal_connections", "Open client connections.", registry=r)
        self.request_memory_bytes = Gauge(
            "shoal_request_memory_bytes",
            "Bytes of requests received and not yet handled, with the reservations of "
            "frames being read (bounded by queued.max.request.bytes).",
            registry=r,
        )
        self.connections_paused = Gauge(
            "shoal_connections_paused",
            "Client connections not being read from because a bound was reached "
            "(queued.max.requests, queued.max.request.bytes[.per.connection]).",
            registry=r,
        )
        self.bytes_in = Counter("shoal_network_received_bytes", "Kafka request bytes received.", registry=r)
        self.bytes_out = Counter("shoal_network_sent_bytes", "Kafka response bytes sent.", registry=r)
        self.produced_bytes = Counter(
            "shoal_produced_bytes", "Record batch bytes appended to partition logs.", registry=r
        )
        self.fetched_bytes = Counter("shoal_fetched_bytes", "Record batch bytes returned to fetches.", registry=r)
        self.produce_errors = Counter(
            "shoal_produce_errors", "Partitions of produce requests that failed, by error.", ["error"], registry=r
        )
        self.partitions = Gauge("shoal_partitions", "Partitions hosted by this broker.", registry=r)
        self.log_flush_seconds = Histogram(
            "shoal_log_flush_seconds", "Time to fsync a partition log.", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.group_rebalances = Counter(
            "shoal_group_rebalances", "Completed join phases of group rebalances.", registry=r
        )
        self.group_rebalance_seconds = Histogram(
            "shoal_group_rebalance_seconds",
            "Time from a group's last JoinGroup to the answers of its join phase (includes the "
            "initial rebalance delay for empty groups).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.offset_commits = Counter(
            "shoal_offset_commits", "Partition offsets committed to __consumer_offsets.", registry=r
        )
        self.groups = Gauge("shoal_groups", "Consumer groups this broker coordinates.", registry=r)
        self.group_state = GroupStateCollector()
        r.register(self.group_state)
        self.transactions = CountCollector(
            "shoal_transactions", "Transactional ids this broker coordinates, by state.", "state"
        )
        r.register(self.transactions)
        # Cluster and replication
        self.replication_bytes = Counter(
            "shoal_replication_fetched_bytes",
            "Partition-log entry bytes this broker copied from leaders as a follower.",
            registry=r,
        )
        self.replica_fetch_sessions = Gauge(
            "shoal_replica_fetch_sessions",
            "Replica fetch sessions open on this broker as a leader (one per follower broker, at most "
            "max.incremental.fetch.session.cache.slots).",
            registry=r,
        )
        self.leader_partitions = Gauge("shoal_leader_partitions", "Partitions this broker leads.", registry=r)
        self.leader_partitions_by_mode = Gauge(
            "shoal_leader_partitions_by_mode",
            "Partitions this broker leads, by the mode their logs are appended in (classic, diskless).",
            ["mode"],
            registry=r,
        )
        self.mode_switch_pending_partitions = Gauge(
            "shoal_mode_switch_pending_partitions",
            "Partitions led here whose mode is not their topic's yet, or whose switch is not recorded.",
            registry=r,
        )
        # Per-partition series reported by the partition's leader only (LedPartitionSeries).
        self.led_partitions = LedPartitionSeries(
            (
                "shoal_partition_diskless",
                "1 when a partition led here is appended in diskless mode, 0 in classic.",
            ),
            (
                "shoal_partition_mode_since_offset",
                "Offset of the mode marker of a led partition's last switch (-1: never switched).",
            ),
            (
                "shoal_partition_log_size_bytes",
                "Bytes of record batches a partition led here holds locally (classic: segment bytes; "
                "diskless: the batch bytes its log references).",
            ),
            (
                "shoal_partition_log_start_offset",
                "Log start offset of a partition led here (tiered segments included).",
            ),
            ("shoal_partition_log_end_offset", "Log end offset of a partition led here."),
            ("shoal_partition_high_watermark", "High watermark of a partition led here."),
            (
                "shoal_partition_open_transaction_age_seconds",
                "Age of the oldest open transaction of a partition led here (0: none open), from the "
                "timestamp of its first batch.",
            ),
        )
        r.register(self.led_partitions)
        self.mode_switches = Counter(
            "shoal_mode_switches",
            "Mode markers appended by this broker as leader, by the new mode.",
            ["to"],
            registry=r,
        )
        self.under_replicated_partitions = Gauge(
            "shoal_under_replicated_partitions",
            "Partitions this broker leads whose ISR is smaller than their "
            "replica set (Kafka's UnderReplicatedPartitions).",
            registry=r,
        )
        self.wal_commit_requests = Counter(
            "shoal_wal_commit_requests",
            "Commit requests sent for WAL objects, to this broker's own partitions "
            "(local) or to a leader elsewhere (remote): one per leader broker per object.",
            ["target"],
            registry=r,
        )
        self.cross_az_bytes = Counter(
            "shoal_cross_az_bytes",
            "Bytes exchanged with peers or clients in another AZ, by kind: records "
            "(record batches between brokers), metadata (other inter-broker RPC), client (clients that named "
            "another AZ).",
            ["kind"],
            registry=r,
        )
        self.under_min_isr_partitions = Gauge(
            "shoal_under_min_isr_partitions",
            "Partitions this broker leads whose ISR is smaller than their min.insync.replicas "
            "(Kafka's UnderMinIsrPartitionCount).",
            registry=r,
        )
        self.offline_partitions = Gauge(
            "shoal_offline_partitions",
            "Partitions without a live leader, counted by the active controller (0 elsewhere; "
            "Kafka's OfflinePartitionsCount).",
            registry=r,
        )
        self.isr_shrinks = Counter(
            "shoal_isr_shrinks", "ISR shrinks this broker made as leader (confirmed by the metadata store).", registry=r
        )
        self.isr_expands = Counter(
            "shoal_isr_expands",
            "ISR expansions this broker made as leader (confirmed by the metadata store).",
            registry=r,
        )
        self.leader_elections = Counter(
            "shoal_leader_elections",
            "Partition leaderships assigned by this broker as controller (new partitions, failovers, preferred leaders).",
            registry=r,
        )
        self.unclean_leader_elections = Counter(
            "shoal_unclean_leader_elections",
            "Leader elections by this broker as controller that chose a replica outside the ISR.",
            registry=r,
        )
        self.controller_active = Gauge("shoal_controller_active", "1 on the broker that is the controller.", registry=r)
        self.object_store_usable = Gauge(
            "shoal_object_store_usable",
            "1 when the object store answered this broker's last probe (a LIST); 0 makes /readyz answer 503.",
            registry=r,
        )
        # Object store and diskless topics
        self.object_store_requests = Counter(
            "shoal_object_store_requests",
            "Object store request attempts, by operation and outcome.",
            ["operation", "outcome"],
            registry=r,
        )
        self.object_store_request_seconds = Histogram(
            "shoal_object_store_request_seconds",
            "Time of one object store request attempt, by operation.",
            ["operation"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.object_store_bytes = Counter(
            "shoal_object_store_bytes",
            "Payload bytes moved to (up) or from (down) the object store.",
            ["direction"],
            registry=r,
        )
        self.wal_object_bytes = Histogram(
            "shoal_wal_object_bytes",
            "Size of uploaded WAL objects.",
            buckets=tuple(float(1 << n) for n in range(10, 28, 2)),
            registry=r,
        )
        self.wal_upload_seconds = Histogram(
            "shoal_wal_upload_seconds", "Time to upload one WAL object (PUT).", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.wal_commit_seconds = Histogram(
            "shoal_wal_commit_seconds",
            "Time from sending a WAL object's commits to the leaders' answers.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.wal_objects = Counter("shoal_wal_objects", "WAL objects finished, by outcome.", ["outcome"], registry=r)
        self.wal_seals = Counter("shoal_wal_seals", "WAL buffers sealed, by reason.", ["reason"], registry=r)
        self.wal_buffer_bytes = Gauge("shoal_wal_buffer_bytes", "Bytes in the open WAL buffer.", registry=r)
        self.wal_inflight_bytes = Gauge(
            "shoal_wal_inflight_bytes",
            "Diskless produce bytes admitted and not yet committed (bounded by wal.max.inflight.bytes).",
            registry=r,
        )
        self.wal_backpressure_waits = Counter(
            "shoal_wal_backpressure_waits", "Produce requests that waited for wal.max.inflight.bytes.", registry=r
        )
        self.wal_key_collisions = Counter(
            "shoal_wal_key_collisions",
            "WAL object keys found holding another object at upload (never overwritten; "
            "the object is uploaded under a fresh key).",
            registry=r,
        )
        self.log_open_files = Gauge(
            "shoal_log_open_files",
            "Segment files held open (one per segment at most), under log.open.files.max.",
            registry=r,
        )
        self.log_open_files_max = Gauge(
            "shoal_log_open_files_max",
            "The bound on open segment files in effect (log.open.files.max, or half of RLIMIT_NOFILE).",
            registry=r,
        )
        self.log_file_reopens = Counter(
            "shoal_log_file_reopens",
            "Segment files opened again after they were closed for log.open.files.max: a steady "
            "rate means the bound is too tight for the partitions in use.",
            registry=r,
        )
        self.producer_sequence_barriers = Gauge(
            "shoal_producer_sequence_barriers",
            "Idempotent producers held back on a partition until they retry a failed batch, "
            "by where (representative: WAL upload or commit failed; leader: write failed).",
            ["where"],
            registry=r,
        )
        self.transaction_permits = Gauge(
            "shoal_transaction_permits",
            "KIP-890 permits held by the partitions led here (at most "
            "transaction.partition.verification.max.permits per partition).",
            registry=r,
        )
        self.produce_barrier_refusals = Counter(
            "shoal_produce_barrier_refusals",
            "Diskless batches a representative refused because an earlier batch of their "
            "producer failed and was not sent again yet, or because their partition's leader "
            "changed while earlier batches sent to the previous one were unresolved.",
            registry=r,
        )
        self.wal_commit_stream_closures = Counter(
            "shoal_wal_commit_stream_closures",
            "Commit streams to a leader that the leader closed because a commit of the stream "
            "never arrived (or was refused as a whole): its later commits failed and a new "
            "stream started.",
            registry=r,
        )
        self.cache_requests = Counter(
            "shoal_cache_requests", "Object cache lookups, by result (hit, miss).", ["result"], registry=r
        )
        self.cache_bytes = Gauge("shoal_cache_bytes", "Bytes held by the object cache.", registry=r)
        # The WAL file manager (broker/walfiles/): set on the broker that runs it (the controller); the
        # stored/referenced/dead figures are those of its last cycle.
        self.walfiles_manager_active = Gauge(
            "shoal_walfiles_manager_active", "1 on the broker that runs the WAL file manager.", registry=r
        )
        self.walfiles_objects = Gauge("shoal_walfiles_objects", "WAL objects in the object store.", registry=r)
        self.walfiles_bytes = Gauge("shoal_walfiles_bytes", "Bytes of the WAL objects in the object store.", registry=r)
        self.walfiles_referenced_bytes = Gauge(
            "shoal_walfiles_referenced_bytes", "Batch bytes the partition leaders' logs reference.", registry=r
        )
        self.walfiles_dead_bytes = Gauge(
            "shoal_walfiles_dead_bytes",
            "Bytes of live WAL objects that no log references (kept for the other batches in the "
            "same objects, e.g. of a partition with a longer retention).",
            registry=r,
        )
        self.walfiles_unreferenced_objects = Gauge(
            "shoal_walfiles_unreferenced_objects",
            "WAL objects found unreferenced, waiting out wal.file.manager.grace.ms before deletion.",
            registry=r,
        )
        self.walfiles_oldest_object_age = Gauge(
            "shoal_walfiles_oldest_object_age_seconds", "Age of the oldest WAL object in the store.", registry=r
        )
        self.walfiles_deleted_objects = Counter(
            "shoal_walfiles_deleted_objects", "WAL objects deleted (confirmed by the store).", registry=r
        )
        self.walfiles_deleted_bytes = Counter(
            "shoal_walfiles_deleted_bytes", "Bytes of the WAL objects deleted.", registry=r
        )
        self.walfiles_delete_failures = Counter(
            "shoal_walfiles_delete_failures",
            "WAL object deletes the store refused or that failed (retried in a later cycle).",
            registry=r,
        )
        self.walfiles_cycles = Counter(
            "shoal_walfiles_cycles",
            "WAL file manager cycles, by outcome (ok, paused, failed_deletes).",
            ["outcome"],
            registry=r,
        )
        self.walfiles_index_reads = Counter(
            "shoal_walfiles_index_reads",
            "WAL object indexes read by the manager, by outcome (ok, gone, failed).",
            ["outcome"],
            registry=r,
        )
        self.walfiles_paused = Gauge(
            "shoal_walfiles_paused",
            "1 while the WAL file manager is paused (a broker missing, the metadata store unreachable).",
            registry=r,
        )
        self.walfiles_waiting_for_brokers = Gauge(
            "shoal_walfiles_waiting_for_brokers",
            "Data brokers that paused the WAL file manager's last round of questions: not registered, "
            "silent, still opening their partition logs, or without a replica the cluster view gives them.",
            registry=r,
        )
        self.walfiles_last_success_age = Gauge(
            "shoal_walfiles_last_success_age_seconds",
            "Seconds since the WAL file manager last completed a cycle; -1 before the first.",
            registry=r,
        )
        self.tiering_backlog_bytes = Gauge(
            "shoal_tiering_backlog_bytes",
            "Batch bytes of ranges past the local retention that are not tiered yet (partitions led here).",
            registry=r,
        )
        self.tiering_jobs = Counter(
            "shoal_tiering_jobs", "Tiering jobs run by this broker, by outcome (ok, failed).", ["outcome"], registry=r
        )
        for outcome in ("ok", "failed"):  # both served from the start, so rate() and alerts see 0
            self.tiering_jobs.labels(outcome)
        self.tiering_job_seconds = Histogram(
            "shoal_tiering_job_seconds",
            "Wall time of a tiering job (plan written to result read).",
            buckets=(5, 10, 20, 30, 60, 120, 300, 600, 1800),
            registry=r,
        )
        self.tiering_segments = Counter(
            "shoal_tiering_segments",
            "Tiered segments committed or deleted by this broker as leader, by event (committed, deleted, litter).",
            ["event"],
            registry=r,
        )
        self.tiering_bytes = Counter(
            "shoal_tiering_bytes", "Bytes of the tiered segments this broker committed.", registry=r
        )
        self.tiering_last_success = Gauge(
            "shoal_tiering_last_success_timestamp_seconds",
            "When a tiering cycle of this broker last finished without a failure (0: never).",
            registry=r,
        )
        self.tiered_read_bytes = Counter(
            "shoal_tiered_read_bytes", "Bytes read from tiered segments by GET (cache misses).", registry=r
        )
        # Label children made once per API (and per API and error), not per request.
        self._per_api: dict[int, tuple[Counter, Histogram]] = {}
        self._per_error: dict[tuple[int, int], Counter] = {}

    def set_broker_info(self, node_id: int, az: str | None, stateless: bool) -> None:
        self.broker_info.labels(str(node_id), az or "", "true" if stateless else "false").set(1)

    def observe_request(self, api_key: int, seconds: float) -> None:
        pair = self._per_api.get(api_key)
        if pair is None:
            label = api_name(api_key)
            pair = self._per_api[api_key] = (self.requests.labels(label), self.request_seconds.labels(label))
        pair[0].inc()
        pair[1].observe(seconds)

    def observe_errors(self, api_key: int, codes: Iterable[int]) -> None:
        """Count the non-zero error codes of one response (protocol/error_codes.py finds them)."""
        for code in codes:
            child = self._per_error.get((api_key, code))
            if child is None:
                child = self._per_error[(api_key, code)] = self.request_errors.labels(
                    api_name(api_key), error_name(code)
                )
            child.inc()

    def observe_leader_assignment(self, before: PartitionStateRecord | None, after: PartitionStateRecord) -> None:
        """The controller wrote `after` over `before` (None: a new partition state)."""
        if after.leader == NO_LEADER or (before is not None and before.leader == after.leader):
            return
        self.leader_elections.inc()
        if before is not None and after.leader not in before.isr:
            self.unclean_leader_elections.inc()

    def observe_isr_change(self, before: Collection[int], after: Collection[int]) -> None:
        """A leader's ISR change was confirmed by the metadata store."""
        if len(after) < len(before):
            self.isr_shrinks.inc()
        elif len(after) > len(before):
            self.isr_expands.inc()

    def observe_object_request(self, operation: str, outcome: str, seconds: float, nbytes: int) -> None:
        """The object stores' RequestObserver."""
        self.object_store_requests.labels(operation, outcome).inc()
        self.object_store_request_seconds.labels(operation).observe(seconds)
        if nbytes:
            self.object_store_bytes.labels("up" if operation.startswith("put") else "down").inc(nbytes)


def offline_partitions(leaders: Iterable[int], live: Collection[int]) -> int:
    """Partitions whose leader is none or not a live broker (`leaders`: each partition's)."""
    return sum(1 for leader in leaders if leader == NO_LEADER or leader not in live)


def under_min_isr_partitions(led: Iterable[tuple[int, int]]) -> int:
    """Led partitions with fewer in-sync replicas than required (`led`: (ISR size, min.insync.replicas))."""
    return sum(1 for isr_size, min_isr in led if isr_size < min_isr)


class LedPartitionSeries:
    """Per-partition gauges ({topic, partition}) that only each partition's leader reports.

    Made at scrape time from `source` (the mode switcher's rows of the partitions led now,
    read on the event loop, where the metrics listener runs): a partition no longer led
    here (another broker leads and reports it, or it was deleted) has no series, so summing
    over the cluster never counts a partition twice, and nothing is spent per partition
    between scrapes (issue 28: setting seven labelled gauges per led partition twice a
    second held the event loop 0.6 s a pass at 2,000 partitions)."""

    def __init__(self, *gauges: tuple[str, str]) -> None:
        self._gauges = gauges  # (name, help), in the order of each row's values
        # (topic, partition) -> one value per gauge, in the constructor's order
        self.source: Callable[[], Mapping[tuple[str, str], Sequence[float]]] | None = None

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        rows = self.source() if self.source is not None else {}
        for (topic, partition), values in rows.items():
            for family, value in zip(families, values):
                family.add_metric([topic, partition], value)
        return iter(families)

    def _families(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(name, doc, labels=["topic", "partition"]) for name, doc in self._gauges]


# What the group coordinator reports at scrape time: (group, topic, partition, committed
# offset) of every replicated commit, and (group, members) of every group it coordinates.
GroupRows = tuple[Iterable[tuple[str, str, int, int]], Iterable[tuple[str, int]]]


class GroupStateCollector:
    """shoal_group_committed_offset and shoal_group_members, read from the coordinator's
    in-memory state at scrape time: a group's series exist only on its coordinator, and
    vanish with its offsets (deleted, expired) or when coordination moves away."""

    def __init__(self) -> None:
        self.source: Callable[[], GroupRows] | None = None

    def describe(self) -> Iterator[Metric]:
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        offsets, members = self._families()
        if self.source is not None:
            committed, sizes = self.source()
            for group, topic, partition, offset in committed:
                offsets.add_metric([group, topic, str(partition)], offset)
            for group, count in sizes:
                members.add_metric([group], count)
        return iter((offsets, members))

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "shoal_group_committed_offset",
                "Latest replicated committed offset of a group's partition, on the group's coordinator.",
                labels=["group", "topic", "partition"],
            ),
            GaugeMetricFamily(
                "shoal_group_members", "Members of a group, on the group's coordinator.", labels=["group"]
            ),
        )


class CountCollector:
    """A gauge counting things by one label at scrape time, from what `watch` gave: every
    value of `always` is reported (0 when nothing has it), so the series exist from the
    start and a state that empties reads 0 rather than vanishing."""

    def __init__(self, name: str, documentation: str, label: str) -> None:
        self._name, self._documentation, self._label = name, documentation, label
        self._source: Callable[[], Iterable[str]] | None = None
        self._always: tuple[str, ...] = ()

    def watch(self, source: Callable[[], Iterable[str]], always: Iterable[str] = ()) -> None:
        """`source`: the label value of each thing counted, read at every scrape."""
        self._source, self._always = source, tuple(always)

    def describe(self) -> Iterator[Metric]:
        return iter((GaugeMetricFamily(self._name, self._documentation, labels=[self._label]),))

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self._name, self._documentation, labels=[self._label])
        if self._source is not None:
            counts = dict.fromkeys(self._always, 0)
            for value in self._source():
                counts[value] = counts.get(value, 0) + 1
            for value, count in sorted(counts.items()):
                family.add_metric([value], count)
        return iter((family,))


class LoopLagMonitor:
    """Sleeps LOOP_LAG_INTERVAL_S at a time through the injected clock and observes how late
    it woke: the time other work held the event loop (CPU-bound handlers, blocking calls)."""

    def __init__(self, clock: Clock, histogram: Histogram, interval_s: float = LOOP_LAG_INTERVAL_S) -> None:
        self._clock = clock
        self._histogram = histogram
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run(), name="event-loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def run(self, rounds: int | None = None) -> None:
        """Observe forever (`rounds`: that many times, for tests)."""
        while rounds is None or rounds > 0:
            started = self._clock.monotonic()
            await self._clock.sleep(self._interval_s)
            self._histogram.observe(max(0.0, self._clock.monotonic() - started - self._interval_s))
            if rounds is not None:
                rounds -= 1


class MetricsServer:
    """Serves /metrics, /healthz (process alive) and /readyz (broker serving, and the object
    store usable; a 503 says why not)."""

    def __init__(self, metrics: BrokerMetrics, not_ready: Callable[[], str | None]) -> None:
        self._metrics = metrics
        self._not_ready = not_ready  # None when ready, else why not
        self._server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port, reuse_address=True)

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request_line.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) >= 2 else ""
            status, body, content_type = self._route(parts[0] if parts else "", path)
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (asyncio.TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()

    def _route(self, method: str, path: str) -> tuple[str, bytes, str]:
        if method != "GET":
            return "405 Method Not Allowed", b"only GET\n", "text/plain"
        if path == "/metrics":
            return "200 OK", generate_latest(self._metrics.registry), CONTENT_TYPE_LATEST
        if path == "/healthz":
            return "200 OK", b"ok\n", "text/plain"
        if path == "/readyz":
            reason = self._not_ready()
            if reason is None:
                return "200 OK", b"ready\n", "text/plain"
            return "503 Service Unavailable", f"not ready: {reason}\n".encode(), "text/plain"
        return "404 Not Found", b"not found\n", "text/plain"
