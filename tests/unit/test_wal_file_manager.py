"""The WAL file manager on one real in-process broker (tests/inprocess.py): the real logs,
WAL writer, reporter and manager over the in-memory object store, with the clock moved by
hand. Each test runs cycles itself (`run_cycle`), so nothing depends on the loop's pace."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from broker.objectstore import ObjectStoreUnavailable
from broker.partition import Partition
from tests.inprocess import InProcessBroker
from tests.integration.clients import build_batch, decode_records
from walfiles.format import WalObjectBuilder, read_object
from walfiles.keys import format_wal_key

GRACE_MS = 2_000
DEADLINE_MS = 60_000
SETTINGS = {
    "wal.file.manager.enable": "false",  # cycles run when the test says so
    "wal.file.manager.grace.ms": str(GRACE_MS),
    "wal.commit.deadline.ms": str(DEADLINE_MS),
    "wal.linger.ms": "20",
}
SHORT = {"diskless.enable": "true", "retention.ms": "10000", "segment.bytes": "100"}  # one batch per segment


def run(test: Callable[[InProcessBroker], Awaitable[None]], tmp_path: Path) -> None:
    async def scenario() -> None:
        async with InProcessBroker(tmp_path, SETTINGS) as harness:
            await test(harness)

    asyncio.run(scenario())


def wal_keys(harness: InProcessBroker) -> list[str]:
    return sorted(k for k in harness.objects._objects if k.startswith("wal/"))  # type: ignore[attr-defined]


def partition(harness: InProcessBroker, topic: str, index: int = 0) -> Partition:
    return harness.broker.replica_manager.partitions[(topic, index)]  # type: ignore[index]


async def produce(harness: InProcessBroker, topic: str, value: bytes) -> int:
    """One batch in its own WAL object, created a few ms after the previous one (an object's
    creation time is what the manager compares: one millisecond cannot be split)."""
    harness.clock.advance(5)
    error, offset = await harness.client().produce(topic, 0, build_batch([(None, value)]))
    assert error == 0, error
    return offset


async def put_orphan(harness: InProcessBroker, topic_id: uuid.UUID, sequence: int = 1) -> str:
    """A WAL object holding one batch of partition 0 of `topic_id` that no commit names (what
    a broker that died between upload and commit leaves); its key."""
    builder = WalObjectBuilder()
    builder.append(topic_id, 0, build_batch([(None, b"orphan")]))
    key = format_wal_key("", harness.broker.cluster_id, harness.clock.now_ms(), 7, sequence)
    await harness.objects.put(key, builder.build())
    return key


def test_retention_releases_objects_after_the_grace_period(tmp_path: Path) -> None:
    async def test(harness: InProcessBroker) -> None:
        client, manager = harness.client(), harness.broker.wal_files
        assert await client.create_topic("short", 1, SHORT) == 0
        for i in range(4):
            await produce(harness, "short", b"v%d" % i)
        objects = wal_keys(harness)
        assert len(objects) == 4
        harness.clock.advance(DEADLINE_MS + GRACE_MS + 1)
        report = await manager.run_cycle()
        assert report.deleted_objects == 0 and report.planned_total == 0, report
        assert report.kept == {"referenced": 4}
        assert report.status.objects == 4 and report.status.referenced_bytes > 0

        harness.clock.advance(20_000)  # past retention.ms: every sealed segment goes
        assert partition(harness, "short").log.enforce_retention() == 3
        report = await manager.run_cycle()
        assert report.deleted_objects == 0, "deleted before the grace period passed"
        assert report.planned_total == 3 and {p.ready_in_ms for p in report.planned} == {GRACE_MS}
        assert wal_keys(harness) == objects

        harness.clock.advance(GRACE_MS)
        report = await manager.run_cycle()
        assert report.deleted_objects == 3, report
        assert wal_keys(harness) == objects[3:], "the object the active segment references must stay"
        assert report.status.objects == 1 and report.status.deleted_objects_last_hour == 3
        part = await client.fetch("short", 0, 3)
        assert part.error_code == 0 and [r.value for r in decode_records(part.records)] == [b"v3"]

    run(test, tmp_path)


def test_an_object_shared_with_a_longer_retention_stays_and_counts_as_dead_bytes(tmp_path: Path) -> None:
    async def test(harness: InProcessBroker) -> None:
        client, manager = harness.client(), harness.broker.wal_files
        assert await client.create_topic("short", 1, SHORT) == 0
        assert await client.create_topic("long", 1, {"diskless.enable": "true", "segment.bytes": "100"}) == 0
        await asyncio.gather(produce(harness, "short", b"a" * 20), produce(harness, "long", b"b"))
        await produce(harness, "short", b"next")
        shared = wal_keys(harness)[0]
        harness.clock.advance(DEADLINE_MS + 20_000)
        assert partition(harness, "short").log.enforce_retention() == 1
        await manager.run_cycle()
        harness.clock.advance(GRACE_MS)
        report = await manager.run_cycle()
        assert shared in wal_keys(harness), "deleted an object the long-retention topic references"
        assert report.deleted_objects == 0 and report.kept.get("referenced") == 2
        assert report.status.dead_bytes >= len(build_batch([(None, b"a" * 20)])), report.status

    run(test, tmp_path)


def test_deleting_a_topic_releases_every_object_only_it_referenced(tmp_path: Path) -> None:
    async def test(harness: InProcessBroker) -> None:
        client, manager = harness.client(), harness.broker.wal_files
        assert await client.create_topic("gone", 1, {"diskless.enable": "true"}) == 0
        assert await client.create_topic("kept", 1, {"diskless.enable": "true"}) == 0
        for i in range(3):
            await produce(harness, "gone", b"g%d" % i)
        await produce(harness, "kept", b"k")
        await harness.broker.catalog.delete("gone")
        while ("gone", 0) in harness.broker.replica_manager.partitions:
            await asyncio.sleep(0.01)
        harness.clock.advance(DEADLINE_MS + GRACE_MS + 1)
        await manager.run_cycle()
        harness.clock.advance(GRACE_MS)
        report = await manager.run_cycle()
        assert report.deleted_objects == 3, report
        assert len(wal_keys(harness)) == 1
        part = await client.fetch("kept", 0, 0)
        assert [r.value for r in decode_records(part.records)] == [b"k"]

    run(test, tmp_path)


def test_an_uploaded_but_never_committed_object_goes_after_deadline_and_grace(tmp_path: Path) -> None:
    """A broker that died between upload and commit: its object names partitions that never
    referenced it. The manager reads its index (the uploader never told it)."""

    async def test(harness: InProcessBroker) -> None:
        client, manager = harness.client(), harness.broker.wal_files
        assert await client.create_topic("t", 1, {"diskless.enable": "true"}) == 0
        assert await client.create_topic("quiet", 1, {"diskless.enable": "true"}) == 0
        await produce(harness, "t", b"committed")
        harness.clock.advance(5)
        quiet = harness.broker.catalog.get("quiet")
        assert quiet is not None
        orphan = await put_orphan(harness, quiet.topic_id)
        harness.clock.advance(DEADLINE_MS)
        report = await manager.run_cycle()
        assert report.kept.get("young") == 2, "an object a commit may still reference was judged"
        harness.clock.advance(GRACE_MS + 1)
        report = await manager.run_cycle()
        assert [p.key for p in report.planned] == [orphan], report
        assert "none of its 1 partition(s) references it" in report.planned[0].reason
        assert report.kept == {"referenced": 1}
        harness.clock.advance(GRACE_MS)
        report = await manager.run_cycle()
        assert report.deleted_objects == 1 and orphan not in wal_keys(harness)
        assert len(wal_keys(harness)) == 1
        reads = harness.broker.metrics.walfiles_index_reads.labels("ok")
        assert reads._value.get() == 1  # type: ignore[attr-defined]

    run(test, tmp_path)


def test_an_orphan_holding_a_busy_partition_is_asked_about_and_deleted(tmp_path: Path) -> None:
    """The orphan names a partition whose log references older objects: the watermark cannot
    clear it, its index came from a GET, so the manager asks the partition's replicas."""

    async def test(harness: InProcessBroker) -> None:
        client, manager = harness.client(), harness.broker.wal_files
        assert await client.create_topic("t", 1, {"diskless.enable": "true"}) == 0
        await produce(harness, "t", b"older")
        topic = harness.broker.catalog.get("t")
        assert topic is not None
        harness.clock.advance(5)
        orphan = await put_orphan(harness, topic.topic_id)
        await produce(harness, "t", b"newer")  # a committed object created after the orphan
        harness.clock.advance(DEADLINE_MS + GRACE_MS + 1)
        report = await manager.run_cycle()
        assert [p.key for p in report.planned] == [orphan], report
        assert "asked their replicas" in report.planned[0].reason
        assert report.kept == {"referenced": 2}
        harness.clock.advance(GRACE_MS)
        report = await manager.run_cycle()
        assert report.deleted_objects == 1 and orphan not in wal_keys(harness) and len(wal_keys(harness)) == 2
        part = await client.fetch("t", 0, 0)
        assert [r.value for r in decode_records(part.records)] == [b"older", b"newer"]

    run(test, tmp_path)


def test_a_partition_whose_commit_was_refused_does_not_pin_the_object(tmp_path: Path) -> None:
    """One object, two partitions: the commit to "strict" is refused (acks=all with too few
    in-sync replicas: nothing appended), so its uploader reports only "short" as a possible
    referrer; when retention drops "short"'s batch the object goes, although "strict" keeps
    older references, and no index is read."""

    async def test(harness: InProcessBroker) -> None:
        client, manager = harness.client(), harness.broker.wal_files
        assert await client.create_topic("short", 1, SHORT) == 0
        assert await client.create_topic("strict", 1, {"diskless.enable": "true", "min.insync.replicas": "2"}) == 0
        harness.clock.advance(5)
        assert (await client.produce("strict", 0, build_batch([(None, b"acks=1 works")]), acks=1))[0] == 0
        harness.clock.advance(5)
        refused, _ = await asyncio.gather(
            client.produce("strict", 0, build_batch([(None, b"refused")]), acks=-1),
            produce(harness, "short", b"kept for a while"),
        )
        assert refused[0] == 19, refused  # NOT_ENOUGH_REPLICAS
        await produce(harness, "short", b"next")
        shared = wal_keys(harness)[1]
        index, _ = read_object(await harness.objects.get(shared))
        assert len(index.partition_keys()) == 2, "the two produces did not share one object"
        harness.clock.advance(DEADLINE_MS + 20_000)
        partition(harness, "short").log.enforce_retention()
        await manager.run_cycle()
        harness.clock.advance(GRACE_MS)
        report = await manager.run_cycle()
        assert shared not in wal_keys(harness), report
        reads = harness.broker.metrics.walfiles_index_reads
        assert sum(reads.labels(o)._value.get() for o in ("ok", "gone", "failed")) == 0  # type: ignore[attr-defined]

    run(test, tmp_path)


def test_a_dry_run_deletes_nothing_and_says_why(tmp_path: Path) -> None:
    async def test(harness: InProcessBroker) -> None:
        client, manager = harness.client(), harness.broker.wal_files
        assert await client.create_topic("short", 1, SHORT) == 0
        for i in range(3):
            await produce(harness, "short", b"v%d" % i)
        harness.clock.advance(DEADLINE_MS + 20_000)
        partition(harness, "short").log.enforce_retention()
        await manager.run_cycle(dry_run=True)
        harness.clock.advance(GRACE_MS)
        report = await manager.run_cycle(dry_run=True)
        assert report.dry_run and report.deleted_objects == 0 and report.planned_total == 2
        assert all(p.ready_in_ms == 0 and p.reason for p in report.planned)
        assert len(wal_keys(harness)) == 3

    run(test, tmp_path)


def test_throttled_deletes_forget_nothing_and_back_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def test(harness: InProcessBroker) -> None:
        client, manager = harness.client(), harness.broker.wal_files
        assert await client.create_topic("short", 1, SHORT) == 0
        for i in range(3):
            await produce(harness, "short", b"v%d" % i)
        harness.clock.advance(DEADLINE_MS + 20_000)
        partition(harness, "short").log.enforce_retention()
        await manager.run_cycle()
        harness.clock.advance(GRACE_MS)
        real = harness.objects.delete_many
        calls: list[list[str]] = []

        async def throttled(keys: Any) -> list[str]:
            calls.append(list(keys))
            raise ObjectStoreUnavailable("503 SlowDown (simulated)")

        monkeypatch.setattr(harness.objects, "delete_many", throttled)
        report = await manager.run_cycle()
        assert report.deleted_objects == 0 and report.failed_deletes == 2 and len(calls) == 1
        assert manager._backoff_ms > 0
        assert report.status.delete_failures_last_hour == 2 and report.status.unreferenced_objects == 2

        async def half(keys: Any) -> list[str]:  # one key refused: only the confirmed one is forgotten
            keys = list(keys)
            return await real(keys[:1])

        monkeypatch.setattr(harness.objects, "delete_many", half)
        report = await manager.run_cycle()
        assert report.deleted_objects == 1 and report.failed_deletes == 1
        assert report.status.unreferenced_objects == 1
        monkeypatch.setattr(harness.objects, "delete_many", real)
        report = await manager.run_cycle()
        assert report.deleted_objects == 1 and manager._backoff_ms == 0
        assert len(wal_keys(harness)) == 1

    run(test, tmp_path)


def test_a_manager_that_lost_the_controller_key_deletes_nothing(tmp_path: Path) -> None:
    async def test(harness: InProcessBroker) -> None:
        client, broker = harness.client(), harness.broker
        assert await client.create_topic("short", 1, SHORT) == 0
        for i in range(3):
            await produce(harness, "short", b"v%d" % i)
        harness.clock.advance(DEADLINE_MS + 20_000)
        partition(harness, "short").log.enforce_retention()
        await broker.wal_files.run_cycle()
        harness.clock.advance(GRACE_MS)

        async def deposed() -> bool:
            return False

        broker.wal_files._holds_controller = deposed  # type: ignore[method-assign]
        report = await broker.wal_files.run_cycle()
        assert report.deleted_objects == 0 and report.status.paused
        assert "no longer holds the controller key" in (report.status.paused_reason or "")
        assert len(wal_keys(harness)) == 3
        assert broker.metrics.walfiles_paused._value.get() == 1  # type: ignore[attr-defined]

    run(test, tmp_path)


def test_delete_records_releases_objects_below_the_new_log_start(tmp_path: Path) -> None:
    async def test(harness: InProcessBroker) -> None:
        client, manager = harness.client(), harness.broker.wal_files
        assert await client.create_topic("t", 1, {"diskless.enable": "true"}) == 0  # one segment
        for i in range(4):
            await produce(harness, "t", b"v%d" % i)
        objects = wal_keys(harness)
        partition(harness, "t").log.delete_records_before(2)
        harness.clock.advance(DEADLINE_MS + GRACE_MS + 1)
        await manager.run_cycle()
        harness.clock.advance(GRACE_MS)
        report = await manager.run_cycle()
        assert report.deleted_objects == 2 and wal_keys(harness) == objects[2:]

    run(test, tmp_path)


def test_uploads_are_described_by_their_uploader_so_no_index_is_read(tmp_path: Path) -> None:
    async def test(harness: InProcessBroker) -> None:
        client, manager = harness.client(), harness.broker.wal_files
        assert await client.create_topic("short", 1, SHORT) == 0
        assert await client.create_topic("long", 1, {"diskless.enable": "true"}) == 0
        await produce(harness, "long", b"pins the shortcut")
        for i in range(3):
            await produce(harness, "short", b"v%d" % i)
        harness.clock.advance(DEADLINE_MS + 20_000)
        partition(harness, "short").log.enforce_retention()
        await manager.run_cycle()
        harness.clock.advance(GRACE_MS)
        report = await manager.run_cycle()
        assert report.deleted_objects == 2
        reads = harness.broker.metrics.walfiles_index_reads
        assert sum(reads.labels(o)._value.get() for o in ("ok", "gone", "failed")) == 0  # type: ignore[attr-defined]

    run(test, tmp_path)


def test_lookups_beyond_the_per_cycle_budget_resume_where_the_last_cycle_stopped(tmp_path: Path) -> None:
    async def scenario() -> None:
        settings = {**SETTINGS, "wal.file.manager.max.index.reads.per.cycle": "2"}
        async with InProcessBroker(tmp_path, settings) as harness:
            client, manager = harness.client(), harness.broker.wal_files
            assert await client.create_topic("quiet", 1, {"diskless.enable": "true"}) == 0
            assert await client.create_topic("t", 1, {"diskless.enable": "true"}) == 0
            await produce(harness, "t", b"older than the orphans: no shortcut for them")
            harness.clock.advance(5)
            quiet = harness.broker.catalog.get("quiet")
            assert quiet is not None
            orphans = []
            for sequence in range(5):
                orphans.append(await put_orphan(harness, quiet.topic_id, sequence))
            harness.clock.advance(DEADLINE_MS + GRACE_MS + 1)
            found: list[str] = []
            for cycle in range(3):
                report = await manager.run_cycle(dry_run=True)
                found = [p.key for p in report.planned]
                assert len(found) == min(5, 2 * (cycle + 1)), (cycle, found)
            assert found == orphans
            reads = harness.broker.metrics.walfiles_index_reads.labels("ok")
            assert reads._value.get() == 5  # type: ignore[attr-defined]

    asyncio.run(scenario())
