"""The WAL file manager over real replicas, cheap enough for thousands of seeds.

    producers --> WalWriter --PUT--> faulty store <--LIST/GET/DELETE-- WalFileManager
                      \\--commit--> LocalCommitter --> leader Partition --copy--> follower Partitions
                                                        ReferenceReporter per broker <-- asked

Per seed: 1-3 partitions, each with a leader and 0-2 followers (real partition logs, each on
its own "broker"); followers copy the leader's entries with a random lag and learn its log
start when they copy; the leader moves to a follower now and then (the old leader truncates
what the new one lacks: references vanish from a log's tail); DeleteRecords moves log starts;
a broker's answers stop for a while (the manager must pause); the manager is replaced by a
fresh one (a takeover, its memory lost) and is sometimes told it lost the controller key;
the store fails, loses answers and refuses single keys of a batch delete. Readers resolve
coordinates from a replica and GET the bytes up to 90% of the grace period later.

The auditor: no delete of an object any replica's log references from its log start; no
read that resolved its coordinates within the grace period finds its object gone; at the
end, with every log emptied by DeleteRecords, every object goes.
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from broker.wal.cache import ObjectCache
from broker.wal.commit import LocalCommitter
from broker.wal.wal_writer import PartitionAppend, WalWriter
from broker.log import EntryKind
from broker.log.coordinates import decode_ref
from broker.metadata.records import PartitionStateRecord
from broker.metrics import BrokerMetrics
from broker.objectstore import NotFound
from broker.log_validator import prepare_diskless
from broker.partition import Partition
from broker.walfiles.manager import GcPaused, ManagerSettings, WalFileManager
from broker.walfiles.messages import ObjectsQuery, WalQueryRequest, WalReferencesRequest
from broker.walfiles.reporter import RecentUploads, ReferenceReporter
from walfiles.keys import SEQUENCE_MODULUS, WalKeyAllocator, wal_prefix

from ..objectstore import ObjectStoreFaults, build_object_store
from ..registry import scenario
from ..runner import Sim
from .diskless_write import make_batch, topic_settings

TOPIC = "t"
TOPIC_ID = uuid.UUID(int=7)
CLUSTER = "sim-gc"
DEADLINE_MS = 3_000
TRAFFIC_S = 12.0


class Replicas:
    """One partition's replicas: index 0.. on brokers 0..; `leader` is the leading one."""

    def __init__(self, sim: Sim, index: int, count: int) -> None:
        settings = topic_settings()
        self.index = index
        self.copies = [
            Partition.open(
                TOPIC, index, sim.tmp / f"b{b}" / f"{TOPIC}-{index}", settings, sim.clock, 86_400_000, lambda _p: None
            )
            for b in range(count)
        ]
        for copy in self.copies:
            copy.topic_id = str(TOPIC_ID)
        self.leader = 0
        self.epoch = 1
        self._lead()

    def _lead(self) -> None:
        state = PartitionStateRecord(1, [self.leader], self.leader, self.epoch, [self.leader])
        self.copies[self.leader].make_leader(self.leader, state, self.epoch)
        for b, copy in enumerate(self.copies):
            if b != self.leader:
                copy.make_follower(state, self.epoch)

    def copy_round(self, rng) -> None:  # type: ignore[no-untyped-def]
        """Each follower copies some of what it lacks and learns the leader's log start."""
        leader = self.copies[self.leader].log
        for b, copy in enumerate(self.copies):
            if b == self.leader or rng.chance(0.3):
                continue
            log = copy.log
            if log.log_end_offset < leader.log_start_offset:
                copy.restart_at(leader.log_start_offset)
            elif log.log_end_offset > leader.log_end_offset:  # it followed an earlier leader further
                copy.truncate_to(leader.log_end_offset)
            if log.log_end_offset < leader.log_end_offset:
                entries = leader.read(log.log_end_offset, rng.randint(1, 4) * 200, leader.log_end_offset)
                copy.append_replicated([(int(e.kind), bytes(e.data)) for e in entries], leader.high_watermark)
            start = min(leader.log_start_offset, log.high_watermark)
            if start > log.log_start_offset:
                log.delete_records_before(start)

    def move_leader(self, rng) -> None:  # type: ignore[no-untyped-def]
        """A follower takes over (unclean: it may lack the tail); the old leader cuts its log
        back to the new leader's end, as a follower whose log diverged."""
        if len(self.copies) == 1:
            return
        new = rng.choice([b for b in range(len(self.copies)) if b != self.leader])
        end = self.copies[new].log.log_end_offset
        old = self.copies[self.leader]
        self.leader, self.epoch = new, self.epoch + 1
        self._lead()
        if old.log.log_end_offset > end:
            if end < old.log.log_start_offset:
                old.restart_at(end)
            else:
                old.truncate_to(end)

    def close(self) -> None:
        for copy in self.copies:
            copy.close()


def referenced(world: list[Replicas]) -> dict[str, str]:
    found: dict[str, str] = {}
    for replicas in world:
        for b, copy in enumerate(replicas.copies):
            for entry in copy.log.iter_entries(copy.log.log_start_offset):
                if entry.kind is EntryKind.COORDINATES:
                    found.setdefault(decode_ref(entry.payload).object_id, f"partition {replicas.index} broker {b}")
    return found


@scenario("wal_gc_replicas", max_virtual_s=900.0, max_steps=400_000, test_seeds=800)
async def wal_gc_replicas(sim: Sim) -> dict[str, int]:
    """The WAL file manager over real replicas: copies, leader moves, DeleteRecords, takeovers, store faults."""
    rng = sim.fork("scenario")
    clock = sim.clock
    brokers = rng.randint(1, 3)
    world = [Replicas(sim, index, brokers) for index in range(rng.randint(1, 3))]
    grace_ms, interval_ms = rng.choice([500, 2000]), rng.choice([200, 1000])
    settings = ManagerSettings(
        interval_ms=interval_ms,
        grace_ms=grace_ms,
        commit_deadline_ms=DEADLINE_MS,
        max_deletes_per_cycle=rng.choice([3, 1000]),
        max_pending_deletes=rng.choice([5, 10_000]),
        max_index_reads_per_cycle=rng.choice([2, 1000]),
        index_cache_objects=rng.choice([4, 10_000]),
        backoff_max_ms=5_000,
    )
    objects = build_object_store(
        sim.fork("objectstore"),
        sim.trace,
        clock,
        faults=rng.choice(
            [ObjectStoreFaults(), ObjectStoreFaults.flaky(), ObjectStoreFaults(partial_delete_p=0.3, fail_p=0.1)]
        ),
        max_attempts=rng.choice([1, 4]),
        request_timeout_s=10.0,
    )
    violations: list[str] = []
    memory = objects.memory
    real_delete = memory.delete_many

    async def audited_delete(keys):  # type: ignore[no-untyped-def]
        keys = list(keys)
        held = referenced(world)
        for key in keys:
            object_id = key.rsplit("/", 1)[-1]
            if object_id in held and key in memory._objects:
                violations.append(f"deleted {key}, referenced by {held[object_id]}")
        return await real_delete(keys)

    memory.delete_many = audited_delete  # type: ignore[method-assign]

    catalog = SimpleNamespace(
        name=TOPIC,
        by_id=lambda topic_id: catalog if topic_id == TOPIC_ID else None,
        get=lambda _name, index: world[index].copies[world[index].leader],
    )
    committer = LocalCommitter(catalog, catalog, clock, deadline_ms=DEADLINE_MS)  # type: ignore[arg-type]
    uploads = RecentUploads()
    one_batch = len(make_batch(-1, -1, 1))
    writer = WalWriter(
        objects.store,
        WalKeyAllocator("", CLUSTER, 0, clock.now_ms, first_sequence=rng.randrange(SEQUENCE_MODULUS)),
        committer,
        ObjectCache(1 << 20),
        BrokerMetrics(),
        clock=clock,
        buffer_max_bytes=one_batch * rng.randint(1, 6),
        linger_ms=rng.randint(1, 50),
        max_inflight_bytes=one_batch * 64,
        on_committed=uploads.record,
    )
    reporters = [
        ReferenceReporter(
            b,
            SimpleNamespace(partitions={(TOPIC, r.index): r.copies[b] for r in world}, loaded=True),  # type: ignore[arg-type]
            clock,
            DEADLINE_MS,
            uploads if b == 0 else RecentUploads(),
        )
        for b in range(brokers)
    ]
    silent: set[int] = set()

    class Source:
        async def gather(self):  # type: ignore[no-untyped-def]
            await asyncio.sleep(0.001)
            if silent:
                raise GcPaused(f"broker(s) {sorted(silent)} did not answer")
            return [await r.answer(WalReferencesRequest(1, 0)) for r in reporters]

        async def query(self, asked):  # type: ignore[no-untyped-def]
            await asyncio.sleep(0.001)
            if silent:
                raise GcPaused("a broker did not answer")
            found: dict = {}
            request = WalQueryRequest(1, [ObjectsQuery(t, p, ids) for (t, p), ids in asked.items()])
            for r in reporters:
                for replica in (await r.answer_query(request)).found:
                    committed, uncommitted = found.setdefault((replica.topic_id, replica.partition), (set(), set()))
                    committed.update(replica.committed)
                    uncommitted.update(replica.uncommitted)
            return found

    holds = {"value": True}

    async def holds_controller() -> bool:
        return holds["value"]

    def new_manager() -> WalFileManager:
        manager = WalFileManager(
            node_id=0,
            store=objects.store,
            wal_prefix=lambda: wal_prefix("", CLUSTER),
            references=Source(),
            holds_controller=holds_controller,
            is_controller=lambda: True,
            settings=settings,
            clock=clock,
            metrics=BrokerMetrics(),
        )
        manager.start()
        return manager

    managers = [new_manager()]
    loop = asyncio.get_running_loop()
    until = loop.time() + TRAFFIC_S
    produced = 0

    async def produce() -> None:
        nonlocal produced
        prng = sim.fork("producer")
        sequence = 0
        while loop.time() < until:
            await asyncio.sleep(prng.expovariate(1 / 0.05))
            chosen = prng.sample(range(len(world)), k=min(len(world), prng.randint(1, 2)))
            appends = []
            for index in chosen:
                sequence += 1
                batch = make_batch(-1, -1, 1)  # not idempotent: any partition, any order
                appends.append(
                    PartitionAppend(
                        TOPIC_ID, index, 1, prepare_diskless(memoryview(batch), topic_settings(), clock.now_ms()), -1
                    )
                )
            await asyncio.gather(*writer.submit(appends))
            produced += 1

    async def read() -> None:
        prng = sim.fork("reader")
        while loop.time() < until + 5:
            await asyncio.sleep(prng.uniform(0.05, 0.5))
            replicas = prng.choice(world)
            copy = prng.choice(replicas.copies)
            log = copy.log
            if log.high_watermark <= log.log_start_offset:
                continue
            offset = prng.randrange(log.log_start_offset, log.high_watermark)
            entries = log.read(offset, 200, log.high_watermark)
            refs = [decode_ref(e.payload) for e in entries if e.kind is EntryKind.COORDINATES]
            if not refs:
                continue
            resolved = loop.time()
            await asyncio.sleep(prng.uniform(0, 0.9 * grace_ms / 1000))
            ref = refs[0]
            try:
                await memory.get(wal_prefix("", CLUSTER) + ref.object_id, ref.offset, ref.end)
            except NotFound:
                violations.append(
                    f"a read resolved at {resolved:.3f} s found {ref.object_id} gone at {loop.time():.3f} s "
                    f"(grace {grace_ms} ms)"
                )

    async def churn() -> None:
        prng = sim.fork("churn")
        while loop.time() < until:
            await asyncio.sleep(prng.uniform(0.05, 0.3))
            replicas = prng.choice(world)
            replicas.copy_round(prng)
            roll = prng.random()
            leader = replicas.copies[replicas.leader].log
            if roll < 0.05:
                replicas.move_leader(prng)
                sim.trace.record("scenario", "partition %d: leader moved to %d", replicas.index, replicas.leader)
            elif roll < 0.15 and leader.high_watermark > leader.log_start_offset:
                offset = prng.randint(leader.log_start_offset, leader.high_watermark)
                leader.delete_records_before(offset)
                sim.trace.record("scenario", "partition %d: DeleteRecords below %d", replicas.index, offset)
            elif roll < 0.18 and brokers > 1 and not silent:
                mute = prng.randrange(brokers)
                silent.add(mute)
                loop.call_later(prng.uniform(0.5, 5.0), silent.discard, mute)
            elif roll < 0.21:
                await managers[-1].stop()
                managers.append(new_manager())
                sim.trace.record("scenario", "manager replaced")
            elif roll < 0.23:
                holds["value"] = False
                loop.call_later(prng.uniform(0.2, 3.0), holds.__setitem__, "value", True)

    try:
        await asyncio.gather(produce(), read(), churn())
        await writer.close()
        objects.faulty.faults = ObjectStoreFaults.none()
        silent.clear()
        holds["value"] = True
        for replicas in world:  # everything goes: every log emptied on every replica
            for _ in range(3):
                replicas.copy_round(EveryoneCopies())
            for copy in replicas.copies:
                copy.log.delete_records_before(copy.log.high_watermark)
                if copy.log.log_end_offset > copy.log.log_start_offset:
                    copy.restart_at(copy.log.log_end_offset)
        prefix = wal_prefix("", CLUSTER)
        stored = sum(1 for key in memory._objects if key.startswith(prefix))
        # Each round deletes at most min(cap per cycle, pending bound) objects and takes a
        # grace period plus a cycle (plus the 1 s pause after a saturated cycle).
        per_round = min(settings.max_deletes_per_cycle, settings.max_pending_deletes)
        rounds = -(-stored // per_round)
        wait_s = (
            (DEADLINE_MS + 3 * grace_ms + 4 * interval_ms) / 1000 + 5 + rounds * (grace_ms + interval_ms + 1000) / 1000
        )
        await asyncio.sleep(wait_s)
        left = sorted(key for key in memory._objects if key.startswith(prefix))
        if left:
            dry = await managers[-1].run_cycle(dry_run=True)
            violations.append(f"kept: {dry.kept}, planned {dry.planned_total}")
            violations.append(
                f"{len(left)} object(s) left {wait_s:.0f} s after every log was emptied: {left[:3]}; "
                f"manager: {managers[-1].status()}"
            )
        if violations:
            raise AssertionError("\n  ".join(violations[:10]))
        return {"produced": produced, "managers": len(managers)}
    finally:
        await managers[-1].stop()
        for replicas in world:
            replicas.close()


class EveryoneCopies:
    """copy_round's random source for the final rounds: every follower copies everything."""

    @staticmethod
    def chance(_p: float) -> bool:
        return False

    @staticmethod
    def randint(_a: int, b: int) -> int:
        return b * 1000
