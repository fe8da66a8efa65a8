"""Many brokers' control planes in one simulation: registration, metadata watch and controller
without partitions, logs or listeners (issue 28 item 5).

Three hundred whole brokers holding 100,000 partitions of RF 3 do not fit in one process, and
what a broker's death or arrival at that scale tests is the control plane: the leases and
registrations, the controller's passes and batched elections, the views' list and watch.
Those are the real classes here, wired as `broker.broker.Broker` wires them and started in the
same order, each node a sim node (so `crash` is kill -9: its keep-alives stop and its lease
runs out in virtual time):

- every node runs `Membership` (its registration under a lease, with keep-alives);
- a controller candidate also runs `TopicCatalog`, `ClusterView` and `Controller`. Only a
  few nodes are candidates: each view holds every partition state, and 300 copies of 100,000
  states are what a real cluster spreads over 300 machines.

What the data plane would do is not simulated, with one exception: a follower that is back
(registered again) rejoins the ISR of its partitions after a catch-up delay, written by
`rejoin_isrs` with a compare-and-set on the state's revision, as a leader's ISR expansion is
(broker/replication/isr.py). Without it every restart would shrink ISRs for good.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec

from broker.cluster.controller import Controller, write_batches
from broker.cluster.registration import Membership
from broker.cluster.view import ClusterView
from broker.config import load_config
from broker.metadata import KeyValue, MetadataError, RevisionConflict
from broker.metadata import records
from broker.partition_ids import TopicIdPartition
from broker.topics import TopicCatalog

from .cluster import SIM_SETTINGS
from .loop import SimNode
from .metadata import FaultyMetadataStore
from .nodes import as_node, crash, new_node, spawn
from .runner import Sim


@dataclass
class ControlPlaneNode:
    node_id: int
    az: str
    node: SimNode
    membership: Membership
    started: asyncio.Task[None]
    # a controller candidate's parts (None on a node that only registers)
    catalog: TopicCatalog | None = None
    view: ClusterView | None = None
    controller: Controller | None = None

    @property
    def running(self) -> bool:
        return self.started.done() and not self.started.cancelled() and self.started.exception() is None


@dataclass
class ControlPlane:
    sim: Sim
    azs: list[str]
    metadata: FaultyMetadataStore
    settings: dict[str, str | None] = field(default_factory=lambda: dict(SIM_SETTINGS))
    nodes: dict[int, ControlPlaneNode] = field(default_factory=dict)
    down: set[int] = field(default_factory=set)

    def start(self, node_id: int, candidate: bool) -> ControlPlaneNode:
        """Start `node_id` (a new process: a new incarnation) in its AZ."""
        az = self.azs[node_id % len(self.azs)]
        config = load_config(
            environ={},
            overrides={
                **self.settings,
                "node.id": str(node_id),
                "az": az,
                "listen": f"node{node_id}:9092",
                "rpc.listen": f"node{node_id}:9093",
                "data.dir": str(self.sim.tmp / f"node-{node_id}"),
                "metadata": "etcd://sim:2379/shoal",
            },
        )
        node = new_node(self.sim.loop, node_id)
        record = records.BrokerRecord(
            records.RECORD_VERSION,
            node_id,
            az,
            f"node{node_id}",
            9092,
            f"node{node_id}",
            9093,
            False,
            "sim",
            self.sim.ids.uuid4().hex,
        )
        with as_node(node):
            catalog: TopicCatalog | None = None
            view: ClusterView | None = None
            controller: Controller | None = None
            announce: Callable[[KeyValue], Awaitable[None]] = _ignore
            if candidate:
                catalog = TopicCatalog(self.metadata, config, new_uuid=self.sim.ids.uuid4)
                view = ClusterView(self.metadata, catalog, self.sim.clock)
                announce = view.apply_put
            membership = Membership(
                self.metadata,
                record,
                config.broker_session_timeout_ms,
                config.broker_heartbeat_interval_ms,
                announce,
                self.sim.clock,
            )
            if candidate:
                assert catalog is not None and view is not None
                controller = Controller(
                    self.metadata,
                    view,
                    catalog,
                    membership,
                    config,
                    self.sim.clock,
                    self.sim.fork(f"controller-{node_id}-{node.incarnation}"),
                )
        started = spawn(node, _start(membership, view, controller), name=f"node-{node_id}-start")
        started.add_done_callback(_retrieve)
        self.nodes[node_id] = ControlPlaneNode(node_id, az, node, membership, started, catalog, view, controller)
        self.down.discard(node_id)
        self.sim.trace.record("control", "node %d started%s in %s", node_id, " (candidate)" if candidate else "", az)
        return self.nodes[node_id]

    async def supervise(self) -> None:
        """What a process supervisor does: a node whose start failed (a broker exits, e.g. when
        the store's answer to its lease grant was lost) is started again."""
        while True:
            await asyncio.sleep(1.0)
            for node_id, cp in sorted(self.nodes.items()):
                failed = cp.started.done() and not cp.started.cancelled() and cp.started.exception() is not None
                if node_id not in self.down and failed:
                    self.sim.trace.record(
                        "control", "node %d exited at start (%s): starting it again", node_id, cp.started.exception()
                    )
                    crash(self.sim.loop, cp.node)
                    self.start(node_id, candidate=cp.controller is not None)

    def crash(self, node_id: int) -> None:
        """kill -9: the node's tasks freeze; its registration goes when its lease runs out."""
        crash(self.sim.loop, self.nodes[node_id].node)
        self.down.add(node_id)
        self.sim.trace.record("control", "node %d killed", node_id)

    async def leave(self, node_id: int, leads: Callable[[int], int], moved_within_s: float) -> int:
        """A controlled shutdown: register as draining, wait up to `moved_within_s` until
        `leads(node_id)` (how many partitions name it leader) is 0 as the controller moves them,
        hand the controller role over, deregister. Returns the leaderships left unmoved."""
        cp = self.nodes[node_id]
        self.sim.trace.record("control", "node %d leaves (controlled shutdown)", node_id)
        await spawn(cp.node, cp.membership.drain(), name=f"node-{node_id}-drain")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + moved_within_s
        while leads(node_id) and loop.time() < deadline:
            await asyncio.sleep(0.2)
        unmoved = leads(node_id)
        if cp.controller is not None:
            await spawn(cp.node, cp.controller.hand_over(), name=f"node-{node_id}-hand-over")
        await spawn(cp.node, _stop(cp), name=f"node-{node_id}-stop")
        crash(self.sim.loop, cp.node)
        self.down.add(node_id)
        self.sim.trace.record("control", "node %d left (%d leaderships not moved)", node_id, unmoved)
        return unmoved

    def live(self) -> list[ControlPlaneNode]:
        return [n for i, n in sorted(self.nodes.items()) if i not in self.down and n.running]

    def close(self) -> None:
        for node_id in sorted(self.nodes):
            if node_id not in self.down:
                crash(self.sim.loop, self.nodes[node_id].node)
                self.down.add(node_id)


States = dict[TopicIdPartition, tuple[records.PartitionStateRecord, int]]  # with the store revision


async def rejoin_isrs(store: FaultyMetadataStore, states: States, live: set[int]) -> int:
    """The data plane's stand-in: every live replica missing from the ISR of a partition whose
    leader is live joins it (its follower caught up), in store transactions of compare-and-sets
    on the revisions in `states`; a conflict (the controller changed the state meanwhile)
    leaves that batch for the next call. Returns the states written."""
    decisions = []
    for pid, (state, revision) in states.items():
        if state.leader not in live:
            continue
        back = [r for r in state.replicas if r in live and r not in state.isr]
        if back:
            isr = sorted({*state.isr, *back})
            new = msgspec.structs.replace(state, isr=isr, partition_epoch=state.partition_epoch + 1)
            decisions.append((pid, new, revision))
    written = 0
    for batch in write_batches(decisions):
        puts = {records.partition_key(*pid): records.encode(record) for pid, record, _rev in batch}
        try:
            await store.txn({records.partition_key(*pid): rev for pid, _record, rev in batch}, puts=puts)
        except (RevisionConflict, MetadataError):
            continue
        written += len(batch)
    return written


async def _start(membership: Membership, view: ClusterView | None, controller: Controller | None) -> None:
    """Broker.start's control-plane steps, in its order."""
    if view is not None:
        await view.start()
    await membership.start()
    if controller is not None:
        await controller.step()
        controller.start()


async def _stop(cp: ControlPlaneNode) -> None:
    """Broker.stop's control-plane steps, in its order."""
    if cp.controller is not None:
        await cp.controller.stop()
    await cp.membership.stop()
    if cp.view is not None:
        await cp.view.stop()


async def _ignore(_kv: KeyValue) -> None:
    return None


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()
