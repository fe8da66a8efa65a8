"""Prometheus metrics and the metrics listener (`/metrics`, `/healthz`, `/readyz`).

Every metric is documented in docs/metrics.md (a test enforces it). The HTTP side is a
few lines of asyncio on purpose: three fixed GET routes do not justify a web framework.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("shoal_requests", "Kafka requests handled, by API key.", ["api_key"], registry=r)
        self.request_seconds = Histogram(
            "shoal_request_seconds",
            "Time to handle a Kafka request, by API key.",
            ["api_key"],
            buckets=_LATENCY_BUCKETS,
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
        # Cluster and replication
        self.replication_bytes = Counter(
            "shoal_replication_fetched_bytes",
            "Partition-log entry bytes this broker copied from leaders as a follower.",
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
        self.partition_diskless = Gauge(
            "shoal_partition_diskless",
            "1 when a partition led here is appended in diskless mode, 0 in classic.",
            ["topic", "partition"],
            registry=r,
        )
        self.partition_mode_since = Gauge(
            "shoal_partition_mode_since_offset",
            "Offset of the mode marker of a led partition's last switch (-1: never switched).",
            ["topic", "partition"],
            registry=r,
        )
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
        self.cache_requests = Counter(
            "shoal_cache_requests", "Object cache lookups, by result (hit, miss).", ["result"], registry=r
        )
        self.cache_bytes = Gauge("shoal_cache_bytes", "Bytes held by the object cache.", registry=r)
        # The WAL file manager (walgc/): set on the broker that runs it (the controller); the
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
        self.tiering_job_seconds = Histogram(
            "shoal_tiering_job_seconds",
            "Wall time of a tiering job (plan written to result read).",
            buckets=(5, 10, 20, 30, 60, 120, 300, 600, 1800),
            registry=r,
        )
        self.tiering_segments = Counter(
            "shoal_tiering_segments",
            "Tiered segments committed or deleted by this broker as leader, by event (committed, deleted).",
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
        self._per_api: dict[int, tuple[Counter, Histogram]] = {}

    def observe_request(self, api_key: int, seconds: float) -> None:
        pair = self._per_api.get(api_key)
        if pair is None:
            label = str(api_key)
            pair = self._per_api[api_key] = (self.requests.labels(label), self.request_seconds.labels(label))
        pair[0].inc()
        pair[1].observe(seconds)

    def observe_object_request(self, operation: str, outcome: str, seconds: float, nbytes: int) -> None:
        """The object stores' RequestObserver."""
        self.object_store_requests.labels(operation, outcome).inc()
        self.object_store_request_seconds.labels(operation).observe(seconds)
        if nbytes:
            self.object_store_bytes.labels("up" if operation.startswith("put") else "down").inc(nbytes)


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
