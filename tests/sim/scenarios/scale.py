"""Three hundred brokers over three AZs and 100,000 partitions of RF 3: the control plane at
issue 28's scale (item 5), on the real registration, controller, cluster view and watch
(control_plane.py says which parts run and why).

Each seed: the nodes register (three controller candidates, one per AZ; the rest register
only), 100 topics of 1,000 partitions are created through a candidate's catalog with the real
rack-aware placement, and for FAULTS_S virtual seconds a seeded schedule kills nodes (kill -9,
restarted later, now and then the active controller), lets a node leave by controlled
shutdown, and adds new nodes, while the metadata store answers with delays, ambiguous writes
and lagging or broken watches. Then every killed node comes back and the cluster settles.

The auditor follows the store's ground truth through a watch of its own:
- every partition state keeps leader in ISR, ISR within the replicas, never lowers the leader
  epoch and raises the partition epoch with every change;
- a partition whose leader was killed has a live leader in its ISR again within
  MAX_LEADERLESS_S of the kill (the session timeout is 6 s of it);
- a node leaving by controlled shutdown hands every leadership over before it goes;
- at the end every partition has a live leader and every live replica in its ISR, every live
  candidate's view holds exactly the store's partition states, and exactly one candidate is
  the active controller, the one the store names.
"""

from __future__ import annotations

import asyncio

from broker.cluster.placement import assign_replicas
from broker.metadata import EventType, records
from broker.metadata.store import WatchEvent
from broker.partition_ids import TopicIdPartition

from ..control_plane import ControlPlane, States, rejoin_isrs
from ..determinism import SimRandom
from ..metadata import MetadataFaults, build_metadata_store
from ..registry import scenario
from ..runner import Sim

AZS = ["az1", "az2", "az3"]
NODES = 300
CANDIDATES = (0, 1, 2)  # one per AZ: node i is in AZS[i % 3]
TOPICS, PARTITIONS_PER_TOPIC = 100, 1000
FAULTS_S = 120.0
MAX_LEADERLESS_S = 10.0
MAX_DOWN = 2  # nodes killed and not yet restarted, at once
SETTLE_S = 90.0


class StateAuditor:
    """The store's partition states and registrations, followed by a watch without faults,
    with the invariants checked on every change."""

    def __init__(self, sim: Sim, store_inner: object) -> None:
        self._sim = sim
        self._inner = store_inner
        self.states: States = {}
        self.registered: set[int] = set()
        self.controller = -1
        self.killed_at: dict[int, float] = {}  # node -> virtual time of its kill, until it is back
        self.leaderless_since: dict[TopicIdPartition, float] = {}  # partitions whose leader was killed
        self.max_leaderless_s = 0.0
        self.leader_changes = 0
        self.leads: dict[int, int] = {}  # node -> partitions naming it leader
        self._task: asyncio.Task[None] | None = None
        self.broken: AssertionError | None = None

    async def start(self) -> None:
        kvs, revision = await self._inner.list_with_revision("")  # type: ignore[attr-defined]
        for kv in kvs:
            self._apply(WatchEvent(EventType.PUT, kv))
        self._task = asyncio.get_running_loop().create_task(self._follow(revision + 1), name="auditor")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _follow(self, start_revision: int) -> None:
        try:
            async with await self._inner.watch("", start_revision=start_revision) as watch:  # type: ignore[attr-defined]
                async for event in watch:
                    self._apply(event)
        except AssertionError as exc:
            self.broken = exc  # raised by check(): a task's exception would go unseen

    def check(self) -> None:
        """Raise the first invariant a change broke."""
        if self.broken is not None:
            raise self.broken

    def killed(self, node_id: int) -> None:
        now = self._sim.now_s
        self.killed_at[node_id] = now
        for pid, (state, _rev) in self.states.items():
            if state.leader == node_id:
                self.leaderless_since.setdefault(pid, now)

    def _back(self, node_id: int) -> None:
        """A killed node registered again: partitions it was made leader of meanwhile have one."""
        if self.killed_at.pop(node_id, None) is None:
            return
        for pid, since in list(self.leaderless_since.items()):
            if self.states[pid][0].leader == node_id:
                del self.leaderless_since[pid]
                self.max_leaderless_s = max(self.max_leaderless_s, self._sim.now_s - since)

    def _apply(self, event: WatchEvent) -> None:
        key = event.kv.key
        if key.startswith(records.PARTITION_PREFIX):
            pid = records.parse_partition_key(key)
            if event.type is EventType.PUT:
                self._partition_put(
                    pid, records.decode(event.kv.value, records.PartitionStateRecord), event.kv.revision
                )
            else:
                old = self.states.pop(pid, None)
                if old is not None:
                    self.leads[old[0].leader] = self.leads.get(old[0].leader, 0) - 1
        elif key.startswith(records.BROKER_PREFIX):
            node_id = int(key[len(records.BROKER_PREFIX) :])
            if event.type is EventType.PUT:
                self.registered.add(node_id)
                self._back(node_id)
            else:
                self.registered.discard(node_id)
        elif key == records.CONTROLLER_KEY:
            self.controller = (
                records.decode(event.kv.value, records.ControllerRecord).node_id if event.type is EventType.PUT else -1
            )

    def _partition_put(self, pid: TopicIdPartition, new: records.PartitionStateRecord, revision: int) -> None:
        where = f"partition {pid} at revision {revision}: {new}"
        assert new.leader == records.NO_LEADER or new.leader in new.isr, f"leader outside the ISR: {where}"
        assert set(new.isr) <= set(new.replicas), f"ISR outside the replicas: {where}"
        old = self.states.get(pid)
        if old is not None:
            before = old[0]
            assert new.leader_epoch >= before.leader_epoch, f"leader epoch went back from {before}: {where}"
            assert new.partition_epoch > before.partition_epoch, f"partition epoch did not grow from {before}: {where}"
            if new.leader != before.leader:
                self.leader_changes += 1
            self.leads[before.leader] = self.leads.get(before.leader, 0) - 1
        self.leads[new.leader] = self.leads.get(new.leader, 0) + 1
        self.states[pid] = (new, revision)
        since = self.leaderless_since.get(pid)
        if since is None:
            return
        if new.leader in self.killed_at:  # elected while its lease still ran: it counts from that kill
            self.leaderless_since[pid] = max(since, self.killed_at[new.leader])
        elif new.leader != records.NO_LEADER:
            del self.leaderless_since[pid]
            self.max_leaderless_s = max(self.max_leaderless_s, self._sim.now_s - since)

    def rejoined(self, node_id: int) -> bool:
        """Whether `node_id` is back in the ISR of every partition it replicates that has a leader."""
        return not any(
            node_id in state.replicas and node_id not in state.isr and state.leader != records.NO_LEADER
            for state, _rev in self.states.values()
        )

    def check_leaderless_bound(self) -> None:
        self.check()
        now = self._sim.now_s
        late = [pid for pid, since in self.leaderless_since.items() if now - since > MAX_LEADERLESS_S]
        assert not late, (
            f"{len(late)} partitions without a live leader for more than {MAX_LEADERLESS_S} s after "
            f"their leader was killed, e.g. {late[0]}: {self.states[late[0]][0]}"
        )
        assert self.max_leaderless_s <= MAX_LEADERLESS_S, (
            f"a partition was without a live leader for {self.max_leaderless_s:.2f} s after its leader was killed"
        )


async def create_topics(plane: ControlPlane, rng: SimRandom) -> None:
    creator = plane.nodes[CANDIDATES[0]]
    assert creator.catalog is not None
    brokers = [(node_id, plane.nodes[node_id].az) for node_id in sorted(plane.nodes)]
    for t in range(TOPICS):
        topic = creator.catalog.prepare(f"t{t}", PARTITIONS_PER_TOPIC, {})
        assignment = assign_replicas(range(PARTITIONS_PER_TOPIC), 3, brokers, start=rng.randrange(len(brokers)))
        await creator.catalog.create(topic, assignment)


async def faults(plane: ControlPlane, auditor: StateAuditor, rng: SimRandom, until_s: float) -> dict[str, int]:
    """The schedule: kills and controlled shutdowns (each node back later; at most MAX_DOWN
    away at once, and one counts as back once it is in its ISRs again, so no partition loses
    every in-sync replica), and new nodes joining."""
    loop = asyncio.get_running_loop()
    counts = {"kills": 0, "controller_kills": 0, "leaves": 0, "joins": 0, "unmoved_on_leave": 0}
    away: set[int] = set()
    returns: list[asyncio.Task[None]] = []
    next_id = NODES

    async def come_back(node_id: int, after_s: float) -> None:
        await asyncio.sleep(after_s)
        plane.start(node_id, candidate=node_id in CANDIDATES)
        while node_id not in auditor.registered or not plane.nodes[node_id].running:  # restarted if its start fails
            await asyncio.sleep(0.2)
        deadline = loop.time() + SETTLE_S
        while not auditor.rejoined(node_id):
            assert loop.time() < deadline, f"node {node_id} not back in its ISRs {SETTLE_S} s after its restart"
            await asyncio.sleep(0.5)
        away.discard(node_id)

    while loop.time() < until_s:
        await asyncio.sleep(rng.between((4.0, 15.0)))
        auditor.check()
        action = rng.choice(["kill", "kill", "kill_controller", "leave", "join"])
        plain = [n.node_id for n in plane.live() if n.node_id not in CANDIDATES and n.node_id < NODES]
        if action == "join":
            plane.start(next_id, candidate=False)
            next_id += 1
            counts["joins"] += 1
            continue
        if len(away) >= MAX_DOWN:
            continue
        if action == "leave":
            victim = rng.choice(plain)
            away.add(victim)
            counts["leaves"] += 1
            counts["unmoved_on_leave"] += await plane.leave(victim, lambda n: auditor.leads.get(n, 0), 30.0)
        else:
            controller = auditor.controller
            if action == "kill_controller" and controller in CANDIDATES and controller not in plane.down:
                victim = controller
                counts["controller_kills"] += 1
            else:
                victim = rng.choice(plain)
            away.add(victim)
            counts["kills"] += 1
            plane.crash(victim)
            auditor.killed(victim)
        returns.append(loop.create_task(come_back(victim, rng.between((2.0, 30.0)))))
    await asyncio.gather(*returns)
    return counts


async def rejoin_loop(plane: ControlPlane, auditor: StateAuditor) -> None:
    """Followers that are back catch up and rejoin ISRs (control_plane.rejoin_isrs)."""
    while True:
        await asyncio.sleep(2.0)
        live = {n.node_id for n in plane.live()} & auditor.registered
        await rejoin_isrs(plane.metadata, auditor.states, live)


async def settled(plane: ControlPlane, auditor: StateAuditor) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_S
    while True:
        live = {n.node_id for n in plane.live()} & auditor.registered
        bad = [
            pid
            for pid, (state, _rev) in auditor.states.items()
            if state.leader not in live or any(r in live and r not in state.isr for r in state.replicas)
        ]
        auditor.check()
        if not bad:
            return
        assert loop.time() < deadline, (
            f"{len(bad)} partitions unsettled after {SETTLE_S} s, e.g. {auditor.states[bad[0]]}"
        )
        await asyncio.sleep(1.0)


def check_views(plane: ControlPlane, auditor: StateAuditor) -> None:
    active = [n.node_id for n in plane.live() if n.controller is not None and n.controller.active]
    assert active == [auditor.controller], f"active controllers {active}, the store names {auditor.controller}"
    for cp in plane.live():
        if cp.view is None:
            continue
        held = {pid: (s.record, s.revision) for pid, s in cp.view.partitions.items()}
        assert held == auditor.states, (
            f"node {cp.node_id}'s view differs from the store in "
            f"{sum(1 for pid in auditor.states if held.get(pid) != auditor.states[pid])} partitions"
        )


@scenario("scale", max_virtual_s=900.0, max_steps=20_000_000, test_seeds=1)
async def scale(sim: Sim) -> dict[str, int]:
    """300 nodes, 100,000 partitions of RF 3: kills, a controlled shutdown and joins on the control plane."""
    rng = sim.fork("scenario")
    metadata = build_metadata_store(sim.fork("metadata"), sim.trace, sim.clock, faults=MetadataFaults())
    plane = ControlPlane(sim, AZS, metadata)
    auditor = StateAuditor(sim, metadata.inner)
    await auditor.start()
    supervisor = asyncio.get_running_loop().create_task(plane.supervise(), name="supervisor")
    try:
        for node_id in range(NODES):
            plane.start(node_id, candidate=node_id in CANDIDATES)
        while len(auditor.registered) < NODES or any(not n.running for n in plane.nodes.values()):
            await asyncio.sleep(0.5)
        await create_topics(plane, rng.fork("placement"))
        weather = rng.fork("weather")
        metadata.faults = MetadataFaults(
            ambiguous_p=weather.choice([0.0, 0.01]),
            watch_break_p=weather.choice([0.0, 0.0001]),
            watch_lag_p=weather.choice([0.0, 0.01]),
        )
        rejoining = asyncio.get_running_loop().create_task(rejoin_loop(plane, auditor))
        counts = await faults(plane, auditor, rng.fork("faults"), sim.now_s + FAULTS_S)
        metadata.faults = MetadataFaults()
        await settled(plane, auditor)
        rejoining.cancel()
        await asyncio.sleep(3.0)  # the views apply the last changes
        auditor.check_leaderless_bound()
        assert counts["unmoved_on_leave"] == 0, (
            f"{counts['unmoved_on_leave']} leaderships not moved by a controlled shutdown"
        )
        check_views(plane, auditor)
        return {
            **counts,
            "partitions": len(auditor.states),
            "leader_changes": auditor.leader_changes,
            "max_leaderless_ms": round(auditor.max_leaderless_s * 1000),
        }
    finally:
        supervisor.cancel()
        auditor.stop()
        plane.close()
