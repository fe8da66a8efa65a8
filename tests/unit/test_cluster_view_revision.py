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
from broker.metadata import MetadataUnavailable
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


class BreakingWatchStore:
    """The real store, whose first watch breaks after delivering the first change of a
    transaction (as the simulation's store does), and whose next listing fails (the store
    unreachable for a moment): the view then resumes its watch without listing again."""

    def __init__(self, inner: LocalMetadataStore) -> None:
        self.inner = inner
        self.watches = 0
        self.lists = 0

    async def list_with_revision(self, prefix: str) -> object:
        self.lists += 1
        if self.lists == 2:  # the first is the view's start
            raise MetadataUnavailable("the store did not answer")
        return await self.inner.list_with_revision(prefix)

    async def watch(self, prefix: str, start_revision: int | None = None) -> object:
        self.watches += 1
        inner = await self.inner.watch(prefix, start_revision=start_revision)
        return _BreakAfterFirstOfATxn(inner) if self.watches == 1 else inner

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


class _BreakAfterFirstOfATxn:
    def __init__(self, inner: object) -> None:
        self._inner = inner

    async def __aenter__(self) -> "_BreakAfterFirstOfATxn":
        await self._inner.__aenter__()  # type: ignore[attr-defined]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._inner.__aexit__(*exc)  # type: ignore[attr-defined]

    def __aiter__(self) -> "_BreakAfterFirstOfATxn":
        return self

    async def __anext__(self) -> object:
        event = await self._inner.__anext__()  # type: ignore[attr-defined]
        if not event.last_in_revision:
            self._broken = True
            return event
        if getattr(self, "_broken", False):
            raise MetadataUnavailable("the watch broke inside a transaction")
        return event


def test_a_watch_that_breaks_inside_a_transaction_resumes_at_that_transaction(tmp_path: Path) -> None:
    """Regression (found by `transactions` seed 1002126): the view counted a revision as
    seen from its first change, so a watch that broke after it resumed at the next revision
    and the transaction's other changes were never applied. A broker elected leader in one
    of them never learnt it, and its partition stayed without a serving leader for good."""

    async def scenario() -> None:
        clock = ManualClock()
        store = LocalMetadataStore(tmp_path / "store.json", clock)
        breaking = BreakingWatchStore(store)
        view = ClusterView(breaking, NoCatalog(), clock)  # type: ignore[arg-type]
        await view.start()
        state = records.encode(records.PartitionStateRecord(records.RECORD_VERSION, [0], 0, 0, [0]))
        revision = await store.txn({}, puts={records.partition_key(TOPIC, i): state for i in range(3)})
        for _ in range(300):
            if len(view.partitions) == 3 and breaking.watches > 1:
                break
            await asyncio.sleep(0.01)
        await view.stop()
        await store.close()
        assert breaking.watches > 1, "the watch never broke"
        assert {pid.partition: s.revision for pid, s in view.partitions.items()} == {i: revision for i in range(3)}

    asyncio.run(scenario())
