"""The diskless write path over real partitions and the in-memory object store: shared objects,
seal by linger and by size, commits in seal order, upload failure, backpressure, the commit
deadline, idempotent retries across objects, and reading the batches back."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from kafka.record.default_records import DefaultRecordBatch

from broker.clock import ManualClock, SystemClock
from broker.config import load_config
from broker.wal.cache import ObjectCache
from broker.wal.commit import CommitRequest, LocalCommitter, PendingCommit
from broker.wal.reader import WalReader
from broker.wal.wal_writer import PartitionAppend, WalWriter
from broker.log import EntryKind
from broker.metadata.records import PartitionStateRecord
from broker.metrics import BrokerMetrics
from broker.objectstore import MemoryObjectStore, ObjectStoreUnavailable
from broker.log_validator import prepare_diskless
from broker.partition import Partition
from broker.protocol.batch import crc_is_valid, parse_header
from broker.protocol.errors import ErrorCode
from broker.reads.resolver import batch_pieces
from broker.topic_config import effective
from tests.unit.test_partition import CLOCK_START, batch, lead
from walfiles.format import read_object
from walfiles.keys import WalKeyAllocator, format_wal_key, wal_prefix

TOPIC_ID = uuid.UUID(int=42)
CLUSTER = "test-cluster"


class Lookup:
    """The catalog and replica lookups the committer needs, over a dict of real partitions."""

    def __init__(self, partitions: dict[int, Partition]) -> None:
        self.partitions = {("t", index): partition for index, partition in partitions.items()}
        self.name = "t"

    def by_id(self, topic_id: uuid.UUID):  # type: ignore[no-untyped-def]
        return self if topic_id == TOPIC_ID else None

    def get(self, name: str, index: int) -> Partition:
        return self.partitions[(name, index)]


class Rig:
    def __init__(self, tmp_path: Path, store: MemoryObjectStore, partitions: int = 3, **overrides: object) -> None:
        self.clock = ManualClock(CLOCK_START)
        self.settings = effective(
            {
                "diskless.enable": "true",
                **{k: str(v) for k, v in overrides.items() if "." in k and not k.startswith("wal")},
            },
            load_config(environ={}),
        )
        self.partitions = {
            i: lead(
                Partition.open(
                    "t", i, tmp_path / f"t-{i}", self.settings, self.clock, 86_400_000, on_append=lambda p: None
                )
            )
            for i in range(partitions)
        }
        lookup = Lookup(self.partitions)
        self.committer = LocalCommitter(lookup, lookup, self.clock, deadline_ms=60_000)  # type: ignore[arg-type]
        self.store = store
        self.cache = ObjectCache(1 << 30)
        self.metrics = BrokerMetrics()
        self.writer = WalWriter(
            store,
            WalKeyAllocator("", CLUSTER, 0, self.clock.now_ms, first_sequence=0),
            self.committer,
            self.cache,
            self.metrics,
            clock=SystemClock(),
            buffer_max_bytes=int(overrides.get("wal_buffer_max_bytes", 8 << 20)),
            linger_ms=int(overrides.get("wal_linger_ms", 20)),
            max_inflight_bytes=int(overrides.get("wal_max_inflight_bytes", 64 << 20)),
        )
        self.reader = WalReader(store, lambda oid: wal_prefix("", CLUSTER) + oid, ObjectCache(0))

    def append(self, index: int, *batches: memoryview, acks: int = -1) -> PartitionAppend:
        records = memoryview(b"".join(batches))
        return PartitionAppend(TOPIC_ID, index, acks, prepare_diskless(records, self.settings, self.clock.now_ms()), -1)

    async def read_back(self, index: int) -> list[bytes]:
        log = self.partitions[index].log
        entries = log.read(log.log_start_offset, 1 << 30, log.high_watermark)
        assert all(e.kind == EntryKind.COORDINATES for e in entries)
        pieces = await batch_pieces(SimpleNamespace(wal_reader=self.reader), entries)
        assert not any(isinstance(p, Exception) for p in pieces), pieces
        return [b"".join(p) for p in pieces]  # type: ignore[arg-type]


def sequence_batches(producer_id: int, n: int, count: int = 2) -> list[memoryview]:
    return [batch(seq * count, count=count, producer_id=producer_id) for seq in range(n)]


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_many_partitions_and_producers_share_one_object(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = MemoryObjectStore(clock=SystemClock())
        rig = Rig(tmp_path, store)
        sent = {i: sequence_batches(100 + i, 4) for i in range(3)}
        futures = []
        for seq in range(4):  # interleaved produce requests, each covering all partitions
            futures += rig.writer.submit([rig.append(i, sent[i][seq]) for i in range(3)])
        results = await asyncio.gather(*futures)
        assert [r.error_code for r in results] == [0] * 12
        assert len(store.keys()) == 1, "one PUT for the whole linger window"
        index, _data = read_object(await store.get(store.keys()[0]))
        assert index.batch_count == 12
        for i in range(3):
            assert [r.base_offset for r in results[i::3]] == [0, 2, 4, 6]
            served = await rig.read_back(i)
            for offset, (original, got) in enumerate(zip(sent[i], served)):
                assert got[61:] == bytes(original[61:]), "record bytes unmodified"
                header = parse_header(got)
                assert header.base_offset == offset * 2 and crc_is_valid(memoryview(got), header)
                assert [r.offset for r in DefaultRecordBatch(got)] == [offset * 2, offset * 2 + 1]

    run(scenario())


def test_size_seal_and_commits_in_seal_order_even_when_uploads_finish_out_of_order(tmp_path: Path) -> None:
    class SlowFirstStore(MemoryObjectStore):
        """Earlier PUTs take longer, so later objects finish uploading first."""

        delays = [0.15, 0.10, 0.05, 0.0]

        async def put_if_absent(self, key: str, data: bytes) -> bool:
            await asyncio.sleep(self.delays.pop(0) if self.delays else 0)
            return await super().put_if_absent(key, data)

    async def scenario() -> None:
        store = SlowFirstStore(clock=SystemClock())
        one = len(batch(0))
        rig = Rig(tmp_path, store, partitions=1, wal_buffer_max_bytes=2 * one, wal_linger_ms=10_000)
        batches = sequence_batches(7, 8)
        futures = [f for b in batches for f in rig.writer.submit([rig.append(0, b)])]
        results = await asyncio.gather(*futures)
        assert [r.base_offset for r in results] == list(range(0, 16, 2)), "offsets follow arrival order"
        assert len(store.keys()) == 4 and rig.metrics.wal_seals.labels("size")._value.get() == 4
        assert [g[61:] for g in await rig.read_back(0)] == [bytes(b[61:]) for b in batches]

    run(scenario())


def test_upload_failure_fails_every_batch_and_commits_nothing(tmp_path: Path) -> None:
    class FailingOnce(MemoryObjectStore):
        failed = False

        async def put_if_absent(self, key: str, data: bytes) -> bool:
            if not self.failed:
                self.failed = True
                raise ObjectStoreUnavailable("503 SlowDown, retries exhausted")
            return await super().put_if_absent(key, data)

    async def scenario() -> None:
        store = FailingOnce(clock=SystemClock())
        rig = Rig(tmp_path, store)
        first = await asyncio.gather(*rig.writer.submit([rig.append(i, batch(0, producer_id=i)) for i in range(3)]))
        assert {r.error_code for r in first} == {ErrorCode.KAFKA_STORAGE_ERROR}
        assert all(p.log.log_end_offset == 0 for p in rig.partitions.values())
        assert rig.metrics.wal_objects.labels("upload_failed")._value.get() == 1
        # the producers retry the same batches: committed once, at offset 0
        retry = await asyncio.gather(*rig.writer.submit([rig.append(i, batch(0, producer_id=i)) for i in range(3)]))
        assert [(r.error_code, r.base_offset) for r in retry] == [(0, 0)] * 3
        assert rig.writer.inflight_bytes == 0

    run(scenario())


class NoOverwrites(MemoryObjectStore):
    """Counts unconditional PUTs: the writer must never make one (it could replace an object
    another process committed batches in)."""

    overwrites = 0

    async def put(self, key: str, data: bytes) -> None:
        self.overwrites += 1
        await super().put(key, data)


def test_a_key_holding_another_object_is_never_overwritten_and_the_batch_lands_under_a_new_key(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = NoOverwrites(clock=SystemClock())
        rig = Rig(tmp_path, store, partitions=1)
        # Another process with this node id (or this node before its clock stepped back)
        # already wrote the key the writer takes first, and committed batches in it.
        taken = format_wal_key("", CLUSTER, CLOCK_START, 0, 0)
        await MemoryObjectStore.put(store, taken, b"another process's WAL object")
        b = batch(0, producer_id=11)
        [result] = await asyncio.gather(*rig.writer.submit([rig.append(0, b)]))
        assert (result.error_code, result.base_offset) == (0, 0)
        assert store.overwrites == 0
        assert await store.get(taken) == b"another process's WAL object", "the other object is intact"
        [ours] = [key for key in store.keys() if key != taken]
        index, _data = read_object(await store.get(ours))
        assert index.batch_count == 1
        assert rig.partitions[0].log.log_end_offset == 2, "committed once"
        assert [g[61:] for g in await rig.read_back(0)] == [bytes(b[61:])]
        assert rig.metrics.wal_key_collisions._value.get() == 1
        assert rig.metrics.wal_objects.labels("committed")._value.get() == 1

    run(scenario())


def test_keys_that_stay_taken_fail_the_object_with_kafka_storage_error(tmp_path: Path) -> None:
    class EveryKeyTaken(NoOverwrites):
        async def put_if_absent(self, key: str, data: bytes) -> bool:
            self.asked = getattr(self, "asked", 0) + 1
            return False

    from broker.wal.wal_writer import WAL_KEY_ATTEMPTS

    async def scenario() -> None:
        store = EveryKeyTaken(clock=SystemClock())
        rig = Rig(tmp_path, store)
        results = await asyncio.gather(*rig.writer.submit([rig.append(i, batch(0, producer_id=i)) for i in range(3)]))
        assert {r.error_code for r in results} == {ErrorCode.KAFKA_STORAGE_ERROR}
        assert store.overwrites == 0 and store.keys() == []
        assert store.asked == WAL_KEY_ATTEMPTS, "a bounded number of fresh keys"
        assert rig.metrics.wal_key_collisions._value.get() == WAL_KEY_ATTEMPTS
        assert rig.metrics.wal_objects.labels("upload_failed")._value.get() == 1
        assert all(p.log.log_end_offset == 0 for p in rig.partitions.values())
        assert rig.writer.inflight_bytes == 0

    run(scenario())


def test_backpressure_holds_requests_in_arrival_order_and_bounds_inflight_bytes(tmp_path: Path) -> None:
    class GatedStore(MemoryObjectStore):
        def __init__(self) -> None:
            super().__init__(clock=SystemClock())
            self.gate = asyncio.Event()

        async def put_if_absent(self, key: str, data: bytes) -> bool:
            await self.gate.wait()
            return await super().put_if_absent(key, data)

    async def scenario() -> None:
        store = GatedStore()
        one = len(batch(0))
        rig = Rig(
            tmp_path, store, partitions=1, wal_buffer_max_bytes=1024, wal_max_inflight_bytes=1024, wal_linger_ms=5
        )
        batches = sequence_batches(9, 6 * 1024 // one)
        futures = [f for b in batches for f in rig.writer.submit([rig.append(0, b)])]
        await asyncio.sleep(0.05)
        assert rig.writer.inflight_bytes <= 1024, "admitted bytes never pass wal.max.inflight.bytes"
        assert rig.metrics.wal_backpressure_waits._value.get() > 0
        assert not any(f.done() for f in futures)
        store.gate.set()
        results = await asyncio.gather(*futures)
        assert [r.base_offset for r in results] == list(range(0, 2 * len(batches), 2))
        assert rig.writer.inflight_bytes == 0

    run(scenario())


def test_commit_past_the_deadline_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()))
        stale_key = WalKeyAllocator("", CLUSTER, 0, lambda: CLOCK_START - 60_001, first_sequence=0).next()
        append = rig.append(0, batch(0))
        from broker.wal.commit import COMMIT_VERSION, CommitBatch, CommitPartition

        part = CommitPartition(TOPIC_ID, 0, -1, [CommitBatch(head, 8, len(b)) for b, head in append.batches], -1)
        response = rig.committer.apply(CommitRequest(COMMIT_VERSION, stale_key.object_id, [part]))
        assert response.results[0].error_code == ErrorCode.REQUEST_TIMED_OUT
        assert rig.partitions[0].log.log_end_offset == 0

    run(scenario())


def test_retried_idempotent_batch_in_a_new_object_answers_its_original_offset(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = MemoryObjectStore(clock=SystemClock())
        rig = Rig(tmp_path, store)
        b = batch(0, producer_id=5)
        [first] = await asyncio.gather(*rig.writer.submit([rig.append(0, b)]))
        [again] = await asyncio.gather(*rig.writer.submit([rig.append(0, b)]))
        assert (first.base_offset, again.base_offset) == (0, 0)
        assert rig.partitions[0].log.log_end_offset == 2, "committed at most once"
        assert len(store.keys()) == 2, "the duplicate's bytes were uploaded; nothing references them"
        [out_of_order] = await asyncio.gather(*rig.writer.submit([rig.append(0, batch(10, producer_id=5))]))
        assert out_of_order.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    run(scenario())


def test_log_append_time_is_stamped_in_the_committed_header_and_the_object(tmp_path: Path) -> None:
    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), **{"message.timestamp.type": "LogAppendTime"})
        rig.clock.advance(5_000)
        original = batch(0)
        [result] = await asyncio.gather(*rig.writer.submit([rig.append(0, original)]))
        assert result.log_append_time_ms == CLOCK_START + 5_000
        [served] = await rig.read_back(0)
        header = parse_header(served)
        assert header.max_timestamp == CLOCK_START + 5_000 and crc_is_valid(memoryview(served), header)
        assert [r.timestamp for r in DefaultRecordBatch(served)] == [CLOCK_START + 5_000] * 2
        stored = await rig.store.get(rig.store.keys()[0])
        assert bytes(served[21:]) in stored, "the WAL object holds the batch as stored (log_validator)"
        assert bytes(original[61:]) in stored, "with the producer's records unchanged"

    run(scenario())


def test_retention_bytes_and_delete_records_count_the_referenced_batches(tmp_path: Path) -> None:
    async def scenario() -> None:
        batches = sequence_batches(3, 10, count=30)  # ~600-byte batches, ~130-byte entries
        one = len(batches[0])
        rig = Rig(
            tmp_path,
            MemoryObjectStore(clock=SystemClock()),
            partitions=1,
            **{"segment.bytes": str(2 * one), "retention.bytes": str(4 * one)},
        )
        for b in batches:
            await asyncio.gather(*rig.writer.submit([rig.append(0, b)]))
        log = rig.partitions[0].log
        assert len(log.segment_base_offsets) >= 5, "segments roll by batch bytes, not entry bytes"
        assert log.size_bytes == 10 * one
        log.enforce_retention(rig.clock.now_ms())
        assert 4 * one <= log.size_bytes < 6 * one
        assert log.log_start_offset > 0
        log.delete_records_before(8 * 30)
        assert log.log_start_offset == 8 * 30
        assert len(await rig.read_back(0)) == 2

    run(scenario())


@pytest.mark.parametrize("acks", [0, 1])
def test_acks_zero_and_one_commit_too(tmp_path: Path, acks: int) -> None:
    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()))
        [result] = await asyncio.gather(*rig.writer.submit([rig.append(0, batch(0), acks=acks)]))
        assert result.error_code == 0 and rig.partitions[0].log.high_watermark == 2
        await rig.writer.close()

    run(scenario())


def test_crash_between_upload_and_commit_leaves_nothing_visible_and_the_retry_commits_once(tmp_path: Path) -> None:
    class NeverAnswers:
        def route(self, topic_id: uuid.UUID, partition: int) -> None:
            return None

        def commit(self, request: CommitRequest):  # type: ignore[no-untyped-def]
            loop = asyncio.get_running_loop()  # the broker dies before the leader is asked
            return [PendingCommit(loop.create_future(), loop.create_future()) for _ in request.partitions]

    async def scenario() -> None:
        store = MemoryObjectStore(clock=SystemClock())
        rig = Rig(tmp_path, store)
        dying = WalWriter(
            store,
            WalKeyAllocator("", CLUSTER, 0, rig.clock.now_ms, first_sequence=100),
            NeverAnswers(),
            None,
            rig.metrics,
            clock=SystemClock(),
            buffer_max_bytes=8 << 20,
            linger_ms=1,
            max_inflight_bytes=64 << 20,
        )
        b = batch(0, producer_id=11)
        [lost] = dying.submit([rig.append(0, b)])
        while not store.keys():
            await asyncio.sleep(0.005)
        assert not lost.done() and rig.partitions[0].log.log_end_offset == 0, "uploaded, not committed"
        [retry] = await asyncio.gather(*rig.writer.submit([rig.append(0, b)]))  # the producer retries
        assert (retry.error_code, retry.base_offset) == (0, 0)
        assert len(store.keys()) == 2 and rig.partitions[0].log.log_end_offset == 2
        assert [g[61:] for g in await rig.read_back(0)] == [bytes(b[61:])], "visible exactly once"

    run(scenario())


def test_close_ships_everything_including_requests_waiting_for_backpressure(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = MemoryObjectStore(clock=SystemClock())
        rig = Rig(
            tmp_path, store, partitions=1, wal_buffer_max_bytes=1024, wal_max_inflight_bytes=1024, wal_linger_ms=60_000
        )
        futures = [f for b in sequence_batches(4, 40) for f in rig.writer.submit([rig.append(0, b)])]
        await rig.writer.close()
        assert all(f.done() and f.result().error_code == 0 for f in futures)
        assert rig.partitions[0].log.log_end_offset == 80

    run(scenario())


def test_an_unexpected_error_in_one_partition_fails_only_that_partition(tmp_path: Path) -> None:
    """Regression (issue 11, defect 7): an OSError (or a closed log) inside a commit escaped
    `apply` and failed every slot of the WAL object, although other partitions were already
    appended: their producers retried and duplicated."""

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=3)
        rig.partitions[1].log.close()  # appends now raise LogClosedError
        results = await asyncio.gather(
            *rig.writer.submit([rig.append(i, batch(0, producer_id=20 + i)) for i in range(3)])
        )
        assert [r.error_code for r in results] == [0, ErrorCode.KAFKA_STORAGE_ERROR, 0]
        assert [rig.partitions[i].log.log_end_offset for i in (0, 2)] == [2, 2]

    run(scenario())


def _stuck_follower(partition: Partition) -> None:
    """Replicas [0, 1], both in the ISR, and follower 1 never fetches: acks=all waits."""
    partition.make_leader(0, PartitionStateRecord(1, [0, 1], 0, 1, [0, 1]), 2)


def test_a_slow_partition_delays_only_the_producers_that_wrote_to_it(tmp_path: Path) -> None:
    """Issue 12 (head-of-line): a slot was answered only once every partition of its WAL object
    was acknowledged, and the object's in-flight bytes stayed reserved until then."""

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=2, wal_linger_ms=5)
        _stuck_follower(rig.partitions[1])
        [healthy] = rig.writer.submit([rig.append(0, batch(0, producer_id=1))])
        [slow] = rig.writer.submit([rig.append(1, batch(0, producer_id=2))])
        result = await asyncio.wait_for(healthy, 5)
        assert (result.error_code, result.base_offset) == (0, 0)
        assert not slow.done() and rig.writer.inflight_bytes == 0, "applied: nothing of the object is in flight"
        follower = rig.partitions[1]
        assert follower.leader_state is not None
        follower.leader_state.on_follower_fetch(1, 2, 2, rig.clock.now_ms())
        follower.advance_high_watermark()
        assert (await asyncio.wait_for(slow, 5)).error_code == 0

    run(scenario())


class LeaderBroker:
    """An RPC pool whose calls reach another broker's committer, through msgspec as on the wire."""

    def __init__(self, committer: LocalCommitter) -> None:
        self.committer = committer
        self.calls: list[str] = []

    def get(self, node_id: int, host: str, port: int):  # type: ignore[no-untyped-def]
        return self

    async def call(self, request, timeout_s: float):  # type: ignore[no-untyped-def]
        import msgspec
        from broker.peer_service import PeerRequest, PeerResponse, PeerService

        self.calls.append(type(request).__name__)
        wire = msgspec.msgpack.decode(msgspec.msgpack.encode(request), type=PeerRequest)
        service = PeerService(None, self.committer, None, None, None, 0, lambda: 0, None)  # type: ignore[arg-type]
        answer = await service.handle(wire)
        return msgspec.msgpack.decode(msgspec.msgpack.encode(answer), type=PeerResponse)


def remote_writer(rig: Rig, leader: LeaderBroker, partitions: int) -> WalWriter:
    """A WAL writer on broker 5 whose partitions broker 0 leads, reached through `leader`."""
    from broker.wal.commit_router import CommitRouter

    view = SimpleNamespace(
        partitions={
            (str(TOPIC_ID), i): SimpleNamespace(record=SimpleNamespace(leader=0, leader_epoch=0))
            for i in range(partitions)
        },
        brokers={0: SimpleNamespace(rpc_host="leader", rpc_port=1)},
    )
    router = CommitRouter(5, rig.committer, view, leader, rig.metrics)  # type: ignore[arg-type]
    return WalWriter(
        rig.store,
        WalKeyAllocator("", CLUSTER, 5, rig.clock.now_ms, first_sequence=0),
        router,
        None,
        rig.metrics,
        clock=SystemClock(),
        buffer_max_bytes=8 << 20,
        linger_ms=5,
        max_inflight_bytes=64 << 20,
    )


def test_remote_commits_are_acknowledged_partition_by_partition(tmp_path: Path) -> None:
    """Issue 12: a remote leader answered a commit only once all its partitions' acks were
    satisfied, so one slow partition held the producers of every other."""

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=2, wal_linger_ms=5)
        _stuck_follower(rig.partitions[1])
        leader = LeaderBroker(rig.committer)
        writer = remote_writer(rig, leader, partitions=2)
        healthy, slow = writer.submit([rig.append(0, batch(0, producer_id=1)), rig.append(1, batch(0, producer_id=2))])
        assert (await asyncio.wait_for(healthy, 5)).error_code == 0
        assert not slow.done() and writer.inflight_bytes == 0
        assert leader.calls == ["CommitRequest", "ReplicationWaitRequest"]
        follower = rig.partitions[1]
        assert follower.leader_state is not None
        follower.leader_state.on_follower_fetch(1, 2, 2, rig.clock.now_ms())
        follower.advance_high_watermark()
        assert (await asyncio.wait_for(slow, 5)).error_code == 0

    run(scenario())


class LeaderLostAfterApplying(LeaderBroker):
    """The leader applies the commit, then the connection fails before its answer arrives."""

    async def call(self, request, timeout_s: float):  # type: ignore[no-untyped-def]
        from broker.rpc import RpcUnavailable

        await super().call(request, timeout_s)
        raise RpcUnavailable("connection to the leader lost")


def test_a_commit_whose_answer_was_lost_is_answered_as_possibly_persisted(tmp_path: Path) -> None:
    """A commit sent to the leader whose connection then failed may have been applied: the
    producer must hear REQUEST_TIMED_OUT (librdkafka: possibly persisted, retried with the same
    sequence), never NOT_LEADER_OR_FOLLOWER, which librdkafka takes as "not persisted" and
    sends again as a new message after an epoch bump: a duplicate in the log."""

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=1, wal_linger_ms=5)
        leader = LeaderLostAfterApplying(rig.committer)
        writer = remote_writer(rig, leader, partitions=1)
        [answer] = writer.submit([rig.append(0, batch(0, producer_id=1))])
        result = await asyncio.wait_for(answer, 5)
        assert rig.partitions[0].log.log_end_offset > 0  # it was applied
        assert result.error_code == ErrorCode.REQUEST_TIMED_OUT, ErrorCode(result.error_code).name

    run(scenario())


def test_after_a_failed_upload_the_producers_later_batches_wait_for_its_retry(tmp_path: Path) -> None:
    """Issue 11 (found by the rolling-restart test and the pipelined sim producer): the first
    object's upload failed while the next object, holding the same producer's next batch,
    uploaded fine and was committed: the leader, not knowing the producer yet, accepted the
    later batch and the retry of the first landed after it (librdkafka with a known producer:
    OUT_OF_ORDER_SEQUENCE_NUMBER, an epoch bump and duplicates). The later batch must fail
    with the first one's retriable error until the first is sent again."""

    class FirstPutFailsLate(MemoryObjectStore):
        puts = 0

        async def put_if_absent(self, key: str, data: bytes) -> bool:
            self.puts += 1
            if self.puts == 1:
                await asyncio.sleep(0.05)  # the second object is uploaded meanwhile
                raise ObjectStoreUnavailable("503 SlowDown, retries exhausted")
            return await super().put_if_absent(key, data)

    async def scenario() -> None:
        one = len(batch(0))
        rig = Rig(
            tmp_path,
            FirstPutFailsLate(clock=SystemClock()),
            partitions=1,
            wal_buffer_max_bytes=one,
            wal_linger_ms=10_000,
        )
        first, second = sequence_batches(7, 2)
        [a] = rig.writer.submit([rig.append(0, first)])  # each batch fills an object: two objects
        [b] = rig.writer.submit([rig.append(0, second)])
        results = await asyncio.gather(a, b)
        assert [r.error_code for r in results] == [ErrorCode.KAFKA_STORAGE_ERROR] * 2
        assert rig.partitions[0].log.log_end_offset == 0, "nothing lands behind the gap"
        assert rig.metrics.produce_barrier_refusals._value.get() == 1
        # the producer retries in order: both land, in sequence order
        [a] = rig.writer.submit([rig.append(0, first)])
        [b] = rig.writer.submit([rig.append(0, second)])
        assert [(r.error_code, r.base_offset) for r in await asyncio.gather(a, b)] == [(0, 0), (0, 2)]
        assert rig.metrics.producer_sequence_barriers.labels("representative")._value.get() == 0

    run(scenario())


def test_batches_refused_as_not_the_representative_hold_back_the_producers_next_ones(tmp_path: Path) -> None:
    """The sim's seed 48: a broker that was not yet the partition's representative refused a
    producer's batch (NOT_LEADER_OR_FOLLOWER), became it while the producer's next batch was on
    its way, and committed that one ahead of the first."""

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=1, wal_linger_ms=5)
        first, second = sequence_batches(7, 2)
        rig.writer.refused(TOPIC_ID, 0, first, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        [held] = rig.writer.submit([rig.append(0, second)])
        assert (await held).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert rig.partitions[0].log.log_end_offset == 0
        [a] = rig.writer.submit([rig.append(0, first)])
        [b] = rig.writer.submit([rig.append(0, second)])
        assert [(r.error_code, r.base_offset) for r in await asyncio.gather(a, b)] == [(0, 0), (0, 2)]

    run(scenario())


def test_a_replication_wait_answers_the_partitions_still_waiting_as_not_done(tmp_path: Path) -> None:
    """Cluster seed 8017: a ReplicationWaitRequest whose partitions were not all replicated in
    time raised InvalidStateError at the leader (it read the exception of a wait it had just
    cancelled, which is not done yet), so the representative answered every partition of it
    REQUEST_TIMED_OUT ("possibly persisted") although they were appended, instead of asking
    again for the ones still waiting."""
    from broker.wal.commit import COMMIT_VERSION, ReplicationWaitRequest, WaitPartition

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=2, wal_linger_ms=5)
        _stuck_follower(rig.partitions[1])
        futures = rig.writer.submit([rig.append(0, batch(0, producer_id=1)), rig.append(1, batch(0, producer_id=2))])
        assert (await asyncio.wait_for(futures[0], 5)).error_code == 0
        answer = await rig.committer.answer_wait(
            ReplicationWaitRequest(
                COMMIT_VERSION,
                200,
                [WaitPartition(TOPIC_ID, 0, 0, 2), WaitPartition(TOPIC_ID, 1, 1, 2)],
            )
        )
        assert [(r.done, r.error_code) for r in answer.results] == [(True, 0), (False, 0)]
        futures[1].cancel()

    run(scenario())


class Leaders:
    """An RPC pool reaching several leader brokers, each a LeaderBroker."""

    def __init__(self, leaders: dict[int, LeaderBroker]) -> None:
        self.leaders = leaders

    def get(self, node_id: int, host: str, port: int) -> LeaderBroker:
        return self.leaders[node_id]


def moving_writer(rig: Rig, pool: object) -> tuple[WalWriter, SimpleNamespace]:
    """A WAL writer on broker 5 for partition 0, led by broker 0 until the test changes the
    returned record (the representative's view of the partition)."""
    from broker.wal.commit_router import CommitRouter

    record = SimpleNamespace(leader=0, leader_epoch=0)
    view = SimpleNamespace(
        partitions={(str(TOPIC_ID), 0): SimpleNamespace(record=record)},
        brokers={n: SimpleNamespace(rpc_host=f"b{n}", rpc_port=1) for n in (0, 1)},
    )
    router = CommitRouter(5, rig.committer, view, pool, rig.metrics)  # type: ignore[arg-type]
    writer = WalWriter(
        rig.store,
        WalKeyAllocator("", CLUSTER, 5, rig.clock.now_ms, first_sequence=0),
        router,
        None,
        rig.metrics,
        clock=SystemClock(),
        buffer_max_bytes=len(batch(0)),  # one batch per object: one commit each
        linger_ms=5,
        max_inflight_bytes=64 << 20,
    )
    return writer, record


async def _eventually(condition, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def test_a_later_batch_waits_while_an_earlier_one_is_unresolved_at_the_previous_leader(tmp_path: Path) -> None:
    """Gap (a) of issue 26 item 7: the representative's commits are pipelined, so when a
    partition's leader moved while its commit of batch N to the old leader was still
    unresolved (here appended, waiting for acks=all), batch N+1 went to the new leader, which
    did not know the producer and took it at offset 0 (KIP-360: any sequence); N, lost with
    the old leader's tail, then came after it (librdkafka: OUT_OF_ORDER, an epoch bump, and
    its other partitions' possibly-persisted messages stored twice: cluster seed 8017).
    librdkafka drains a partition before producing to its new leader; so must the
    representative."""

    async def scenario() -> None:
        store = MemoryObjectStore(clock=SystemClock())
        old, new = Rig(tmp_path / "old", store, partitions=1), Rig(tmp_path / "new", store, partitions=1)
        _stuck_follower(old.partitions[0])  # acks=all waits at the old leader
        writer, record = moving_writer(old, Leaders({0: LeaderBroker(old.committer), 1: LeaderBroker(new.committer)}))
        first, second = sequence_batches(7, 2)
        [a] = writer.submit([old.append(0, first)])
        await _eventually(lambda: old.partitions[0].log.log_end_offset == 2)  # appended, acks pending
        record.leader, record.leader_epoch = 1, 1  # the representative learns of the move first
        [b] = writer.submit([old.append(0, second)])
        held = await asyncio.wait_for(b, 5)
        assert new.partitions[0].log.log_end_offset == 0, "nothing lands at the new leader behind the gap"
        assert held.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode(held.error_code).name
        old.partitions[0].make_follower(PartitionStateRecord(1, [0, 1], 1, 2, [1]), 3)  # its tail is lost
        assert (await asyncio.wait_for(a, 5)).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # the producer retries in order: both land at the new leader, in sequence order
        [a] = writer.submit([old.append(0, first)])
        [b] = writer.submit([old.append(0, second)])
        assert [(r.error_code, r.base_offset) for r in await asyncio.gather(a, b)] == [(0, 0), (0, 2)]

    run(scenario())


def test_a_batch_whose_acknowledgement_failed_holds_back_the_producers_next_ones(tmp_path: Path) -> None:
    """Gap (a), after the old leader answered: batch N was appended by the old leader, which
    then lost leadership with N unreplicated (its acks=all wait failed with
    NOT_LEADER_OR_FOLLOWER). Only failed *commits* held the producer's later batches back, so
    N+1 went to the new leader and landed ahead of N's retry."""

    async def scenario() -> None:
        store = MemoryObjectStore(clock=SystemClock())
        old, new = Rig(tmp_path / "old", store, partitions=1), Rig(tmp_path / "new", store, partitions=1)
        _stuck_follower(old.partitions[0])
        writer, record = moving_writer(old, Leaders({0: LeaderBroker(old.committer), 1: LeaderBroker(new.committer)}))
        first, second = sequence_batches(7, 2)
        [a] = writer.submit([old.append(0, first)])
        await _eventually(lambda: old.partitions[0].log.log_end_offset == 2)
        old.partitions[0].make_follower(PartitionStateRecord(1, [0, 1], 1, 2, [1]), 3)
        assert (await asyncio.wait_for(a, 5)).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        record.leader, record.leader_epoch = 1, 2
        [b] = writer.submit([old.append(0, second)])
        held = await asyncio.wait_for(b, 5)
        assert new.partitions[0].log.log_end_offset == 0, "nothing lands at the new leader behind the gap"
        assert held.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode(held.error_code).name
        [a] = writer.submit([old.append(0, first)])
        [b] = writer.submit([old.append(0, second)])
        assert [(r.error_code, r.base_offset) for r in await asyncio.gather(a, b)] == [(0, 0), (0, 2)]

    run(scenario())


class FirstCommitLost(LeaderBroker):
    """The first CommitRequest never reaches the leader (its caller times out); the ones after
    it do, as in cluster seed 8010, whose network dropped one commit of a connection."""

    lost = False

    async def call(self, request, timeout_s: float):  # type: ignore[no-untyped-def]
        from broker.rpc import RpcTimeout

        if isinstance(request, CommitRequest) and not self.lost:
            self.lost = True
            await asyncio.sleep(0.2)
            raise RpcTimeout("no response within the call's timeout")
        return await super().call(request, timeout_s)


def test_a_commit_after_one_that_never_arrived_is_refused_by_the_leader(tmp_path: Path) -> None:
    """Gap (b) of issue 26 item 7 (cluster seed 8010): a producer's first batches were in a
    commit the network lost; the next commit, holding its later batch, reached the leader,
    which did not know the producer and took the batch at offset 0 (KIP-360: any sequence).
    The retries of the first batches were then out of order: librdkafka's fatal
    OUT_OF_ORDER_SEQUENCE_NUMBER for sequence 0. A leader applies a representative's commits
    as Kafka applies a connection's requests: in order, and nothing after one that is missing."""

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=1)
        writer, _record = moving_writer(rig, Leaders({0: FirstCommitLost(rig.committer)}))
        first, second = sequence_batches(7, 2)
        [a] = writer.submit([rig.append(0, first)])
        [b] = writer.submit([rig.append(0, second)])
        results = await asyncio.gather(a, b)
        assert rig.partitions[0].log.log_end_offset == 0, "nothing lands behind the lost commit"
        assert all(r.error_code for r in results), [ErrorCode(r.error_code).name for r in results]
        [a] = writer.submit([rig.append(0, first)])
        [b] = writer.submit([rig.append(0, second)])
        assert [(r.error_code, r.base_offset) for r in await asyncio.gather(a, b)] == [(0, 0), (0, 2)]

    run(scenario())


class DecidedByTheTest:
    """A committer whose commits' outcomes the test decides."""

    def __init__(self) -> None:
        self.pending: list[list[PendingCommit]] = []

    def route(self, topic_id: uuid.UUID, partition: int) -> str:
        return "leader 0"

    def commit(self, request: CommitRequest) -> list[PendingCommit]:
        loop = asyncio.get_running_loop()
        outcomes = [PendingCommit(loop.create_future(), loop.create_future()) for _ in request.partitions]
        self.pending.append(outcomes)
        return outcomes


def test_a_later_batch_acknowledged_lifts_the_barrier_of_an_earlier_one_whose_answer_was_lost(
    tmp_path: Path,
) -> None:
    """Cluster seed 30353: batch N's commit was applied but its answer lost (REQUEST_TIMED_OUT,
    a barrier), N+1 was acknowledged, and librdkafka, taking N as delivered with N+1, never
    sent N again: its next batches were refused until the barrier lapsed 10 s later."""
    from broker.wal.commit import CommitResult

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=1)
        committer = DecidedByTheTest()
        writer = WalWriter(
            rig.store,
            WalKeyAllocator("", CLUSTER, 5, rig.clock.now_ms, first_sequence=0),
            committer,
            None,
            rig.metrics,
            clock=SystemClock(),
            buffer_max_bytes=len(batch(0)),
            linger_ms=5,
            max_inflight_bytes=64 << 20,
        )
        first, second, third = sequence_batches(7, 3)
        [a] = writer.submit([rig.append(0, first)])
        [b] = writer.submit([rig.append(0, second)])
        await _eventually(lambda: len(committer.pending) == 2)
        lost = CommitResult(ErrorCode.REQUEST_TIMED_OUT, "commit to broker 0: connection lost")
        for future in (committer.pending[0][0].applied, committer.pending[0][0].acknowledged):
            future.set_result(lost)
        done = CommitResult(0, None, 2, -1, 0, 4, 0, True)
        for future in (committer.pending[1][0].applied, committer.pending[1][0].acknowledged):
            future.set_result(done)
        assert [(await a).error_code, (await b).error_code] == [ErrorCode.REQUEST_TIMED_OUT, 0]
        [c] = writer.submit([rig.append(0, third)])
        await _eventually(lambda: len(committer.pending) == 3 or c.done())
        assert not c.done(), f"refused: {c.result() if c.done() else None}"
        c.cancel()

    run(scenario())


def test_a_batch_whose_answer_was_lost_does_not_hold_back_the_producers_next_ones_sent_its_way(
    tmp_path: Path,
) -> None:
    """Cluster seed 30353, the other order: batch N+1 was acknowledged first, then N's commit
    call failed with its answer lost. The barrier held back every later batch of the producer,
    which librdkafka (N taken as delivered with N+1) never retries: refused until the barrier
    lapsed. Sent the same way as N, they follow it in order and are safe."""
    from broker.wal.commit import CommitResult

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=1)
        committer = DecidedByTheTest()
        writer = WalWriter(
            rig.store,
            WalKeyAllocator("", CLUSTER, 5, rig.clock.now_ms, first_sequence=0),
            committer,
            None,
            rig.metrics,
            clock=SystemClock(),
            buffer_max_bytes=len(batch(0)),
            linger_ms=5,
            max_inflight_bytes=64 << 20,
        )
        first, second, third = sequence_batches(7, 3)
        [a] = writer.submit([rig.append(0, first)])
        [b] = writer.submit([rig.append(0, second)])
        await _eventually(lambda: len(committer.pending) == 2)
        done = CommitResult(0, None, 2, -1, 0, 4, 0, True)
        for future in (committer.pending[1][0].applied, committer.pending[1][0].acknowledged):
            future.set_result(done)
        assert (await b).error_code == 0
        lost = CommitResult(ErrorCode.REQUEST_TIMED_OUT, "commit to broker 0: connection lost")
        committer.pending[0][0].outcome_known = False
        for future in (committer.pending[0][0].applied, committer.pending[0][0].acknowledged):
            future.set_result(lost)
        assert (await a).error_code == ErrorCode.REQUEST_TIMED_OUT
        [c] = writer.submit([rig.append(0, third)])
        await _eventually(lambda: len(committer.pending) == 3 or c.done())
        assert not c.done(), f"refused: {c.result() if c.done() else None}"
        c.cancel()

    run(scenario())


class Moving(DecidedByTheTest):
    """A committer whose partitions' leader (and so route) the test moves."""

    def __init__(self) -> None:
        super().__init__()
        self.leader = "leader 0, epoch 0"

    def route(self, topic_id: uuid.UUID, partition: int) -> str:
        return self.leader


def test_a_plain_batch_whose_leader_changed_while_its_object_uploaded_is_not_committed(tmp_path: Path) -> None:
    """Cluster seed 100725 (at 4bb8b62): a plain producer's batch, admitted while this broker
    led the partition, waited 4 s for its object's upload; the leader moved meanwhile and the
    client sent its next batches to the new one, which appended them. Committed at the new
    leader after them, the first batch landed out of the order it was sent (a Kafka leader
    appends on arrival, or fails the request when it loses leadership first). An idempotent
    batch goes on: the leader's sequence check keeps it in order."""

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=1)
        committer = Moving()
        writer = WalWriter(
            rig.store,
            WalKeyAllocator("", CLUSTER, 5, rig.clock.now_ms, first_sequence=0),
            committer,
            None,
            rig.metrics,
            clock=SystemClock(),
            buffer_max_bytes=1 << 20,
            linger_ms=5,
            max_inflight_bytes=64 << 20,
        )
        [plain, sequenced] = writer.submit(
            [rig.append(0, batch(-1, producer_id=-1)), rig.append(0, *sequence_batches(7, 1))]
        )
        committer.leader = "leader 1, epoch 1"
        await _eventually(lambda: bool(committer.pending))
        assert [len(p) for p in committer.pending] == [1], "the plain batch is committed by the new route"
        assert plain.done() and plain.result().error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert not sequenced.done()
        sequenced.cancel()

    run(scenario())
