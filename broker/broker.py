"""The broker process: wires configuration, metadata, partitions, the Kafka listener and
the metrics listener together, and owns start-up and graceful shutdown order.

Everything outside the broker's own logic (clock, randomness and ids, metadata store,
object store, peers) comes from its `Environment`: the real ones for a process, a
simulated world in tests/sim.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import logging
import uuid
from typing import Any, NamedTuple, cast

from . import __version__
from .clock import Clock
from .cluster import elections
from .cluster.controller import Controller
from .cluster.peer_views import wait_for_peer_views
from .cluster.registration import Membership
from .cluster.placement import assign_replicas
from .cluster.view import ClusterView
from .config import BrokerConfig, ConfigError, parse_host_port
from .log.open_files import OpenFiles, log_file_bound
from .datadir import DataDir
from .wal.cache import ObjectCache
from .wal.commit import LocalCommitter
from .wal.reader import WalReader
from .wal.wal_writer import WalWriter
from .dispatch import answer_forwarded, dispatch
from .groups.coordinator import GroupCoordinator
from .handlers import load_all, write_txn_markers
from .environment import Environment
from .metadata import KeyValue, MetadataError, MetadataStore, MetadataUnavailable, RevisionConflict
from .metadata import records
from .metrics import BrokerMetrics, LoopLagMonitor, MetricsServer, offline_partitions, under_min_isr_partitions
from .objectstore import ObjectStore
from .objectstore.probe import store_problem
from .partition import Partition
from .partition_ids import TopicIdPartition, TopicPartition
from .producer_ids import ProducerIdAllocator
from .producers.barriers import SequenceBarriers
from .protocol.api_keys import ApiKey
from .protocol.header import RequestHeader
from .transactions.coordinator import WRITE_TXN_MARKERS_VERSION, TransactionCoordinator
from .transactions.metadata import TxnState
from .replica_manager import ReplicaManager
from .routing.cross_az import CrossAzBytes
from .routing.request_forwarding import forward
from .reads.read_service import ReplicaReadService
from .routing.router import AzRouter
from .replication.fetcher import ReplicaFetcher
from .replication.isr import IsrUpdater
from .modes.switch import ModeSwitcher
from .replication.leader_service import ReplicaFetchService
from .replication.messages import ReplicaFetchRequest, ReplicaFetchResponse
from .peer_service import PeerRequest, PeerResponse, PeerService
from .wal.commit_router import CommitRouter
from .rpc import RpcClientPool, RpcError, RpcUnavailable
from .transactions import permits as txn_permits
from .transactions.messages import TxnPermitRequest, TxnPermitResponse
from .server import KafkaServer, ServerLimits
from .topics import TopicCatalog
from .waiters import FetchWaiters
from .tiering.reader import TieredReader
from .tiering.runner import SparkJobRunner
from .tiering.service import OffloadService, OffloadSettings
from .walfiles.cluster import ClusterReferences
from .walfiles.manager import ManagerSettings, WalFileManager
from .walfiles.reporter import RecentUploads, ReferenceReporter
from walfiles.keys import SEQUENCE_MODULUS, WalKeyAllocator, wal_prefix

log = logging.getLogger(__name__)

START_RETRY_MIN_S, START_RETRY_MAX_S = 0.5, 10.0  # backoff while the metadata store is unreachable at start
_OPENING = "opening partitions"  # a start step /readyz reports with its progress
STORE_PROBE_INTERVAL_S = 10.0  # how often the object store is probed (/readyz, shoal_object_store_usable)
CONTROLLED_SHUTDOWN_POLL_S = 0.05  # how often a controlled shutdown looks at what it still leads
STARTUP_CATCH_UP_MS = 30_000  # how long a starting broker waits for its view to reach the store


class ShutdownOutcome(NamedTuple):
    """What a controlled shutdown achieved: leaderships moved away, partitions still led
    here at the end, how many of those another replica could have taken, whether it timed
    out (with leaderships left to move or be taken up, its own view behind the store, or a
    last leadership change the peers were not asked about), how long it took, and how many
    peers might still name this broker leader (their view was behind at the end, or they
    did not answer)."""

    moved: int
    remain: int
    movable: int
    timed_out: bool
    elapsed_ms: int
    peers_behind: int


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock | None = None, env: Environment | None = None) -> None:
        load_all()
        self.config = config
        # First, before anything reads or writes the data dir: lock it (a second broker on it
        # stops here) and check that it is this node's.
        self.data_dir = None if config.stateless else DataDir.open(config.data_path, config.node_id)
        self.metrics = BrokerMetrics()
        self.metrics.set_broker_info(config.node_id, config.az, config.stateless)
        if env is None:
            env = Environment.for_process(config, on_object_request=self.metrics.observe_object_request)
            if clock is not None:
                env.clock = clock
        self.env = env
        self.clock: Clock = env.clock
        self.loop_lag = LoopLagMonitor(self.clock, self.metrics.event_loop_lag)
        self.store: MetadataStore = env.metadata
        self.catalog = TopicCatalog(self.store, config, new_uuid=env.new_uuid)
        self.view = ClusterView(self.store, self.catalog, self.clock)
        self.catalog.on_states_written = self._apply_written
        self.waiters = FetchWaiters()
        try:  # before any partition opens a file: the process's descriptor limit decides the bound
            bound = None if config.stateless else log_file_bound(config.log_open_files_max)
            self.open_files = OpenFiles(bound, on_reopen=self.metrics.log_file_reopens.inc)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        self.metrics.log_open_files.set_function(lambda: len(self.open_files))
        self.metrics.log_open_files_max.set(self.open_files.limit or 0)
        self.replica_manager = ReplicaManager(
            config,
            self.catalog,
            self.view,
            self.clock,
            self.metrics,
            self.waiters,
            env.new_uuid,
            self.open_files,
            heap=env.heap,
        )
        self.incarnation = env.new_uuid().hex
        self.router = AzRouter(self.view, config.az)
        self.membership = Membership(
            self.store,
            self._registration(),
            config.broker_session_timeout_ms,
            config.broker_heartbeat_interval_ms,
            self.view.apply_put,
            self.clock,
        )
        self.controller = Controller(
            self.store, self.view, self.catalog, self.membership, config, self.clock, env.random
        )
        self.controller.metrics = self.metrics
        self.isr = IsrUpdater(
            self.store, self.view, self.replica_manager, self.clock, config.replica_lag_time_max_ms, self.metrics
        )
        self.mode_switcher = ModeSwitcher(
            self.replica_manager, self.catalog, self.view, self.store, self.clock, self.metrics
        )
        self.cross_az = CrossAzBytes(self.metrics.cross_az_bytes, self.view, config.az)
        self.rpc_pool: RpcClientPool[PeerRequest, PeerResponse] = env.peers.client_pool(self.cross_az.rpc_bytes)
        self.replication_pool: RpcClientPool[PeerRequest, PeerResponse] = env.peers.client_pool(
            self.cross_az.replication_bytes
        )
        self.view.on_brokers_changed(self._forget_departed_peers)
        # One pool per peer for every message kind; the fetcher sends only ReplicaFetchRequest,
        # which the peer answers with a ReplicaFetchResponse.
        fetch_pool = cast("RpcClientPool[ReplicaFetchRequest, ReplicaFetchResponse]", self.replication_pool)
        self.fetcher = ReplicaFetcher(config, self.view, fetch_pool, self.metrics, self.cross_az, self.clock)
        self.replica_manager.on_role_changed(self.fetcher.on_role_changed)
        self.replica_service = ReplicaFetchService(
            self.catalog,
            self.replica_manager,
            self.waiters,
            self.isr,
            self.clock,
            max_sessions=config.max_incremental_fetch_session_cache_slots,
            new_session_id=lambda: self.env.random.randrange(1, 1 << 31),
        )
        self.replica_manager.on_role_changed(self.replica_service.on_role_changed)
        self.metrics.replica_fetch_sessions.set_function(lambda: len(self.replica_service.sessions))
        self.metrics.controller_active.set_function(lambda: 1 if self.controller.active else 0)
        self.metrics.leader_partitions.set_function(
            lambda: sum(1 for p in self.replica_manager.partitions.values() if p.leader_state is not None)
        )
        self.metrics.under_replicated_partitions.set_function(
            lambda: sum(
                1
                for p in self.replica_manager.partitions.values()
                if p.leader_state is not None and len(p.isr) < len(p.replicas)
            )
        )
        self.metrics.under_min_isr_partitions.set_function(
            lambda: under_min_isr_partitions(
                (len(p.isr), p.settings.min_insync_replicas)
                for p in self.replica_manager.partitions.values()
                if p.leader_state is not None
            )
        )
        self.metrics.offline_partitions.set_function(
            lambda: (
                offline_partitions(
                    (state.record.leader for state in self.view.partitions.values()),
                    {b.node_id for b in self.view.brokers.values() if not b.stateless},
                )
                if self.controller.active
                else 0
            )
        )
        self.producer_ids = ProducerIdAllocator(self.store)
        self.groups = GroupCoordinator(
            config,
            self.catalog,
            self.view,
            self.replica_manager,
            self.clock,
            self.metrics,
            self.assign_replicas,
            env.new_uuid,
        )
        self.metrics.group_state.source = self.groups.metric_rows
        self.transactions = TransactionCoordinator(
            config,
            self.catalog,
            self.view,
            self.replica_manager,
            self.clock,
            self.producer_ids,
            self.assign_replicas,
            self._send_txn_markers,
            self._send_txn_permits,
        )
        self.metrics.transactions.watch(
            lambda: (txn.state.value for txn in self.transactions.transactions()), (s.value for s in TxnState)
        )
        self.objects: ObjectStore = env.objects
        self.cache = ObjectCache(
            config.cache_max_bytes,
            on_hit=lambda n: self.metrics.cache_requests.labels("hit").inc(),
            on_miss=lambda n: self.metrics.cache_requests.labels("miss").inc(),
        )
        self.metrics.cache_bytes.set_function(lambda: self.cache.size_bytes)
        self.tiered_reader = TieredReader(
            env.objects, lambda: self.cluster_id, self.cache, on_get=self.metrics.tiered_read_bytes.inc
        )
        self.read_service = ReplicaReadService(self.catalog, self.replica_manager, self.waiters, self.tiered_reader)
        self.committer = LocalCommitter(
            self.catalog,
            self.replica_manager,
            self.clock,
            config.wal_commit_deadline_ms,
            verify_txn=config.transaction_partition_verification_enable,
        )
        self.commit_router = CommitRouter(
            self.node_id, self.committer, self.view, self.rpc_pool, self.metrics, self.incarnation
        )
        self.uploads = RecentUploads()
        self.reference_reporter = ReferenceReporter(
            self.node_id, self.replica_manager, self.clock, config.wal_commit_deadline_ms, self.uploads
        )
        self.peers = PeerService(
            self.replica_service,
            self.committer,
            self.read_service,
            lambda message: answer_forwarded(self, message),
            self.reference_reporter,
            self.node_id,
            lambda: self.view.applied_revision,
            lambda request: txn_permits.answer(self.replica_manager, self.node_id, request),
        )
        self.wal_files = WalFileManager(
            node_id=self.node_id,
            store=env.objects,
            wal_prefix=self._wal_prefix,
            references=ClusterReferences(self.node_id, self.view, self.catalog, self.rpc_pool, self.reference_reporter),
            holds_controller=self._holds_controller,
            is_controller=lambda: self.controller.active,
            settings=ManagerSettings.from_config(config),
            clock=self.clock,
            metrics=self.metrics,
        )
        self.cluster_id = ""
        self.offload = OffloadService(
            partitions=lambda: list(self.replica_manager.partitions.values()),
            store=env.objects,
            cluster_id=lambda: self.cluster_id,
            runner=env.tiering_jobs
            or SparkJobRunner(
                config.object_store_url,
                config.tiering_spark_master,
                config.tiering_spark_submit,
                config.tiering_job_timeout_ms,
            ),
            settings=OffloadSettings.from_config(config),
            clock=self.clock,
            metrics=self.metrics,
            new_uuid=env.new_uuid,
            leads=self._leads,
        )
        self.wal: WalWriter  # needs the cluster id: made in start()
        self.wal_reader: WalReader
        self.server = KafkaServer(
            functools.partial(dispatch, self), ServerLimits.from_config(config), self.metrics, self.clock
        )
        self.metrics.connections_paused.set_function(lambda: self.server.paused_connections)
        self.ready = False
        self._start_step = "opening the metrics listener"  # what start() waits for now, for /readyz
        self.store_problem: str | None = None  # why the object store cannot be used (None: it can)
        self._store_watch: asyncio.Task[None] | None = None
        self.metrics_server = MetricsServer(self.metrics, self._not_ready)
        self.stopping = False

    @property
    def node_id(self) -> int:
        return self.config.node_id

    async def start(self, serve_clients: bool = True) -> None:
        """`serve_clients` False: no Kafka listener (a simulation connects to `server` itself)."""
        if self.config.metrics_listen:
            host, port = parse_host_port(self.config.metrics_listen, "metrics.listen")
            await self.metrics_server.start(host, port)
        self._start_step = "reading the cluster id from the metadata store"
        self.cluster_id = await self._cluster_id()
        await self._probe_store()
        self._store_watch = asyncio.get_running_loop().create_task(self._watch_store(), name="object-store-probe")
        self.loop_lag.start()
        if self.data_dir is not None:
            self.data_dir.check_cluster(self.cluster_id, self._metadata_name())
        self._start_diskless()
        await self.env.peers.serve(self.peers.handle)
        self._start_step = "loading the cluster's metadata"
        await self.view.start()
        self._start_step = "registering (an earlier registration of this node must expire first)"
        await self.membership.start()
        self._start_step = "catching up with the metadata store"
        await self._catch_up_before_taking_roles()
        self._start_step = _OPENING
        await self.replica_manager.start()
        self._start_step = "starting the coordinators"
        await self.controller.step()  # a lone or first broker leads its partitions before serving
        self.controller.start()
        self.isr.start()
        self.mode_switcher.start()
        await self.groups.start()
        await self.transactions.start()
        if self.config.wal_file_manager_enable:
            self.wal_files.start()
        if self.config.tiering_enable and not self.config.stateless:
            self.offload.start()
        host, port = parse_host_port(self.config.listen, "listen")
        if serve_clients:
            await self.server.start(host, port)
            port = self.server.port  # the bound one (a configured 0 picks a free port)
        self.ready = True
        log.info(
            "shoal %s: broker %d serving Kafka on %s:%d (advertised %s:%d), cluster %s, %d partitions (%d led)",
            __version__,
            self.node_id,
            host,
            port,
            *self.config.advertised,
            self.cluster_id,
            len(self.replica_manager.partitions),
            sum(1 for p in self.replica_manager.partitions.values() if p.leader_state is not None),
        )

    async def _catch_up_before_taking_roles(self) -> None:
        """Registering can take seconds (an earlier incarnation's lease must lapse), and the
        view listed before that may lag the store by the changes made meanwhile: a restarted
        broker that took roles from it led partitions in epochs that had moved on and answered
        producers from a stale producer state (OUT_OF_ORDER_SEQUENCE_NUMBER, fatal to an
        idempotent producer: cluster seed 301749). As a KRaft broker catches up with the
        metadata log before it is unfenced, wait until the view holds the store's latest
        change (at most STARTUP_CATCH_UP_MS; then go on, and its watch brings the rest)."""
        deadline = self.clock.monotonic_ms() + STARTUP_CATCH_UP_MS
        if await self.view.catch_up(deadline, CONTROLLED_SHUTDOWN_POLL_S) is None:
            log.warning(
                "broker %d: cluster view did not catch up with the metadata store in %d ms; starting from it anyway",
                self.node_id,
                STARTUP_CATCH_UP_MS,
            )

    def _not_ready(self) -> str | None:
        if not self.ready:
            if self.stopping:
                return "stopping"
            step = self._start_step
            if step == _OPENING:
                done, total = self.replica_manager.opening
                step = f"{_OPENING} ({done:,} of {total:,} partition states looked at)"
            return f"starting: {step}"
        if self.store_problem is not None:
            return f"the object store {self.config.object_store_url} cannot be used: {self.store_problem}"
        return None

    async def _probe_store(self) -> None:
        """Check the object store; log when the answer changes (a wrong bucket or credentials
        otherwise shows only as every diskless produce failing)."""
        problem = await store_problem(self.objects)
        if problem is not None and problem != self.store_problem:
            log.error(
                "the object store %s cannot be used (%s): /readyz answers 503 until it can; "
                "checked every %.0f s (check object.store, the bucket and the credentials)",
                self.config.object_store_url,
                problem,
                STORE_PROBE_INTERVAL_S,
            )
        elif problem is None and self.store_problem is not None:
            log.info("the object store %s answers again", self.config.object_store_url)
        self.store_problem = problem
        self.metrics.object_store_usable.set(1 if problem is None else 0)

    async def _watch_store(self) -> None:
        while True:
            await self.clock.sleep(STORE_PROBE_INTERVAL_S)
            await self._probe_store()

    async def controlled_shutdown(self) -> ShutdownOutcome | None:
        """Kafka's controlled shutdown, before `stop`: mark this broker's registration
        draining, so the controller moves the leadership of every partition it leads
        (classic, diskless, `__consumer_offsets`) to another live in-sync replica and gives
        it no new leadership, representation or controller role; keep serving meanwhile
        (what moved answers NOT_LEADER_OR_FOLLOWER, so clients refresh their metadata) until
        nothing it leads has another eligible replica, as the store has it (its own view
        catches up first), and every peer's view has the moves, or
        `controlled.shutdown.timeout.ms` passes; then hand the controller role over if it
        holds it. Skipped (None) when disabled, for a stateless broker (it leads nothing)
        and when no other broker could lead (a single broker, `local:` metadata)."""
        config = self.config
        if not config.controlled_shutdown_enable or config.stateless or not self.ready:
            return None
        if not any(
            b.node_id != self.node_id and not b.stateless and not b.draining for b in self.view.brokers.values()
        ):
            log.info("controlled shutdown: no other broker can take leadership; nothing to move")
            return None
        started = self.clock.monotonic_ms()
        deadline = started + config.controlled_shutdown_timeout_ms
        led_at_start = self._led_here()
        log.info("controlled shutdown: moving leadership of %d partitions", len(led_at_start))
        drained_at = 0  # the store revision of the draining registration
        while True:
            try:
                drained_at = await self.membership.drain()
                break
            except MetadataError as exc:
                if self.clock.monotonic_ms() >= deadline:
                    log.warning("controlled shutdown: could not mark this broker draining (%s)", exc)
                    break
            await self.clock.sleep(CONTROLLED_SHUTDOWN_POLL_S)
        confirmed: int | None = None  # a revision every peer's view has applied (once asked)
        while True:
            while self._still_moving(led_at_start) and self.clock.monotonic_ms() < deadline:
                await self.clock.sleep(CONTROLLED_SHUTDOWN_POLL_S)
            # Decide on the store's state, not on a view that may lag it (a slow or broken
            # watch): leaderships may have come here, or gone, unseen.
            caught_up = await self.view.catch_up(deadline, CONTROLLED_SHUTDOWN_POLL_S)
            in_time = caught_up is not None and self.clock.monotonic_ms() < deadline
            if in_time and self._still_moving(led_at_start):
                continue
            # Done once the peers have applied every leadership change to or from this broker
            # that the store held after they answered (one may come while they are asked).
            if in_time and confirmed is not None and self.view.leadership_changed_at(self.node_id) <= confirmed:
                break
            # The latest partition change this broker knows of: it also covers leaderships that
            # came to it while draining (a dead broker's, with no other in-sync replica) and left.
            moved_at = max(
                [drained_at, self.view.applied_revision] + [s.revision for s in self.view.partitions.values()]
            )
            behind = await wait_for_peer_views(self.node_id, self.view, self.rpc_pool, moved_at, deadline, self.clock)
            if not in_time or behind:
                break
            confirmed = moved_at
        unconfirmed = self.view.leadership_changed_at(self.node_id) > moved_at
        if caught_up is None:
            log.warning("controlled shutdown: this broker's view did not catch up with the metadata store in time")
        if behind:
            log.warning(
                "controlled shutdown: brokers %s may still name this broker leader (revision %d)", behind, moved_at
            )
        led = self._led_here()
        await self.controller.hand_over()
        elapsed = self.clock.monotonic_ms() - started
        moved = len(led_at_start - led)
        movable, waiting = self._movable_leaderships(), self._not_taken_up(led_at_start)
        timed_out = bool(movable or waiting) or caught_up is None or unconfirmed
        if timed_out:
            log.warning(
                "controlled shutdown timed out after %d ms: moved %d (%d not yet taken up by their new leader); "
                "%d remain led here, %d of them with another in-sync replica",
                elapsed,
                moved,
                len(waiting),
                len(led),
                len(movable),
            )
        else:
            log.info(
                "controlled shutdown: moved %d in %d ms; %d remain led here (no other in-sync replica)",
                moved,
                elapsed,
                len(led),
            )
        return ShutdownOutcome(moved, len(led), len(movable), timed_out, elapsed, len(behind))

    def _led_here(self) -> set[TopicIdPartition]:
        """The partitions the cluster view names this broker the leader of."""
        return {pid for pid, state in self.view.partitions.items() if state.record.leader == self.node_id}

    def _still_moving(self, led_at_start: set[TopicIdPartition]) -> bool:
        """Whether a controlled shutdown still waits for leaderships to move or be taken up."""
        return bool(self._movable_leaderships() or self._not_taken_up(led_at_start))

    def _not_taken_up(self, handed_over: set[TopicIdPartition]) -> list[TopicIdPartition]:
        """Of the partitions this broker led, those led elsewhere now whose new leader has not
        yet answered this broker's replica fetch in its epoch: its view may not have the
        change yet, nor that of the brokers clients ask for metadata. A new leader that is
        gone or draining itself is not waited for."""
        waiting = []
        for pid in handed_over:
            state = self.view.partitions.get(pid)
            successor = None if state is None else self.view.brokers.get(state.record.leader)
            if state is None or successor is None or successor.node_id == self.node_id or successor.draining:
                continue  # still ours, leaderless, or its new leader is gone or leaving too
            topic = self.catalog.by_id(uuid.UUID(pid[0]))
            hosted = None if topic is None else self.replica_manager.partitions.get(TopicPartition(topic.name, pid[1]))
            if (
                hosted is not None
                and hosted.leader_id == state.record.leader
                and hosted.fetched_in_epoch < state.record.leader_epoch
            ):
                waiting.append(pid)
        return waiting

    def _movable_leaderships(self) -> list[TopicIdPartition]:
        """Partitions led here that another live, in-sync, non-draining replica could lead."""
        live = {b.node_id for b in self.view.brokers.values() if not b.stateless}
        draining = {b.node_id for b in self.view.brokers.values() if b.draining} | {self.node_id}
        return [
            pid
            for pid, state in self.view.partitions.items()
            if state.record.leader == self.node_id and elections.movable_to(state.record, live, draining) is not None
        ]

    async def stop(self) -> None:
        """Stop accepting, answer in-flight requests (parked fetches return now), flush logs."""
        self.ready = False
        if self._store_watch is not None:
            self._store_watch.cancel()
        self.stopping = True
        self.waiters.notify_all()
        await self.wal_files.stop()
        await self.offload.stop()
        await self.transactions.stop()
        await self.groups.stop()
        await self.server.stop()
        log.info("broker %d: Kafka listener closed", self.node_id)
        await self.wal.close()
        self.replica_service.stop_answering()
        self.read_service.stopping = True
        await self.controller.stop()
        await self.membership.stop()  # followers and the controller learn of it now
        await self.isr.stop()
        await self.mode_switcher.stop()
        await self.fetcher.stop()
        await self.env.peers.stop()
        await self.rpc_pool.close()
        await self.replication_pool.close()
        await self.view.stop()
        await self.replica_manager.stop()
        await self.objects.close()
        await self.store.close()
        await self.loop_lag.stop()
        await self.metrics_server.stop()
        if self.data_dir is not None:
            self.data_dir.close()
        log.info("broker %d stopped cleanly", self.node_id)

    def _wal_prefix(self) -> str:
        return wal_prefix("", self.cluster_id)

    async def _holds_controller(self) -> bool:
        """Whether the store (read now, not the watched view) names this process the
        controller: the WAL file manager's fence before it deletes."""
        if not self.controller.active:
            return False
        current = await self.store.get(records.CONTROLLER_KEY)
        if current is None:
            return False
        holder = records.decode(current.value, records.ControllerRecord)
        return holder.node_id == self.node_id and holder.incarnation == self.membership.record.incarnation

    async def _leads(self, partition: Partition) -> bool:
        """Whether the store (read now, not the watched view) names this broker leader of the
        partition in the epoch it leads in: the tiering litter sweep's fence before it deletes
        files that no marker describes."""
        current = await self.store.get(records.partition_key(partition.topic_id, partition.index))
        if current is None:
            return False
        state = records.decode(current.value, records.PartitionStateRecord)
        return state.leader == self.node_id and state.leader_epoch == partition.leader_epoch

    def _metadata_name(self) -> str:
        """The metadata store, as an operator finds it."""
        if self.config.metadata == "local:":
            return f"local: {self.config.data_path / 'metadata' / 'store.json'}"
        return self.config.metadata

    def _registration(self) -> records.BrokerRecord:
        host, port = self.config.advertised
        rpc = self.config.rpc_advertised
        return records.BrokerRecord(
            records.RECORD_VERSION,
            self.node_id,
            self.config.az,
            host,
            port,
            rpc[0] if rpc else None,
            rpc[1] if rpc else 0,
            self.config.stateless,
            __version__,
            self.incarnation,
        )

    async def _send_txn_markers(self, node: int, request: Any) -> Any:
        """WriteTxnMarkers from the transaction coordinator to a partition leader: answered
        here when this broker leads, else forwarded over the inter-broker RPC."""
        header = RequestHeader(
            ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, 0, "shoal-txn-coordinator", forwarded=True
        )
        if node == self.node_id:
            return await write_txn_markers.handle(self, header, request)
        return await forward(self, node, header, request)

    async def _send_txn_permits(self, node: int, request: TxnPermitRequest) -> TxnPermitResponse:
        """Transaction permits from the coordinator to a partition leader: applied here when
        this broker leads, else sent over the inter-broker RPC."""
        if node == self.node_id:
            return txn_permits.answer(self.replica_manager, self.node_id, request)
        registration = self.view.brokers.get(node)
        if registration is None:
            raise RpcUnavailable(f"broker {node} is not registered")
        client = self.rpc_pool.get(node, registration.rpc_host or "", registration.rpc_port)
        answer = await client.call(request, txn_permits.ASK_TIMEOUT_S)
        if not isinstance(answer, TxnPermitResponse):
            raise RpcError(f"unexpected answer {type(answer).__name__} from broker {node}")
        return answer

    def assign_replicas(self, partitions: range | list[int], replication_factor: int) -> dict[int, list[int]]:
        """Rack-aware replicas for new partitions over the live brokers that store data."""
        brokers = [(b.node_id, b.az) for b in self.view.brokers.values() if not b.stateless]
        return assign_replicas(
            list(partitions), replication_factor, brokers, start=self.env.random.randrange(max(len(brokers), 1))
        )

    def _forget_departed_peers(self) -> None:
        live = self.view.live_ids()
        self.rpc_pool.retain(live)
        self.replication_pool.retain(live)

    async def _apply_written(self, written: list[KeyValue]) -> None:
        for kv in written:
            await self.view.apply_put(kv)

    def _start_diskless(self) -> None:
        config = self.config
        keys = WalKeyAllocator(
            "",
            self.cluster_id,
            self.node_id,
            self.clock.now_ms,
            first_sequence=self.env.random.randrange(SEQUENCE_MODULUS),
        )
        self.wal = WalWriter(
            self.objects,
            keys,
            self.commit_router,
            self.cache,
            self.metrics,
            buffer_max_bytes=config.wal_buffer_max_bytes,
            linger_ms=config.wal_linger_ms,
            max_inflight_bytes=config.wal_max_inflight_bytes,
            quiet_ms=config.wal_quiet_ms,
            quiet_min_bytes=config.wal_quiet_min_bytes,
            clock=self.clock,
            on_committed=self.uploads.record,
            barriers=SequenceBarriers(config.producer_sequence_barriers_max, self.clock.monotonic),
        )
        prefix = wal_prefix("", self.cluster_id)
        self.wal_reader = WalReader(self.objects, lambda object_id: prefix + object_id, self.cache)

    async def _cluster_id(self) -> str:
        """The cluster's id: read it, or create it as the first broker. Brokers of a new
        cluster start together, so the create is a compare-and-set and the loser (or a
        broker whose create had an unknown outcome) reads the winner's id."""
        while True:
            current = await self._first_read(records.CLUSTER_KEY)
            if current is not None:
                return records.decode(current.value, records.ClusterRecord).cluster_id
            if self.data_dir is not None:
                self.data_dir.refuse_new_cluster(self._metadata_name())
            cluster_id = _kafka_style_id(self.env.new_uuid())
            try:
                await self.store.put(
                    records.CLUSTER_KEY,
                    records.encode(records.ClusterRecord(records.RECORD_VERSION, cluster_id)),
                    expected_revision=0,
                )
                return cluster_id
            except (RevisionConflict, MetadataUnavailable) as exc:
                log.info("cluster id not created (%s): reading it again", exc)

    async def _first_read(self, key: str) -> KeyValue | None:
        """The broker's first metadata read, repeated with backoff (one line each) while the
        store cannot be reached: an etcd that starts after its brokers, or is briefly down
        during a rollout, delays a broker's start instead of failing it."""
        delay_s, attempt = START_RETRY_MIN_S, 1
        while True:
            try:
                return await self.store.get(key)
            except MetadataUnavailable as exc:
                log.warning(
                    "metadata store %s unreachable (%s): attempt %d, retrying in %.1f s",
                    self.config.metadata,
                    exc,
                    attempt,
                    delay_s,
                )
            await self.clock.sleep(delay_s)
            delay_s, attempt = min(delay_s * 2, START_RETRY_MAX_S), attempt + 1


def _kafka_style_id(value: uuid.UUID) -> str:
    """Kafka cluster ids are 22-char URL-safe base64 UUIDs."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


async def run(config: BrokerConfig) -> None:
    """Run until SIGINT/SIGTERM, then shut down gracefully."""
    import signal

    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutdown requested")
    stop.clear()
    draining = loop.create_task(broker.controlled_shutdown(), name="controlled-shutdown")
    again = loop.create_task(stop.wait(), name="second-signal")
    await asyncio.wait({draining, again}, return_when=asyncio.FIRST_COMPLETED)
    if not draining.done():
        log.warning("second shutdown signal: stopping without waiting for leadership to move")
        draining.cancel()
    again.cancel()
    outcome, _ = await asyncio.gather(draining, again, return_exceptions=True)
    if isinstance(outcome, Exception):
        log.error("controlled shutdown failed (%s); stopping anyway", outcome, exc_info=outcome)
    await broker.stop()
