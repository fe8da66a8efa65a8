"""ClusterView.applied_revision counts a revision applied only once every change in it is.

Regression (found by `transactions` seeds 740000, 740091, 740164, 740198, 740241, 740279 and
740318 once the controller wrote its elections in transactions): a transaction's changes
share one revision and the view applies them one by one, letting other tasks run between
them. The view said it had applied the revision after its first change, so a broker in
controlled shutdown, told by its peers that they had applied the revision of its moved
leaderships, stopped while one still named it leader of a partition."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.clock import ManualClock
from broker.cluster.view import ClusterView, PartitionState
from broker.metadata import records
from broker.metadata.local import LocalMetadataStore
from broker.partition_ids import TopicIdPartition

TOPIC = "00000000-0000-0000-0000-000000000001"


class NoCatalog:
    async def apply_record(self, record: object) -> None: ...

    async def apply_delete(self, name: str) -> None: ...


def test_a_transaction_is_applied_only_once_all_its_changes_are(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = LocalMetadataStore(tmp_path / "store.json", clock)
        view = ClusterView(store, NoCatalog(), clock)  # type: ignore[arg-type]
        await view.start()
        seen: list[tuple[int, int]] = []  # (the change's revision, the view's applied revision then)

        async def listener(pid: TopicIdPartition, state: PartitionState | None) -> None:
            assert state is not None
            seen.append((state.revision, view.applied_revision))
            await asyncio.sleep(0)  # as the replica manager's listeners may

        view.on_partition_changed(listener)
        state = records.encode(records.PartitionStateRecord(records.RECORD_VERSION, [0], 0, 0, [0]))
        revision = await store.txn({}, puts={records.partition_key(TOPIC, i): state for i in range(3)})
        for _ in range(100):
            if view.applied_revision >= revision:
                break
            await asyncio.sleep(0.01)
        await view.stop()
        await store.close()
        assert [r for r, _ in seen] == [revision] * 3
        assert all(applied < revision for _, applied in seen), seen
        assert view.applied_revision == revision

    asyncio.run(scenario())
