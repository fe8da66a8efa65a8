"""The object store contract: one suite, run against every implementation (STYLE 3).

memory (unit tests), local directory (the embedded default) and S3 (a moto server on
loopback, see conftest.py). A behaviour the broker relies on belongs here, so that all
three stores keep it; implementation details (atomic rename, retries) are tested beside
their module.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from broker.clock import SystemClock
from broker.objectstore import (
    LocalObjectStore,
    MemoryObjectStore,
    NotFound,
    ObjectInfo,
    ObjectStore,
    ObjectStoreError,
    RetryPolicy,
    open_object_store,
)

T = TypeVar("T")
_prefixes = itertools.count()
_s3_session: Any = None


def _session() -> Any:
    # One botocore session for the whole run: loading the service model once saves
    # ~100 ms per test. Clients (and their connection pools) stay per test and per loop.
    global _s3_session
    if _s3_session is None:
        from aiobotocore.session import get_session

        _s3_session = get_session()
    return _s3_session


@dataclass
class Requests:
    """Collects on_request calls."""

    calls: list[tuple[str, str, int]] = field(default_factory=list)

    def __call__(self, operation: str, outcome: str, seconds: float, nbytes: int) -> None:
        assert seconds >= 0
        self.calls.append((operation, outcome, nbytes))

    def count(self, operation: str, outcome: str | None = None) -> int:
        return sum(1 for op, out, _ in self.calls if op == operation and (outcome is None or out == outcome))


@dataclass
class Backend:
    name: str
    make: Callable[..., ObjectStore]

    def run(self, body: Callable[[ObjectStore], Awaitable[T]], **options: Any) -> T:
        async def main() -> T:
            store = self.make(**options)
            try:
                return await body(store)
            finally:
                await store.close()

        return asyncio.run(main())


@pytest.fixture(params=["memory", "local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Any) -> Backend:
    name = request.param
    if name == "memory":

        def make(max_concurrency: int = 64, **options: Any) -> ObjectStore:
            return MemoryObjectStore(clock=SystemClock(), **options)

        return Backend(name, make)
    if name == "local":

        def make(**options: Any) -> ObjectStore:
            return LocalObjectStore(tmp_path / "objects", clock=SystemClock(), rng=random.Random(), **options)

        return Backend(name, make)
    server = request.getfixturevalue("moto_server")
    prefix = f"contract/{next(_prefixes):04d}"  # a fresh prefix per test: no cleanup needed

    def make(**options: Any) -> ObjectStore:
        url = f"s3://{server.bucket}/{prefix}?endpoint={server.endpoint}&region=us-east-1"
        clock, rng = SystemClock(), random.Random()
        retry = RetryPolicy(max_attempts=3, base_delay_ms=1, max_delay_ms=5, random=rng.random, sleep=clock.sleep)
        return open_object_store(url, clock=clock, rng=rng, retry=retry, session=_session(), **options)

    return Backend(name, make)


def test_put_get_round_trip_and_overwrite(backend: Backend) -> None:
    async def body(store: ObjectStore) -> None:
        assert await store.put("a/b/object-1", b"hello world") is None
        assert await store.get("a/b/object-1") == b"hello world"
        await store.put("a/b/object-1", b"replaced")
        assert await store.get("a/b/object-1") == b"replaced"
        await store.put("top", bytearray(b"mutable buffers are copied"))
        assert await store.get("top") == b"mutable buffers are copied"

    backend.run(body)


def test_ranged_get(backend: Backend) -> None:
    data = bytes(range(10))

    async def body(store: ObjectStore) -> None:
        await store.put("ranged", data)
        assert await store.get("ranged", 0, 1) == data[:1]  # first byte
        assert await store.get("ranged", 3, 7) == data[3:7]  # middle, end exclusive
        assert await store.get("ranged", 6) == data[6:]  # to the end
        assert await store.get("ranged", None, 4) == data[:4]  # from the start
        assert await store.get("ranged", 9, 10) == data[9:]  # last byte
        assert await store.get("ranged", 5, 100) == data[5:]  # cut at the end
        assert await store.get("ranged", 10) == b""  # starts at the end
        assert await store.get("ranged", 25, 30) == b""  # starts past the end
        assert await store.get("ranged", 4, 4) == b""  # empty range
        assert await store.get("ranged", 0, None) == data
        with pytest.raises(ValueError):
            await store.get("ranged", -1, 3)
        with pytest.raises(ValueError):
            await store.get("ranged", 5, 4)

    backend.run(body)


def test_missing_keys(backend: Backend) -> None:
    async def body(store: ObjectStore) -> None:
        for start, end in ((None, None), (0, 10), (3, None), (2, 2)):
            with pytest.raises(NotFound) as caught:
                await store.get("no/such/key", start, end)
            assert isinstance(caught.value, ObjectStoreError)
            assert caught.value.retriable is False
        assert await store.head("no/such/key") is None
        await store.put("no/such/key-but-longer", b"x")
        with pytest.raises(NotFound):
            await store.get("no/such/key")
        with pytest.raises(NotFound):
            await store.get("no/such")  # a "directory" of other keys is not an object
        assert await store.head("no/such") is None

    backend.run(body)


def test_head(backend: Backend) -> None:
    async def body(store: ObjectStore) -> None:
        before_ms = int(time.time() * 1000)
        await store.put("dir/headed", b"12345")
        after_ms = int(time.time() * 1000)
        info = await store.head("dir/headed")
        assert isinstance(info, ObjectInfo)
        assert info.key == "dir/headed"
        assert info.size == 5
        # S3 reports whole seconds; allow for that and a little clock skew.
        assert before_ms - 2000 <= info.last_modified_ms <= after_ms + 2000

    backend.run(body)


def test_conditional_put(backend: Backend) -> None:
    async def body(store: ObjectStore) -> None:
        assert await store.put_if_absent("cond/one", b"first") is True
        assert await store.put_if_absent("cond/one", b"second") is False
        assert await store.get("cond/one") == b"first"
        assert await store.put_if_absent("cond/one", b"first") is True  # same bytes: idempotent
        assert await store.put_if_absent("cond/one", b"firsT") is False  # same size, other bytes
        assert await store.get("cond/one") == b"first"
        assert await store.delete_many(["cond/one"]) == ["cond/one"]
        assert await store.put_if_absent("cond/one", b"third") is True
        assert await store.get("cond/one") == b"third"

    backend.run(body)


def test_conditional_put_race_has_one_winner(backend: Backend) -> None:
    async def body(store: ObjectStore) -> None:
        payloads = [f"writer-{index}".encode() for index in range(16)]
        results = await asyncio.gather(*(store.put_if_absent("race/key", p) for p in payloads))
        assert sum(results) == 1
        winner = payloads[results.index(True)]
        assert await store.get("race/key") == winner

    backend.run(body)


async def _keys(store: ObjectStore, prefix: str = "", start_after: str | None = None) -> list[str]:
    return [info.key async for info in store.list(prefix, start_after)]


def test_list_by_prefix_order_and_start_after(backend: Backend) -> None:
    keys = ["a/x", "a.b", "a0", "a/b/c", "a/b.c", "a/b/d", "b", "ab/c", "a/ü", "a/z/ü/ñ", "A"]

    async def body(store: ObjectStore) -> None:
        await asyncio.gather(*(store.put(key, key.encode()) for key in keys))
        listed = [info async for info in store.list()]
        assert [info.key for info in listed] == sorted(keys)  # code point order == S3's order
        assert all(info.size == len(info.key.encode()) for info in listed)
        assert await _keys(store, "a/") == sorted(k for k in keys if k.startswith("a/"))
        assert await _keys(store, "a/b") == ["a/b.c", "a/b/c", "a/b/d"]  # partial segment
        assert await _keys(store, "a/b/") == ["a/b/c", "a/b/d"]
        assert await _keys(store, "a") == sorted(k for k in keys if k.startswith("a"))
        assert await _keys(store, "nothing/") == []
        assert await _keys(store, "a/", start_after="a/b/c") == ["a/b/d", "a/x", "a/z/ü/ñ", "a/ü"]
        assert await _keys(store, "", start_after="a/zz") == ["a/ü", "a0", "ab/c", "b"]
        assert await _keys(store, "a/", start_after="0") == await _keys(store, "a/")  # before prefix
        assert await _keys(store, "a/", start_after="b") == []  # after prefix

    backend.run(body)


def test_list_paginates(backend: Backend) -> None:
    requests = Requests()
    keys = [f"page/{index:05d}" for index in range(23)]

    async def body(store: ObjectStore) -> None:
        await asyncio.gather(*(store.put(key, b"") for key in keys))
        await store.put("pagf", b"outside the prefix")
        requests.calls.clear()
        assert await _keys(store, "page/") == keys
        assert requests.count("list", "ok") >= 5  # 23 keys, 5 per page
        assert await _keys(store, "page/", start_after="page/00004") == keys[5:]
        assert await _keys(store, "page/", start_after="page/00019") == keys[20:]
        # Exactly one page: the iterator ends without a spurious extra key.
        assert await _keys(store, "page/", start_after="page/00017") == keys[18:]

    backend.run(body, list_page_size=5, on_request=requests)


def test_delete_many(backend: Backend) -> None:
    async def body(store: ObjectStore) -> None:
        for key in ("del/1", "del/2", "del/sub/3", "keep/1"):
            await store.put(key, b"x")
        asked = ["del/2", "del/missing", "del/1", "del/sub/3", "never/existed"]
        assert await store.delete_many(asked) == asked
        assert await _keys(store) == ["keep/1"]
        with pytest.raises(NotFound):
            await store.get("del/1")
        assert await store.delete_many([]) == []
        assert await store.delete_many(["del/1"]) == ["del/1"]  # deleting twice is fine
        await store.put("del/1", b"back again")  # and the key can be written again
        assert await store.get("del/1") == b"back again"

    backend.run(body)


def test_delete_many_more_than_one_batch(backend: Backend) -> None:
    requests = Requests()
    keys = [f"bulk/{index:05d}" for index in range(2100)]
    present = [keys[0], keys[999], keys[1000], keys[1999], keys[2000], keys[-1]]

    async def body(store: ObjectStore) -> None:
        await asyncio.gather(*(store.put(key, b"x") for key in present))
        await store.put("bulk-neighbour", b"stays")
        requests.calls.clear()
        assert await store.delete_many(keys) == keys  # missing keys count as deleted
        assert requests.count("delete_many", "ok") == 3  # batches of at most 1000
        assert await _keys(store, "bulk") == ["bulk-neighbour"]

    backend.run(body, on_request=requests)


def test_many_parallel_puts(backend: Backend) -> None:
    keys = [f"par/{index:04d}" for index in range(120)]

    async def body(store: ObjectStore) -> None:
        await asyncio.gather(*(store.put(key, key.encode() * 3) for key in keys))
        assert await _keys(store, "par/") == keys
        blobs = await asyncio.gather(*(store.get(key) for key in keys))
        assert blobs == [key.encode() * 3 for key in keys]
        assert await store.delete_many(keys) == keys

    backend.run(body, max_concurrency=8)


def test_binary_data(backend: Backend) -> None:
    every_byte = bytes(range(256)) * 4
    large = random.Random(1150).randbytes(3 * 1024 * 1024 + 17)

    async def body(store: ObjectStore) -> None:
        await store.put("bin/every-byte", every_byte)
        assert await store.get("bin/every-byte") == every_byte
        assert await store.get("bin/every-byte", 250, 262) == every_byte[250:262]
        await store.put("bin/large", large)
        assert await store.get("bin/large") == large
        assert await store.get("bin/large", 1_000_000, 2_000_001) == large[1_000_000:2_000_001]
        assert (await store.head("bin/large")).size == len(large)  # type: ignore[union-attr]

    backend.run(body)


def test_empty_objects(backend: Backend) -> None:
    async def body(store: ObjectStore) -> None:
        await store.put("empty/put", b"")
        assert await store.put_if_absent("empty/cond", b"") is True
        for key in ("empty/put", "empty/cond"):
            assert await store.get(key) == b""
            assert await store.get(key, 0, 10) == b""
            assert await store.get(key, 3) == b""
            assert (await store.head(key)).size == 0  # type: ignore[union-attr]
        assert [(i.key, i.size) async for i in store.list("empty/")] == [("empty/cond", 0), ("empty/put", 0)]

    backend.run(body)


@pytest.mark.parametrize("key", ["", "/abs", "trailing/", "a//b", "a/../b", "..", "./a", "a/.", "nul\x00", "k" * 1025])
def test_invalid_keys_are_rejected(backend: Backend, key: str) -> None:
    async def body(store: ObjectStore) -> None:
        with pytest.raises(ValueError):
            await store.put(key, b"x")
        with pytest.raises(ValueError):
            await store.put_if_absent(key, b"x")
        with pytest.raises(ValueError):
            await store.get(key)
        with pytest.raises(ValueError):
            await store.head(key)
        with pytest.raises(ValueError):
            await store.delete_many(["fine", key])

    backend.run(body)


def test_every_request_is_reported(backend: Backend) -> None:
    requests = Requests()

    async def body(store: ObjectStore) -> None:
        await store.put("m/1", b"abc")
        await store.get("m/1")
        await store.get("m/1", 1, 2)
        with pytest.raises(NotFound):
            await store.get("m/2")
        await store.head("m/1")
        await store.head("m/2")
        await store.put_if_absent("m/1", b"zz")
        await store.put_if_absent("m/3", b"zz")
        await _keys(store, "m/")
        await store.delete_many(["m/1", "m/3"])

    backend.run(body, on_request=requests)
    # S3 checks what a lost conditional put found with a HEAD (same size would add a GET).
    verify = [("head", "ok", 0)] if backend.name == "s3" else []
    assert requests.calls == [
        ("put", "ok", 3),
        ("get", "ok", 3),
        ("get", "ok", 1),
        ("get", "not_found", 0),
        ("head", "ok", 0),
        ("head", "not_found", 0),
        ("put_if_absent", "exists", 0),
        *verify,
        ("put_if_absent", "ok", 2),
        ("list", "ok", 0),
        ("delete_many", "ok", 0),
    ]


def test_close_is_idempotent(backend: Backend) -> None:
    async def body(store: ObjectStore) -> None:
        await store.put("c", b"x")
        await store.close()
        await store.close()

    backend.run(body)


def test_is_an_object_store(backend: Backend) -> None:
    async def body(store: ObjectStore) -> None:
        assert isinstance(store, ObjectStore)

    backend.run(body)
