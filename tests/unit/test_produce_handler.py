"""The Produce handler over real partitions, the real WAL writer and the in-memory object
store (no sockets): what a request's mix of classic and diskless partitions must not change."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from broker.clock import SystemClock
from broker.config import load_config
from broker.handlers import produce
from broker.metadata.records import PartitionStateRecord
from broker.objectstore import MemoryObjectStore
from broker.partition import Partition
from broker.protocol.errors import ErrorCode
from broker.topic_config import effective
from broker.topics import Topic
from tests.unit.test_wal_writer import TOPIC_ID, Rig

CLASSIC_ID = uuid.UUID(int=7)


def plain_batch(value: bytes, now_ms: int) -> bytes:
    """A non-idempotent batch, as librdkafka sends by default."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=now_ms, key=None, value=value, headers=[])
    return bytes(builder.build())


def request(acks: int, *topics: tuple[str, bytes]) -> SimpleNamespace:
    return SimpleNamespace(
        acks=acks,
        transactional_id=None,
        timeout_ms=30_000,
        topic_data=[
            SimpleNamespace(name=name, topic_id=None, partition_data=[SimpleNamespace(index=0, records=records)])
            for name, records in topics
        ],
    )


def test_pipelined_requests_keep_a_diskless_partitions_arrival_order(tmp_path: Path) -> None:
    """Regression (issue 11, defect 2): a request holding a classic acks=all partition and a
    diskless one submitted its diskless batch only after the classic replication wait, so the
    next request's batch for the same diskless partition was committed first."""

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=1, wal_linger_ms=5)
        classic_settings = effective({"diskless.enable": "false"}, load_config(environ={}))
        classic = Partition.open(
            "c", 0, tmp_path / "c-0", classic_settings, rig.clock, 86_400_000, on_append=lambda p: None
        )
        classic.make_leader(0, PartitionStateRecord(1, [0, 1], 0, 1, [0, 1]), 1)  # acks=all waits for 1
        topics = {"t": Topic("t", TOPIC_ID, 1, {}, rig.settings), "c": Topic("c", CLASSIC_ID, 1, {}, classic_settings)}
        broker = SimpleNamespace(
            config=load_config(environ={}),
            metrics=rig.metrics,
            clock=rig.clock,
            wal=rig.writer,
            node_id=0,
            router=SimpleNamespace(
                client_az=lambda header: ("az1", False), representative=lambda *args: 0, represented_az=lambda az: az
            ),
            catalog=SimpleNamespace(get=topics.get, by_id=lambda topic_id: None),
            view=SimpleNamespace(
                partitions={(str(TOPIC_ID), 0): SimpleNamespace(record=PartitionStateRecord(1, [0], 0, 0, [0]))},
                applied_revision=1,
            ),
            replica_manager=SimpleNamespace(get=lambda name, index: classic),
        )
        header = SimpleNamespace(api_version=9, peer="p", client_id="c")
        now = rig.clock.now_ms()
        first = asyncio.create_task(
            produce.handle(
                broker, header, request(-1, ("c", plain_batch(b"classic", now)), ("t", plain_batch(b"first", now)))
            )
        )
        second = asyncio.create_task(produce.handle(broker, header, request(-1, ("t", plain_batch(b"second", now)))))
        await asyncio.sleep(0.05)  # the classic follower fetches a little later
        assert classic.leader_state is not None
        leo = classic.log.log_end_offset
        classic.leader_state.on_follower_fetch(1, leo, leo, rig.clock.now_ms())
        classic.advance_high_watermark()
        one, two = await asyncio.gather(first, second)
        assert [p.error_code for t in one.responses for p in t.partition_responses] == [0, 0]
        assert one.responses[1].partition_responses[0].base_offset == 0
        assert two.responses[0].partition_responses[0].base_offset == 1
        values = [r.value for raw in await rig.read_back(0) for r in DefaultRecordBatch(raw)]
        assert values == [b"first", b"second"]

    asyncio.run(scenario())


def test_acks_zero_waits_until_the_wal_takes_its_batches(tmp_path: Path) -> None:
    """Regression (issue 11, defect 5): acks=0 diskless produce returned at once, so while
    uploads stalled the WAL writer's queue grew without bound and the connection never paused."""

    class StalledStore(MemoryObjectStore):
        def __init__(self) -> None:
            super().__init__(clock=SystemClock())
            self.go = asyncio.Event()

        async def put_if_absent(self, key: str, data: bytes) -> bool:
            await self.go.wait()
            return await super().put_if_absent(key, data)

        async def put(self, key: str, data: bytes) -> None:
            await self.go.wait()
            await super().put(key, data)

    async def scenario() -> None:
        store = StalledStore()
        rig = Rig(
            tmp_path, store, partitions=1, wal_linger_ms=1, wal_max_inflight_bytes=1024, wal_buffer_max_bytes=1024
        )
        topic = Topic("t", TOPIC_ID, 1, {}, rig.settings)
        broker = SimpleNamespace(
            config=load_config(environ={}),
            metrics=rig.metrics,
            clock=rig.clock,
            wal=rig.writer,
            node_id=0,
            router=SimpleNamespace(
                client_az=lambda header: ("az1", False), representative=lambda *args: 0, represented_az=lambda az: az
            ),
            catalog=SimpleNamespace(get=lambda name: topic, by_id=lambda topic_id: topic),
            view=SimpleNamespace(
                partitions={(str(TOPIC_ID), 0): SimpleNamespace(record=PartitionStateRecord(1, [0], 0, 0, [0]))},
                applied_revision=1,
            ),
        )
        header = SimpleNamespace(api_version=9, peer="p", client_id="c")
        now = rig.clock.now_ms()
        first = await produce.handle(broker, header, request(0, ("t", plain_batch(b"x" * 600, now))))
        assert first is None, "the first request fits in the in-flight bound"
        second = asyncio.create_task(produce.handle(broker, header, request(0, ("t", plain_batch(b"y" * 600, now)))))
        await asyncio.sleep(0.05)
        assert not second.done(), "held while the object store takes nothing"
        store.go.set()
        assert await asyncio.wait_for(second, 5) is None
        await rig.writer.close()
        assert rig.partitions[0].log.log_end_offset == 2

    asyncio.run(scenario())


def test_a_disk_error_on_a_classic_partition_is_its_kafka_storage_error(tmp_path: Path) -> None:
    """Found by the simulation (cluster seed 374): an OSError from a classic partition's log
    escaped the handler, which closed the client's connection instead of answering
    KAFKA_STORAGE_ERROR (retriable) for that partition."""

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=1)
        classic_settings = effective({"diskless.enable": "false"}, load_config(environ={}))
        classic = Partition.open(
            "c", 0, tmp_path / "c-0", classic_settings, rig.clock, 86_400_000, on_append=lambda p: None
        )
        classic.make_leader(0, PartitionStateRecord(1, [0], 0, 1, [0]), 1)

        def failing(*args, **kwargs):  # type: ignore[no-untyped-def]
            raise OSError(5, "Input/output error")

        classic.log.append = failing  # type: ignore[method-assign]
        topics = {"c": Topic("c", CLASSIC_ID, 1, {}, classic_settings)}
        broker = SimpleNamespace(
            config=load_config(environ={}),
            metrics=rig.metrics,
            clock=rig.clock,
            wal=rig.writer,
            node_id=0,
            router=SimpleNamespace(client_az=lambda header: ("az1", False), represented_az=lambda az: az),
            catalog=SimpleNamespace(get=topics.get, by_id=lambda topic_id: None),
            replica_manager=SimpleNamespace(get=lambda name, index: classic),
        )
        response = await produce.handle(
            broker,
            SimpleNamespace(api_version=9, peer="p", client_id="c"),
            request(-1, ("c", plain_batch(b"x", rig.clock.now_ms()))),
        )
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert classic.log.log_end_offset == 0

    asyncio.run(scenario())
