"""The metadata store contract: one suite, run against both backends (STYLE 3).

`local` (the embedded store, in a tmp dir), `local-memory` (the same without a file, as
simulations use it) and `etcd` (the session etcd from conftest.py,
a fresh key prefix per test). A behaviour the controller or the brokers rely on belongs
here, so that both backends keep it. Backend-specific behaviour (the local store's
injected clock and history, etcd's endpoint failover, prefix isolation and watch resume)
is at the end. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from broker.clock import ManualClock, SystemClock
from broker.metadata import (
    EventType,
    KeyValue,
    Lease,
    LeaseExpired,
    LeaseKeepAlive,
    MetadataError,
    MetadataStore,
    MetadataUnavailable,
    RevisionCompacted,
    RevisionConflict,
    Watch,
    WatchEvent,
)
from broker.metadata.local import LocalMetadataStore
from broker.metadata.store import MAX_TXN_OPS
from tests.etcd_server import EtcdServer, free_port, require_etcd_binary, start_etcd

T = TypeVar("T")
_prefixes = itertools.count()
WAIT_S = 5.0  # bound on any wait for a change to show (leases: TTL + this)
TTL_S = 1
REFUSED_CONNECT_TIMEOUT_S = 60.0  # a connect timeout no failover test may wait for


@dataclass
class Backend:
    name: str
    make: Callable[..., MetadataStore]

    def run(self, body: Callable[[MetadataStore], Awaitable[T]], **options: Any) -> T:
        async def main() -> T:
            store = self.make(**options)
            try:
                return await asyncio.wait_for(body(store), 30)
            finally:
                await store.close()

        return asyncio.run(main())


@pytest.fixture(params=["local", "local-memory", "etcd"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "local":
        return Backend(
            "local",
            lambda **options: LocalMetadataStore(tmp_path / "metadata" / "store.json", SystemClock(), **options),
        )
    if request.param == "local-memory":  # path=None: what simulations use in place of etcd
        return Backend("local-memory", lambda **options: LocalMetadataStore(None, SystemClock(), **options))
    server: EtcdServer = request.getfixturevalue("etcd_server")
    prefix = f"contract-{next(_prefixes):04d}"  # a fresh prefix per test: no cleanup needed

    def make(**options: Any) -> MetadataStore:
        from broker.metadata.etcd import EtcdMetadataStore

        return EtcdMetadataStore(server.url(prefix), clock=SystemClock(), **options)

    return Backend("etcd", make)


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = WAIT_S) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await check():
        assert loop.time() < deadline, f"not true within {timeout_s} s"
        await asyncio.sleep(0.05)


async def take(watch: Watch, count: int, timeout_s: float = WAIT_S) -> list[WatchEvent]:
    return [await asyncio.wait_for(watch.__anext__(), timeout_s) for _ in range(count)]


def summary(events: list[WatchEvent]) -> list[tuple[str, str, bytes]]:
    return [(event.type.value, event.kv.key, event.kv.value) for event in events]


# -- key-value and compare-and-set -----------------------------------------------------


def test_get_put_and_monotonic_revisions(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:
        assert await store.get("cluster") is None
        first = await store.put("cluster", b"one")
        assert first > 0
        kv = await store.get("cluster")
        assert kv == KeyValue("cluster", b"one", first)
        second = await store.put("cluster", b"two")
        third = await store.put("other", bytearray(b"\x00\xffbinary"))
        assert first < second < third
        assert await store.get("cluster") == KeyValue("cluster", b"two", second)
        assert (await store.get("other")).value == b"\x00\xffbinary"
        assert await store.delete("cluster") is True
        assert await store.get("cluster") is None
        assert await store.delete("cluster") is False
        fourth = await store.put("cluster", b"again")
        assert fourth >= third + 2  # the delete advanced the revision too
        _, revision = await store.list_with_revision("")
        assert revision == fourth

    backend.run(body)


def test_cas_create_if_absent(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:
        revision = await store.put("topics/a", b"v1", expected_revision=0)
        with pytest.raises(RevisionConflict) as caught:
            await store.put("topics/a", b"v2", expected_revision=0)
        assert isinstance(caught.value, MetadataError) and not caught.value.retriable
        assert str(revision) in str(caught.value)  # says what it found
        assert await store.get("topics/a") == KeyValue("topics/a", b"v1", revision)
        results = await asyncio.gather(
            *(store.put("race", f"w{i}".encode(), expected_revision=0) for i in range(8)), return_exceptions=True
        )
        assert sum(1 for r in results if isinstance(r, int)) == 1
        assert all(isinstance(r, (int, RevisionConflict)) for r in results)

    backend.run(body)


def test_cas_update(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:
        first = await store.put("producer-ids/next", b"1000")
        second = await store.put("producer-ids/next", b"2000", expected_revision=first)
        assert second > first
        with pytest.raises(RevisionConflict):
            await store.put("producer-ids/next", b"3000", expected_revision=first)  # stale
        with pytest.raises(RevisionConflict):
            await store.put("absent", b"x", expected_revision=first)  # absent is revision 0
        assert await store.get("absent") is None
        assert (await store.get("producer-ids/next")).value == b"2000"

    backend.run(body)


def test_cas_delete(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:
        revision = await store.put("brokers/1", b"x")
        with pytest.raises(RevisionConflict):
            await store.delete("brokers/1", expected_revision=revision + 100)
        with pytest.raises(RevisionConflict):
            await store.delete("brokers/1", expected_revision=0)  # 0 = "must be absent"
        assert await store.get("brokers/1") is not None
        assert await store.delete("brokers/1", expected_revision=revision) is True
        assert await store.get("brokers/1") is None
        assert await store.delete("brokers/1", expected_revision=0) is False  # absent, as expected
        with pytest.raises(RevisionConflict):
            await store.delete("brokers/1", expected_revision=revision)

    backend.run(body)


def test_list_by_prefix_in_key_order(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:
        for key in ("topics/b", "topics/a", "topicsX/c", "topic", "topics/a/1", "brokers/1", "topics/"):
            await store.put(key, key.encode())
        assert [kv.key for kv in await store.list("topics/")] == ["topics/", "topics/a", "topics/a/1", "topics/b"]
        assert [kv.key for kv in await store.list("topic")] == [
            "topic",
            "topics/",
            "topics/a",
            "topics/a/1",
            "topics/b",
            "topicsX/c",
        ]
        assert [kv.key for kv in await store.list("")][0] == "brokers/1"
        assert await store.list("nothing/") == []
        listed = await store.list("topics/a")
        assert [(kv.key, kv.value) for kv in listed] == [("topics/a", b"topics/a"), ("topics/a/1", b"topics/a/1")]
        for kv in listed:
            assert kv == await store.get(kv.key)
        kvs, revision = await store.list_with_revision("topics/")
        assert [kv.key for kv in kvs] == ["topics/", "topics/a", "topics/a/1", "topics/b"]
        assert revision == max(kv.revision for kv in await store.list(""))
        assert (await store.list_with_revision("nothing/"))[1] == revision

    backend.run(body)


def test_list_many_keys(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:  # more than one etcd page (1000 keys)
        puts = {f"many/{i:05d}": b"x" for i in range(1100)}
        for start in range(0, len(puts), MAX_TXN_OPS):
            chunk = dict(list(puts.items())[start : start + MAX_TXN_OPS])
            await store.txn({}, chunk)
        kvs, revision = await store.list_with_revision("many/")
        assert [kv.key for kv in kvs] == sorted(puts)
        assert revision == max(kv.revision for kv in kvs)

    backend.run(body)


def test_txn_is_all_or_nothing(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:
        epoch = await store.put("controller/epoch", b"1")
        old = await store.put("partitions/t-0", b"old")
        revision = await store.txn(
            {"controller/epoch": epoch, "partitions/t-1": 0},
            puts={"partitions/t-1": b"new-1", "partitions/t-2": b"new-2"},
            deletes=["partitions/t-0", "partitions/absent"],
        )
        assert revision > old
        assert [(kv.key, kv.value, kv.revision) for kv in await store.list("partitions/")] == [
            ("partitions/t-1", b"new-1", revision),
            ("partitions/t-2", b"new-2", revision),
        ]
        assert await store.get("partitions/t-0") is None
        # A stale compare changes nothing, and says which key moved.
        with pytest.raises(RevisionConflict) as caught:
            await store.txn(
                {"controller/epoch": epoch, "partitions/t-1": revision - 1},
                puts={"partitions/t-3": b"x"},
                deletes=["partitions/t-2"],
            )
        assert "partitions/t-1" in str(caught.value) and "controller/epoch" not in str(caught.value)
        assert [kv.key for kv in await store.list("partitions/")] == ["partitions/t-1", "partitions/t-2"]
        # Nothing to change: no new revision.
        assert await store.txn({"controller/epoch": epoch}, deletes=["partitions/absent"]) == revision
        with pytest.raises(ValueError):
            await store.txn({}, puts={"k": b"1"}, deletes=["k"])
        with pytest.raises(ValueError):
            await store.txn({}, puts={f"k{i}": b"1" for i in range(MAX_TXN_OPS + 1)})
        with pytest.raises(ValueError):
            await store.put("big", b"x" * (1024 * 1024 + 1))

    backend.run(body)


# -- leases ----------------------------------------------------------------------------


def test_lease_expires_without_keep_alive(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:
        lease = await store.grant_lease(TTL_S)
        assert lease.id != 0 and lease.ttl_s >= TTL_S
        revision = await store.put("brokers/1", b"registered", expected_revision=0, lease=lease)
        assert await store.get("brokers/1") == KeyValue("brokers/1", b"registered", revision, lease.id)
        await store.put("config", b"not leased")

        async def gone() -> bool:
            return await store.get("brokers/1") is None

        await eventually(gone, lease.ttl_s + WAIT_S)
        assert await store.get("config") is not None
        with pytest.raises(LeaseExpired):
            await store.keep_alive(lease)
        with pytest.raises(LeaseExpired):
            await store.put("brokers/1", b"again", lease=lease)
        await store.revoke_lease(lease)  # gone already: a no-op

    backend.run(body)


def test_lease_kept_alive_outlives_its_ttl(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:
        lease = await store.grant_lease(TTL_S)
        await store.put("brokers/2", b"alive", lease=lease)
        assert await store.keep_alive(lease) >= TTL_S
        keeper = store.start_keep_alive(lease)
        assert keeper.running
        await asyncio.sleep(lease.ttl_s * 2.5)
        assert await store.get("brokers/2") is not None
        assert not keeper.lost.is_set()
        await keeper.stop()
        assert not keeper.running

        async def gone() -> bool:
            return await store.get("brokers/2") is None

        await eventually(gone, lease.ttl_s + WAIT_S)

    backend.run(body)


def test_revoke_lease_removes_its_keys(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:
        lease = await store.grant_lease(30)
        await store.put("brokers/3", b"a", lease=lease)
        await store.txn({}, puts={"brokers/3/endpoint": b"b", "brokers/3/rack": b"c"}, lease=lease)
        await store.put("brokers/3/rack", b"c2")  # a put without the lease detaches the key
        keeper = store.start_keep_alive(lease)
        await store.revoke_lease(lease)
        assert [kv.key for kv in await store.list("brokers/")] == ["brokers/3/rack"]
        await asyncio.wait_for(keeper.lost.wait(), WAIT_S)  # the keep-alive task notices
        assert not keeper.running
        await store.revoke_lease(lease)  # idempotent
        with pytest.raises(LeaseExpired):
            await store.put("brokers/4", b"x", lease=lease)
        with pytest.raises(ValueError):
            await store.grant_lease(0)

    backend.run(body)


# -- watches ---------------------------------------------------------------------------


def test_watch_sees_puts_and_deletes_in_order(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:
        await store.put("brokers/0", b"before the watch")
        async with await store.watch("brokers/") as watch:
            r1 = await store.put("brokers/1", b"a")
            await store.put("topics/x", b"not watched")
            r2 = await store.put("brokers/1", b"b")
            r3 = await store.txn({}, puts={"brokers/2": b"c"}, deletes=["brokers/0"])
            lease = await store.grant_lease(30)
            await store.put("brokers/lease/b", b"y", lease=lease)
            await store.put("brokers/lease/a", b"x", lease=lease)
            assert await store.delete("brokers/1") is True
            await store.revoke_lease(lease)
            await store.txn({}, puts={"brokers/3": b"d", "topics/y": b"not watched"})
            events = await take(watch, 10)
        assert summary(events) == [
            ("put", "brokers/1", b"a"),
            ("put", "brokers/1", b"b"),
            ("put", "brokers/2", b"c"),
            ("delete", "brokers/0", b""),
            ("put", "brokers/lease/b", b"y"),
            ("put", "brokers/lease/a", b"x"),
            ("delete", "brokers/1", b""),
            ("delete", "brokers/lease/a", b""),
            ("delete", "brokers/lease/b", b""),  # key order
            ("put", "brokers/3", b"d"),
        ]
        revisions = [event.revision for event in events]
        assert revisions[:4] == [r1, r2, r3, r3]
        assert revisions == sorted(revisions)
        # a transaction's changes: all but the last this watch sees say more are coming
        assert [event.last_in_revision for event in events] == [
            True, True, False, True, True, True, True, False, True, True
        ]  # fmt: skip
        assert events[4].kv.lease == lease.id
        assert events[6].type is EventType.DELETE

    backend.run(body)


def test_watch_from_a_listing_revision_misses_nothing(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:
        for i in range(3):
            await store.put(f"topics/t{i}", b"v0")
        listed, revision = await store.list_with_revision("topics/")
        # Changes between the list and the watch must not be lost.
        lease = await store.grant_lease(30)
        between = [await store.put("topics/t1", b"v1"), await store.put("topics/t3", b"v1", lease=lease)]
        assert await store.delete("topics/t0")
        watch = await store.watch("topics/", start_revision=revision + 1)
        try:
            after = await store.put("topics/t2", b"v2")
            await store.revoke_lease(lease)
            events = await take(watch, 5)
        finally:
            await watch.close()
        assert summary(events) == [
            ("put", "topics/t1", b"v1"),
            ("put", "topics/t3", b"v1"),
            ("delete", "topics/t0", b""),
            ("put", "topics/t2", b"v2"),
            ("delete", "topics/t3", b""),
        ]
        assert [e.revision for e in events[:2]] == between and events[3].revision == after
        # Replaying the events over the listing gives the current state.
        state = {kv.key: kv.value for kv in listed}
        for event in events:
            if event.type is EventType.PUT:
                state[event.kv.key] = event.kv.value
            else:
                state.pop(event.kv.key, None)
        assert state == {kv.key: kv.value for kv in await store.list("topics/")}

    backend.run(body)


def test_watch_ends_on_close(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:
        watch = await store.watch("a/")
        pending = asyncio.ensure_future(watch.__anext__())
        await asyncio.sleep(0.1)
        await watch.close()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(pending, WAIT_S)
        await watch.close()  # idempotent
        # Closing the store ends the watches still open.
        other = await store.watch("b/")
        pending = asyncio.ensure_future(other.__anext__())
        await asyncio.sleep(0.1)
        await store.close()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(pending, WAIT_S)
        assert [event async for event in other] == []

    backend.run(body)


def test_close_is_idempotent(backend: Backend) -> None:
    async def body(store: MetadataStore) -> None:
        await store.put("k", b"v")
        lease = await store.grant_lease(30)
        keeper = store.start_keep_alive(lease)
        await store.close()
        assert not keeper.running
        await store.close()
        with pytest.raises(MetadataError):
            await store.get("k")

    backend.run(body)


# -- the local backend -----------------------------------------------------------------


def test_local_leases_expire_on_the_injected_clock(tmp_path: Path) -> None:
    async def body() -> None:
        clock = ManualClock()
        store = LocalMetadataStore(tmp_path / "store.json", clock)
        try:
            lease = await store.grant_lease(5)
            revision = await store.put("brokers/1", b"x", lease=lease)
            watch = await store.watch("brokers/", start_revision=revision + 1)
            clock.advance(4_999)
            assert await store.get("brokers/1") is not None
            assert await store.keep_alive(lease) == 5  # renewed: 5 s from now
            clock.advance(4_999)
            assert await store.get("brokers/1") is not None
            clock.advance(1)
            assert await store.get("brokers/1") is None
            [event] = await take(watch, 1)
            assert (event.type, event.kv.key, event.revision) == (EventType.DELETE, "brokers/1", revision + 1)
            with pytest.raises(LeaseExpired):
                await store.keep_alive(lease)
        finally:
            await store.close()

    asyncio.run(body())


def test_local_reopen_keeps_revisions_and_drops_leased_keys(tmp_path: Path) -> None:
    async def body() -> None:
        path = tmp_path / "store.json"
        store = LocalMetadataStore(path, SystemClock())
        await store.put("cluster", b"id")
        lease = await store.grant_lease(30)
        revision = await store.put("brokers/1", b"x", lease=lease)
        await store.close()
        store = LocalMetadataStore(path, SystemClock())  # a new process: nobody holds the lease any more
        try:
            kvs, reopened = await store.list_with_revision("")
            assert [kv.key for kv in kvs] == ["cluster"]
            assert reopened == revision + 1
            with pytest.raises(RevisionCompacted):  # history is kept in memory only
                await store.watch("", start_revision=revision)
            watch = await store.watch("", start_revision=reopened + 1)
            assert (await store.put("cluster", b"id2")) == reopened + 1
            assert summary(await take(watch, 1)) == [("put", "cluster", b"id2")]
        finally:
            await store.close()

    asyncio.run(body())


def test_local_watch_history_is_bounded(tmp_path: Path) -> None:
    async def body() -> None:
        store = LocalMetadataStore(tmp_path / "store.json", SystemClock(), history_limit=3)
        try:
            slow = await store.watch("k")
            first = await store.put("k", b"1")
            for value in (b"2", b"3", b"4"):
                await store.put("k", value)
            with pytest.raises(RevisionCompacted) as caught:
                await store.watch("k", start_revision=first)
            assert caught.value.compact_revision == first
            assert [e.kv.value for e in await take(await store.watch("k", first + 1), 3)] == [b"2", b"3", b"4"]
            with pytest.raises(RevisionCompacted):
                await take(slow, 1)  # fell behind the history's end
        finally:
            await store.close()

    asyncio.run(body())


# -- the etcd backend ------------------------------------------------------------------


def _etcd(url: str, **options: Any) -> MetadataStore:
    from broker.metadata.etcd import EtcdMetadataStore

    return EtcdMetadataStore(url, clock=SystemClock(), **options)


def test_etcd_url() -> None:
    from broker.metadata.etcd import parse_etcd_url

    assert parse_etcd_url("etcd://127.0.0.1:2379/shoal") == ([("127.0.0.1", 2379)], "shoal/")
    assert parse_etcd_url("etcd://a:1,b:2,c/x/y/") == ([("a", 1), ("b", 2), ("c", 2379)], "x/y/")
    for bad in ("etcd://a:1", "etcd://a:1/", "http://a:1/p", "etcd://a:x/p", "etcd://a:1,/p", "etcd://a:1/p?x=1"):
        with pytest.raises(ValueError):
            parse_etcd_url(bad)


def test_etcd_fails_over_to_the_next_endpoint(etcd_server: EtcdServer) -> None:
    dead = free_port()
    prefix = f"failover-{next(_prefixes):04d}"

    async def body() -> None:
        # The connect timeout is far longer than the wait: only failing over on the refusal
        # itself, not on a timeout, can answer in time.
        store = _etcd(
            f"etcd://127.0.0.1:{dead},{etcd_server.endpoint}/{prefix}", connect_timeout_s=REFUSED_CONNECT_TIMEOUT_S
        )
        try:
            revision = await asyncio.wait_for(store.put("k", b"v", expected_revision=0), WAIT_S)
            assert store.endpoint == etcd_server.endpoint
            assert await store.get("k") == KeyValue("k", b"v", revision)
            async with await store.watch("") as watch:
                await store.put("k", b"w")
                assert summary(await take(watch, 1)) == [("put", "k", b"w")]
        finally:
            await store.close()
        # No endpoint answers: a retriable error, quickly.
        store = _etcd(f"etcd://127.0.0.1:{dead},127.0.0.1:{dead}/{prefix}", connect_timeout_s=1.0)
        try:
            with pytest.raises(MetadataUnavailable) as caught:
                await store.get("k")
            assert caught.value.retriable
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(body(), 30))


def test_etcd_prefixes_do_not_leak(etcd_server: EtcdServer) -> None:
    n = next(_prefixes)

    async def body() -> None:
        mine = _etcd(etcd_server.url(f"iso-{n}"))
        neighbour = _etcd(etcd_server.url(f"iso-{n}x"))  # shares a string prefix, not a key prefix
        try:
            await neighbour.put("topics/a", b"theirs")
            await neighbour.put("", b"their root")
            async with await mine.watch("") as watch:
                await neighbour.put("topics/b", b"theirs")
                await mine.put("topics/a", b"mine")
                assert summary(await take(watch, 1)) == [("put", "topics/a", b"mine")]
            assert [(kv.key, kv.value) for kv in await mine.list("")] == [("topics/a", b"mine")]
            assert (await neighbour.get("topics/a")).value == b"theirs"
        finally:
            await mine.close()
            await neighbour.close()

    asyncio.run(asyncio.wait_for(body(), 30))


def test_etcd_watch_resumes_across_a_restart(tmp_path: Path) -> None:
    require_etcd_binary()
    server = start_etcd(tmp_path / "etcd")  # its own etcd: the session one must not restart

    async def body() -> None:
        watcher = _etcd(server.url("resume"), connect_timeout_s=1.0)
        writer = _etcd(server.url("resume"), connect_timeout_s=1.0)
        try:
            watch = await watcher.watch("")
            await writer.put("a", b"1")
            assert summary(await take(watch, 1)) == [("put", "a", b"1")]
            await asyncio.to_thread(server.restart)
            # Written before the watcher notices that its stream broke.
            await writer.put("b", b"2")
            await writer.delete("a")
            events = await take(watch, 2, timeout_s=20)
            assert summary(events) == [("put", "b", b"2"), ("delete", "a", b"")]
            await writer.put("c", b"3")
            assert summary(await take(watch, 1)) == [("put", "c", b"3")]
            await watch.close()
        finally:
            await watcher.close()
            await writer.close()

    try:
        asyncio.run(asyncio.wait_for(body(), 60))
    finally:
        server.stop()


def test_open_store_opens_etcd_urls(tmp_path: Path) -> None:
    from broker.config import BrokerConfig, ConfigError
    from broker.metadata import open_store
    from broker.metadata.etcd import EtcdMetadataStore

    clock = SystemClock()
    store = open_store(
        BrokerConfig(
            data_dir=str(tmp_path), metadata="etcd://127.0.0.1:2379,10.0.0.2:2379/shoal", rpc_listen="127.0.0.1:9093"
        ),
        clock,
    )
    assert isinstance(store, EtcdMetadataStore) and store.prefix == "shoal/"  # connects on first use
    assert store._clock is clock
    asyncio.run(store.close())
    with pytest.raises(ConfigError):
        open_store(
            BrokerConfig(data_dir=str(tmp_path), metadata="etcd://127.0.0.1:2379", rpc_listen="127.0.0.1:9093"), clock
        )
    local = open_store(BrokerConfig(data_dir=str(tmp_path)), clock)
    assert isinstance(local, LocalMetadataStore) and local._clock is clock


# -- the keep-alive helper -------------------------------------------------------------


class _FlakyStore:
    """keep_alive fails with MetadataUnavailable `failures` times, then succeeds."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def keep_alive(self, lease: Lease) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise MetadataUnavailable("etcd is down")
        return lease.ttl_s


def test_keep_alive_rides_out_short_outages_and_reports_long_ones() -> None:
    async def body() -> None:
        short = LeaseKeepAlive(_FlakyStore(failures=2), Lease(1, 1), clock=SystemClock(), retry_s=0.05).start()  # type: ignore[arg-type]
        await asyncio.sleep(1.5)
        assert short.running and not short.lost.is_set() and short.failures == 2
        await short.stop()
        long = LeaseKeepAlive(_FlakyStore(failures=1000), Lease(2, 1), clock=SystemClock(), retry_s=0.05).start()  # type: ignore[arg-type]
        await asyncio.wait_for(long.lost.wait(), WAIT_S)  # about one TTL after the last success
        assert not long.running and long.failures >= 5

    asyncio.run(body())
