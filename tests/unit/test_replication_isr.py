"""ISR changes by the leader over a real partition and the local metadata store: what the
high watermark counts while the store's answer is unknown."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from broker.clock import ManualClock
from broker.cluster.view import PartitionState
from broker.metadata import KeyValue, MetadataUnavailable
from broker.metadata import records
from broker.metadata.local import LocalMetadataStore
from broker.replication import isr as isr_module
from broker.replication.isr import IsrUpdater
from tests.unit.test_partition import CLOCK_START, batch, open_partition

TOPIC_ID = str(uuid.UUID(int=9))


class AmbiguousStore(LocalMetadataStore):
    """Applies the first put, then answers MetadataUnavailable; refuses the next reads."""

    def __init__(self, path: Path, clock: ManualClock, failing_reads: int) -> None:
        super().__init__(path, clock)
        self.ambiguous_puts = 0
        self.failing_reads = failing_reads

    async def put(self, key, value, expected_revision=None, lease=None):  # type: ignore[no-untyped-def,override]
        revision = await super().put(key, value, expected_revision=expected_revision, lease=lease)
        if self.ambiguous_puts:
            self.ambiguous_puts -= 1
            raise MetadataUnavailable("the answer was lost")
        return revision

    async def get(self, key):  # type: ignore[no-untyped-def,override]
        if self.failing_reads:
            self.failing_reads -= 1
            raise MetadataUnavailable("etcd is unreachable")
        return await super().get(key)


class View:
    """The part of ClusterView the updater uses, applying states as ReplicaManager does."""

    def __init__(self, partition) -> None:  # type: ignore[no-untyped-def]
        self.partition = partition
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.brokers: dict[int, object] = {0: object(), 1: object()}  # registered brokers

    async def apply_put(self, kv: KeyValue) -> None:
        record = records.decode(kv.value, records.PartitionStateRecord)
        self.partitions[(TOPIC_ID, 0)] = PartitionState(record, kv.revision)
        if kv.revision > self.partition.state_revision:
            self.partition.make_leader(0, record, kv.revision)


def test_an_isr_expansion_with_an_unknown_outcome_keeps_the_larger_isr(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Regression (issue 11, defect 8): an ambiguous answer aborted the expansion, so the high
    watermark was computed without a replica that the store already listed as in sync (and
    that the controller may elect)."""
    monkeypatch.setattr(isr_module, "RESOLVE_BACKOFF_S", 0.001, raising=False)

    async def scenario() -> None:
        clock = ManualClock(CLOCK_START)
        store = AmbiguousStore(tmp_path / "store.json", clock, failing_reads=3)
        partition = open_partition(tmp_path / "t-0", clock)
        partition.topic_id = TOPIC_ID
        partition.state_revision = 0
        key = records.partition_key(TOPIC_ID, 0)
        state = records.PartitionStateRecord(1, [0, 1], 0, 1, [0])
        revision = await store.put(key, records.encode(state), expected_revision=0)
        store.ambiguous_puts = 1
        view = View(partition)
        await view.apply_put(KeyValue(key, records.encode(state), revision))
        updater = IsrUpdater(store, view, None, clock, lag_max_ms=30_000)  # type: ignore[arg-type]
        for seq in (0, 2):
            partition.append_records(batch(seq), acks=1)
        assert partition.leader_state is not None
        partition.leader_state.on_follower_fetch(1, 4, 4, clock.now_ms())  # follower 1 holds everything
        partition.advance_high_watermark()
        updater.maybe_expand(partition, 1)
        await asyncio.sleep(0)  # the write lands in the store; its answer is lost
        partition.append_records(batch(4), acks=1)  # follower 1 does not have this yet
        assert partition.log.high_watermark == 4, "the high watermark waits for the replica that may be in the ISR"
        stored = records.decode((await LocalMetadataStore.get(store, key)).value, records.PartitionStateRecord)  # type: ignore[union-attr]
        assert stored.isr == [0, 1]
        for _ in range(50):
            if partition.leader_state.pending_isr is None:
                break
            await asyncio.sleep(0.002)
        assert sorted(partition.isr) == [0, 1] and partition.log.high_watermark == 4  # settled: 1 is in the ISR
        await store.close()

    asyncio.run(scenario())


def test_a_follower_on_a_broker_that_lost_its_registration_does_not_join_the_isr(tmp_path: Path) -> None:
    """Regression (tiered_delete_records seed 410194): a broker whose lease had lapsed kept
    fetching and was added back to the ISR, so a DeleteRecords answered without waiting for it
    (it was not live) was lost when it was elected. As Kafka's controller refuses an
    ineligible replica (KIP-841), it joins once registered again."""

    async def scenario() -> None:
        clock = ManualClock(CLOCK_START)
        store = AmbiguousStore(tmp_path / "store.json", clock, failing_reads=0)
        partition = open_partition(tmp_path / "t-0", clock)
        partition.topic_id = TOPIC_ID
        partition.state_revision = 0
        key = records.partition_key(TOPIC_ID, 0)
        state = records.PartitionStateRecord(1, [0, 1], 0, 1, [0])
        revision = await store.put(key, records.encode(state), expected_revision=0)
        view = View(partition)
        await view.apply_put(KeyValue(key, records.encode(state), revision))
        del view.brokers[1]  # its lease lapsed; the broker runs on and fetches
        updater = IsrUpdater(store, view, None, clock, lag_max_ms=30_000)  # type: ignore[arg-type]
        partition.append_records(batch(0), acks=1)
        assert partition.leader_state is not None
        partition.leader_state.on_follower_fetch(1, 2, 2, clock.now_ms())  # it holds everything
        updater.maybe_expand(partition, 1)
        assert partition.leader_state.pending_isr is None and sorted(partition.isr) == [0]
        view.brokers[1] = object()  # registered again
        updater.maybe_expand(partition, 1)
        assert partition.leader_state.pending_isr == {0, 1}
        await updater.stop()
        await store.close()

    asyncio.run(scenario())
