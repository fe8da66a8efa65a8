"""Real brokers in one simulation: the broker-level world for cluster scenarios.

Every broker is the real `broker.broker.Broker`, built from a real configuration, with only
its `Environment` swapped (STYLE 4): the SimClock, a seeded random source, one shared
in-memory metadata store and object store behind the fault seams (every broker reaches the
same ones, as with etcd and S3), and the simulated network for the inter-broker RPC. Each
broker runs as a sim node, so `crash` is kill -9 (its tasks freeze, its connections break,
its data directory stays as the page cache left it) and `restart` starts a new process on
the same directory. `stop` is SIGTERM instead: the broker's controlled shutdown (it keeps
serving while its leaderships move), then its clean stop. Clients talk to a broker through
its real listener code (`kafka.SimConnection`: server.KafkaConnection over a fake transport).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from broker.broker import Broker, ShutdownOutcome
from broker.config import load_config
from broker.environment import Environment
from broker.metadata.store import Lease, LeaseKeepAlive
from broker.tiering.runner import TieringJobs
from broker.peer_service import PeerRequest, PeerResponse
from broker.rpc.server import OnBytes

from .loop import SimNode
from .metadata import FaultyMetadataStore, MetadataFaults, build_metadata_store
from .network import NetFaults, SimNetwork, SimRpcPool
from .nodes import as_node, crash, new_node, spawn
from .objectstore import ObjectStoreFaults, SimObjectStore, build_object_store
from .runner import Sim

RPC_PORT = 9093
KAFKA_PORT = 9092

# Settings that make a few virtual minutes show what a production day shows, and keep a
# seed cheap: small internal topics, quick failure detection.
SIM_SETTINGS = {
    "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "3",
    "group.initial.rebalance.delay.ms": "0",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "2000",
    "replica.lag.time.max.ms": "10000",
    "metrics.listen": None,
}


class SimPeers:
    """PeerTransport over the simulated network for one broker (a node)."""

    def __init__(self, network: SimNetwork, node_id: int) -> None:
        self._network = network
        self._node_id = node_id
        self._serving = False

    def client_pool(self, on_bytes: OnBytes | None) -> SimRpcPool[Any, Any]:
        return self._network.pool(self._node_id, PeerRequest, PeerResponse)

    async def serve(self, handler: Callable[[Any], Awaitable[Any]]) -> None:
        self._network.serve(self._node_id, _host(self._node_id), RPC_PORT, handler, PeerRequest, PeerResponse)
        self._serving = True

    async def stop(self) -> None:
        if self._serving:
            self._network.stop_serving(_host(self._node_id), RPC_PORT)
            self._serving = False


class SharedMetadata:
    """One broker's handle on the cluster's metadata store: everything passes through to
    the shared (faulty) store, except that closing it closes only this broker's lease
    keep-alives, never the store the others use."""

    def __init__(self, shared: FaultyMetadataStore) -> None:
        self._shared = shared
        self._keepers: list[LeaseKeepAlive] = []

    def start_keep_alive(self, lease: Lease) -> LeaseKeepAlive:
        keeper = self._shared.start_keep_alive(lease)
        self._keepers.append(keeper)
        return keeper

    async def close(self) -> None:
        for keeper in self._keepers:
            await keeper.stop()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shared, name)


class SharedObjects:
    """One broker's handle on the cluster's object store (closing it closes nothing)."""

    def __init__(self, shared: Any) -> None:
        self._shared = shared

    async def close(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shared, name)


@dataclass
class SimBroker:
    node_id: int
    az: str
    node: SimNode
    broker: Broker
    started: asyncio.Task[None]

    @property
    def running(self) -> bool:
        return self.started.done() and self.started.exception() is None


@dataclass
class SimCluster:
    sim: Sim
    azs: list[str]
    settings: dict[str, str | None]
    metadata: FaultyMetadataStore
    objects: SimObjectStore
    network: SimNetwork
    brokers: dict[int, SimBroker] = field(default_factory=dict)
    down: set[int] = field(default_factory=set)  # crashed and not restarted
    # client connections by broker: a killed process's sockets are reset by the kernel
    client_connections: dict[int, list[Any]] = field(default_factory=dict)
    # node id, incarnation -> the tiering jobs of that broker process (None: Spark, never in a sim)
    tiering_jobs: Callable[[int, int], TieringJobs] | None = None

    @classmethod
    def build(
        cls,
        sim: Sim,
        *,
        azs: list[str],
        settings: dict[str, str] | None = None,
        metadata_faults: MetadataFaults | None = None,
        object_faults: ObjectStoreFaults | None = None,
        net_faults: NetFaults | None = None,
    ) -> "SimCluster":
        metadata = build_metadata_store(sim.fork("metadata"), sim.trace, sim.clock, faults=metadata_faults)
        objects = build_object_store(sim.fork("objects"), sim.trace, sim.clock, faults=object_faults)
        network = SimNetwork(sim.fork("network"), sim.trace, faults=net_faults)
        return cls(sim, azs, {**SIM_SETTINGS, **(settings or {})}, metadata, objects, network)

    def start(self, node_id: int) -> SimBroker:
        """Start broker `node_id` (a new process: a new node incarnation) in its AZ."""
        az = self.azs[node_id % len(self.azs)]
        config = load_config(
            environ={},
            overrides={
                **self.settings,
                "node.id": str(node_id),
                "az": az,
                "listen": f"{_host(node_id)}:{KAFKA_PORT}",
                "rpc.listen": f"{_host(node_id)}:{RPC_PORT}",
                "data.dir": str(self.sim.tmp / f"broker-{node_id}"),
                "metadata": "etcd://sim:2379/shoal",
            },
        )
        node = new_node(self.sim.loop, node_id)
        self.network.restart(node_id)
        with as_node(node):
            env = Environment(
                clock=self.sim.clock,
                random=self.sim.fork(f"broker-{node_id}-{node.incarnation}"),
                metadata=SharedMetadata(self.metadata),  # type: ignore[arg-type]
                objects=SharedObjects(self.objects.new_client()),  # type: ignore[arg-type]
                peers=SimPeers(self.network, node_id),
                tiering_jobs=self.tiering_jobs(node_id, node.incarnation) if self.tiering_jobs else None,
            )
            broker = Broker(config, env=env)
        started = spawn(node, broker.start(serve_clients=False), name=f"broker-{node_id}-start")
        started.add_done_callback(_retrieve)  # a failed start is the supervisor's business (supervise)
        self.brokers[node_id] = SimBroker(node_id, az, node, broker, started)
        self.down.discard(node_id)
        self.sim.trace.record("cluster", "broker %d started (incarnation %d) in %s", node_id, node.incarnation, az)
        return self.brokers[node_id]

    async def stop(self, node_id: int, stop_timeout_s: float = 120.0) -> ShutdownOutcome | None:
        """SIGTERM: what `broker.broker.run` does on a signal. The controlled shutdown runs
        while the broker serves; then its listener closes (clients are refused from here)
        and it stops cleanly, after which the process is gone. A stop that hangs longer than
        `stop_timeout_s` (a supervisor's grace period) ends in kill -9."""
        sim_broker = self.brokers[node_id]
        broker = sim_broker.broker
        self.sim.trace.record("cluster", "broker %d asked to stop (SIGTERM)", node_id)
        outcome = await spawn(sim_broker.node, broker.controlled_shutdown(), name=f"broker-{node_id}-drain")
        self.sim.trace.record("cluster", "broker %d controlled shutdown: %s", node_id, outcome)
        if outcome is not None and not outcome.timed_out and not outcome.peers_behind:
            self._check_peers_name_new_leaders(node_id)
        self.down.add(node_id)  # the listener closes now: new connections are refused
        stopping = spawn(sim_broker.node, broker.stop(), name=f"broker-{node_id}-stop")
        try:
            await asyncio.wait_for(asyncio.shield(stopping), stop_timeout_s)
        except TimeoutError:
            self.sim.trace.record("cluster", "broker %d did not stop within %.0f s: killed", node_id, stop_timeout_s)
        crash(self.sim.loop, sim_broker.node, self.network)  # the process exits: whatever is left goes
        self._release_files(node_id)
        self._reset_clients(node_id)
        self.sim.trace.record("cluster", "broker %d stopped", node_id)
        return outcome

    def _check_peers_name_new_leaders(self, node_id: int) -> None:
        """A controlled shutdown that did not time out and heard from every peer closes the
        listener only once no running broker's view names it the leader of a partition it
        has handed over: a client it drops learns the new leader from whichever broker it
        asks next."""
        stopping = self.brokers[node_id].broker
        kept = stopping._led_here()
        for other_id, other in sorted(self.brokers.items()):
            if other_id == node_id or other_id in self.down or other_id not in stopping.view.brokers:
                continue
            stale = sorted(
                pid
                for pid, state in other.broker.view.partitions.items()
                if state.record.leader == node_id and pid not in kept
            )
            if stale:
                raise AssertionError(
                    f"broker {node_id} closed its listener while broker {other_id} still named it leader of {stale[:5]}"
                )

    def crash(self, node_id: int) -> None:
        """kill -9 (the process's data-dir lock goes with it)."""
        crash(self.sim.loop, self.brokers[node_id].node, self.network)
        self._release_files(node_id)
        self._reset_clients(node_id)
        self.down.add(node_id)
        self.sim.trace.record("cluster", "broker %d killed", node_id)

    async def supervise(self) -> None:
        """What a process supervisor (systemd, Kubernetes) does: a broker whose start failed
        (it exits, e.g. when the metadata store did not answer) is started again."""
        while True:
            await asyncio.sleep(1.0)
            for node_id, sim_broker in sorted(self.brokers.items()):
                started = sim_broker.started
                if node_id not in self.down and started.done() and started.exception() is not None:
                    self.sim.trace.record(
                        "cluster", "broker %d exited at start (%s): starting it again", node_id, started.exception()
                    )
                    crash(self.sim.loop, sim_broker.node, self.network)
                    self._release_files(node_id)
                    self._reset_clients(node_id)
                    self.start(node_id)

    def _reset_clients(self, node_id: int) -> None:
        for conn in self.client_connections.pop(node_id, []):
            conn.reset("connection reset by peer (the broker process died)")

    def _release_files(self, node_id: int) -> None:
        """What the kernel does when a process dies: its file descriptors close (so its
        data-dir lock goes), nothing is flushed."""
        broker = self.brokers[node_id].broker
        for partition in broker.replica_manager.partitions.values():
            partition.log._close_without_flush()
        if broker.data_dir is not None:
            broker.data_dir.close()

    @contextlib.contextmanager
    def running(self) -> Iterator["SimCluster"]:
        """The cluster's lifetime in a scenario: supervised while it runs, every process
        gone at the end, however the scenario ends."""
        supervisor = asyncio.get_running_loop().create_task(self.supervise(), name="supervisor")
        try:
            yield self
        finally:
            supervisor.cancel()
            self.close()

    def close(self) -> None:
        """The end of the run: every broker process goes (thousands of seeds run in one
        process, which must not keep their files open)."""
        for node_id in sorted(self.brokers):
            if node_id not in self.down:
                crash(self.sim.loop, self.brokers[node_id].node, self.network)
                self._release_files(node_id)
                self.down.add(node_id)

    def live(self) -> list[SimBroker]:
        return [b for i, b in sorted(self.brokers.items()) if i not in self.down and b.running]

    async def wait_started(self) -> None:
        """Until every broker not crashed on purpose runs (the supervisor restarts failed starts)."""
        while any(node_id not in self.down and not b.running for node_id, b in self.brokers.items()):
            await asyncio.sleep(0.1)

    def leader_broker(self, topic: str, partition: int) -> Broker | None:
        """The live broker that leads the partition now, if any (the auditor's oracle)."""
        for candidate in self.live():
            hosted = candidate.broker.replica_manager.partitions.get((topic, partition))
            if hosted is not None and hosted.leader_state is not None:
                return candidate.broker
        return None


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


def _host(node_id: int) -> str:
    return f"broker{node_id}"
