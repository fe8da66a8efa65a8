"""WAL reader: coordinates to batch bytes through the cache, coalesced and single-flight GETs,
sanity checks, and store errors passed through. Real WAL objects over the in-memory store."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import given, settings, strategies as st

from broker.clock import SystemClock
from broker.wal.cache import ObjectCache
from broker.log.coordinates import WalRef, make_ref
from broker.wal.reader import WalReader, WalReadError
from broker.objectstore.memory import MemoryObjectStore
from broker.objectstore.store import NotFound, ObjectStoreError
from tests.unit.test_walfiles_format import real_batch
from walfiles.format import WalObjectBuilder
from walfiles.keys import format_wal_id, format_wal_key, parse_wal_id

CLUSTER = "cluster-1"
TOPIC = uuid.UUID(int=7)


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def key_of(object_id: str) -> str:
    return format_wal_key("", CLUSTER, *parse_wal_id(object_id))


def object_id(sequence: int) -> str:
    return format_wal_id(1_700_000_000_000, 1, sequence)


class CountingStore(MemoryObjectStore):
    """The in-memory store, counting GETs through its request observer."""

    def __init__(self) -> None:
        super().__init__(clock=SystemClock(), on_request=self._observe)
        self.gets: list[tuple[str, int]] = []  # (outcome, bytes)

    def _observe(self, operation: str, outcome: str, seconds: float, nbytes: int) -> None:
        if operation == "get":
            self.gets.append((outcome, nbytes))


class GatedStore(CountingStore):
    """GETs wait for `gate`, so a test can see what is in flight at the same time."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.waiting = 0

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        self.waiting += 1
        await self.gate.wait()
        self.waiting -= 1
        return await super().get(key, start, end)


def build_object(sequence: int, batch_count: int) -> tuple[str, bytes, list[bytes], list[WalRef]]:
    """A WAL object of real v2 batches: (object id, object bytes, batches, their refs)."""
    builder = WalObjectBuilder()
    batches = [real_batch(1 + i % 4, seed=sequence * 100 + i) for i in range(batch_count)]
    oid = object_id(sequence)
    coordinates = [builder.append(TOPIC, i % 3, batch) for i, batch in enumerate(batches)]
    return oid, builder.build(), batches, [make_ref(oid, c.offset, c.length) for c in coordinates]


async def upload(store: MemoryObjectStore, sequence: int, batch_count: int) -> tuple[list[bytes], list[WalRef]]:
    oid, data, batches, refs = build_object(sequence, batch_count)
    await store.put(key_of(oid), data)
    return batches, refs


def reader(store: MemoryObjectStore, cache_bytes: int = 64 << 20, **kw) -> WalReader:  # type: ignore[no-untyped-def]
    return WalReader(store, key_of, ObjectCache(cache_bytes), **kw)


def test_write_through_object_is_read_without_any_get() -> None:
    async def body() -> None:
        store = CountingStore()
        oid, data, batches, refs = build_object(1, 5)
        await store.put(key_of(oid), data)
        cache = ObjectCache(1 << 20)
        cache.put_object(oid, data)
        views = await WalReader(store, key_of, cache).read(refs)
        assert [bytes(v) for v in views] == batches
        assert store.gets == []

    run(body())


def test_adjacent_batches_of_one_object_share_one_get_and_are_cached() -> None:
    async def body() -> None:
        store = CountingStore()
        batches, refs = await upload(store, 1, 6)
        sizes: list[int] = []
        wal = reader(store, on_get=sizes.append)
        order = [4, 0, 5, 2, 1, 3]
        views = await wal.read([refs[i] for i in order])
        assert [bytes(v) for v in views] == [batches[i] for i in order]
        assert store.gets == [("ok", refs[5].end - refs[0].offset)]
        assert sizes == [refs[5].end - refs[0].offset]
        await wal.read(refs)  # now from the cache
        assert len(store.gets) == 1

    run(body())


@pytest.mark.parametrize(
    ("max_gap", "max_get", "expected_gets"),
    [
        (0, 16 << 20, 2),  # the unread middle batch is a gap
        ("middle", 16 << 20, 1),  # a gap of exactly max_gap bytes is read through
        ("middle", "first", 2),  # but not past max_get_bytes
    ],
)
def test_far_apart_batches_get_separate_gets(max_gap: object, max_get: object, expected_gets: int) -> None:
    async def body() -> None:
        store = CountingStore()
        batches, refs = await upload(store, 1, 3)
        sizes = {"middle": refs[1].length, "first": refs[0].length}
        wal = reader(store, max_gap_bytes=sizes.get(max_gap, max_gap), max_get_bytes=sizes.get(max_get, max_get))
        views = await wal.read([refs[2], refs[0]])
        assert [bytes(v) for v in views] == [batches[2], batches[0]]
        assert len(store.gets) == expected_gets

    run(body())


def test_only_the_misses_are_fetched() -> None:
    async def body() -> None:
        store = CountingStore()
        oid, data, batches, refs = build_object(1, 4)
        await store.put(key_of(oid), data)
        cache = ObjectCache(1 << 20)
        cache.put_range(oid, refs[0].offset, data[refs[0].offset : refs[1].end])
        views = await WalReader(store, key_of, cache).read(refs)
        assert [bytes(v) for v in views] == batches
        assert store.gets == [("ok", refs[3].end - refs[2].offset)]

    run(body())


def test_results_keep_input_order_across_objects_and_gets_run_concurrently() -> None:
    async def body() -> None:
        store = GatedStore()
        uploaded = [await upload(store, sequence, 3) for sequence in range(3)]
        picks = [(2, 1), (0, 0), (1, 2), (0, 2), (2, 0), (1, 0)]
        wal = reader(store)
        task = asyncio.create_task(wal.read([uploaded[o][1][b] for o, b in picks]))
        while store.waiting < 3:
            await asyncio.sleep(0)
        store.gate.set()
        views = await task
        assert [bytes(v) for v in views] == [uploaded[o][0][b] for o, b in picks]
        assert len(store.gets) == 3  # one per object

    run(body())


def test_concurrent_reads_of_the_same_range_share_one_get() -> None:
    async def body() -> None:
        store = GatedStore()
        batches, refs = await upload(store, 1, 4)
        wal = reader(store, cache_bytes=0)  # nothing cached: only single flight can help
        first = asyncio.create_task(wal.read(refs))
        while store.waiting < 1:
            await asyncio.sleep(0)
        same = asyncio.create_task(wal.read(refs))
        inside = asyncio.create_task(wal.read([refs[2], refs[1]]))
        await asyncio.sleep(0)
        store.gate.set()
        results = await asyncio.gather(first, same, inside)
        assert [[bytes(v) for v in views] for views in results] == [batches, batches, [batches[2], batches[1]]]
        assert len(store.gets) == 1
        await wal.read(refs)  # that GET has landed: a new read asks again
        assert len(store.gets) == 2

    run(body())


def test_a_cancelled_reader_does_not_cancel_the_shared_get() -> None:
    async def body() -> None:
        store = GatedStore()
        batches, refs = await upload(store, 1, 2)
        wal = reader(store)
        first = asyncio.create_task(wal.read(refs))
        while store.waiting < 1:
            await asyncio.sleep(0)
        second = asyncio.create_task(wal.read(refs))
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.sleep(0)
        store.gate.set()
        assert [bytes(v) for v in await second] == batches
        assert first.cancelled()
        assert len(store.gets) == 1

    run(body())


def test_corrupt_batch_length_raises_wal_read_error() -> None:
    async def body() -> None:
        store = CountingStore()
        oid, data, _, refs = build_object(1, 3)
        corrupt = bytearray(data)
        corrupt[refs[1].offset + 11] ^= 0x01  # low byte of batchLength
        await store.put(key_of(oid), bytes(corrupt))
        with pytest.raises(WalReadError, match=f"{oid}.*offset {refs[1].offset}") as caught:
            await reader(store).read(refs)
        assert caught.value.retriable is False

    run(body())


def test_coordinates_past_the_batch_or_the_object_raise_wal_read_error() -> None:
    async def body() -> None:
        store = CountingStore()
        oid, data, _, refs = build_object(1, 2)
        await store.put(key_of(oid), data)
        wrong_length = make_ref(oid, refs[0].offset, refs[0].length + 1)
        past_the_end = make_ref(oid, len(data) - 10, 100)
        for ref in (wrong_length, past_the_end):
            with pytest.raises(WalReadError, match=oid):
                await reader(store).read([ref])

    run(body())


def test_missing_object_raises_not_found() -> None:
    async def body() -> None:
        store = CountingStore()
        with pytest.raises(NotFound):
            await reader(store).read([make_ref(object_id(9), 8, 100)])
        assert store.gets == [("not_found", 0)]

    run(body())


def test_store_errors_propagate_unchanged_and_are_not_remembered() -> None:
    class FailingOnce(CountingStore):
        error = ObjectStoreError("slow down", retriable=True)

        async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
            if self.error is not None:
                error, self.error = self.error, None
                raise error
            return await super().get(key, start, end)

    async def body() -> None:
        store = FailingOnce()
        batches, refs = await upload(store, 1, 2)
        wal = reader(store)
        error = store.error
        with pytest.raises(ObjectStoreError) as caught:
            await wal.read(refs)
        assert caught.value is error and caught.value.retriable
        assert [bytes(v) for v in await wal.read(refs)] == batches

    run(body())


@settings(max_examples=50, deadline=None)
@given(
    picks=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 4)), max_size=20),
    max_gap=st.integers(0, 2000),
    max_get=st.integers(1, 3000),
    cache_bytes=st.integers(0, 5000),
)
def test_any_selection_reads_exactly_its_batches(picks: list, max_gap: int, max_get: int, cache_bytes: int) -> None:
    async def body() -> None:
        store = CountingStore()
        uploaded = [await upload(store, sequence, 5) for sequence in range(3)]
        refs = [uploaded[o][1][b] for o, b in picks]
        wal = reader(store, cache_bytes, max_gap_bytes=max_gap, max_get_bytes=max_get)
        for _ in range(2):
            views = await wal.read(refs)
            assert [bytes(v) for v in views] == [uploaded[o][0][b] for o, b in picks]
            assert all(len(v) == ref.length for v, ref in zip(views, refs, strict=True))
        assert len(store.gets) <= 2 * len(set(refs))

    run(body())
