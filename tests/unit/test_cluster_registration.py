"""Broker registration over the local metadata store: `brokers/<id>` is created only where no
other process's registration is. A registration of another incarnation (a live duplicate
node id, or this node's previous process killed moments ago) is waited out while its lease
lives, up to the session timeout plus a margin; one that outlives that refuses the start with
a message naming the other broker. Re-registration after a lost lease keeps working."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from broker.clock import ManualClock, SystemClock
from broker.cluster import registration as registration_module
from broker.cluster.registration import REGISTRATION_WAIT_MARGIN_S, Membership
from broker.config import StartRefused
from broker.metadata import KeyValue, LocalMetadataStore
from broker.metadata import records

SESSION_MS = 2000  # lease TTL 2 s
HEARTBEAT_MS = 500


def record(incarnation: str, port: int = 9092) -> records.BrokerRecord:
    return records.BrokerRecord(
        records.RECORD_VERSION, 1, "az1", "127.0.0.1", port, "127.0.0.1", port + 100, False, "test", incarnation
    )


class Announced:
    def __init__(self) -> None:
        self.kvs: list[KeyValue] = []

    async def __call__(self, kv: KeyValue) -> None:
        self.kvs.append(kv)


def membership(store: LocalMetadataStore, incarnation: str, port: int = 9092) -> Membership:
    return Membership(store, record(incarnation, port), SESSION_MS, HEARTBEAT_MS, Announced(), SystemClock())


async def registered(store: LocalMetadataStore) -> records.BrokerRecord | None:
    kv = await store.get(records.broker_key(1))
    return None if kv is None else records.decode(kv.value, records.BrokerRecord)


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


@pytest.fixture(autouse=True)
def short_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registration_module, "REGISTRATION_WAIT_MARGIN_S", 0.5)
    monkeypatch.setattr(registration_module, "REGISTRATION_POLL_S", 0.05)


def test_a_registration_of_another_incarnation_is_waited_out_until_its_lease_expires(tmp_path: Path) -> None:
    """This node's previous process, killed moments ago: its registration lives until its
    lease expires. The new process neither overwrites it nor gives up; it registers then."""

    async def scenario() -> None:
        clock = ManualClock()
        store = LocalMetadataStore(tmp_path / "store.json", clock)
        old = membership(store, "old")
        await old.start()
        old._task.cancel()  # killed: nobody renews its lease any more
        new = membership(store, "new")
        starting = asyncio.create_task(new.start())
        await asyncio.sleep(0.3)
        assert not starting.done(), "waits while the old lease lives"
        assert (await registered(store)).incarnation == "old", "never overwrites a live registration"
        clock.advance(SESSION_MS)  # the old lease expires
        await asyncio.wait_for(starting, 5)
        assert (await registered(store)).incarnation == "new"
        assert new.lease is not None and (await store.get(records.broker_key(1))).lease == new.lease.id
        await new.stop()
        await store.close()

    run(scenario())


def test_a_live_registration_of_another_incarnation_refuses_the_start_naming_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = LocalMetadataStore(tmp_path / "store.json", SystemClock())  # real time: the live one renews its lease
        live = membership(store, "live-one", port=9092)
        await live.start()
        duplicate = membership(store, "duplicate", port=9093)
        starting = asyncio.ensure_future(duplicate.start())
        await asyncio.sleep(SESSION_MS / 2000)  # half a session: the live lease cannot have expired
        assert not starting.done(), "refused without waiting for the live registration to expire"
        with pytest.raises(StartRefused) as refused:  # a bound, generous: session + margin is ~4 s
            await asyncio.wait_for(starting, SESSION_MS / 1000 + REGISTRATION_WAIT_MARGIN_S + 30)
        message = str(refused.value)
        assert "node.id 1 is registered by another live broker process" in message
        assert "127.0.0.1:9092" in message and "incarnation live-one" in message and "\n" not in message
        assert (await registered(store)).incarnation == "live-one"
        assert duplicate.lease is None
        assert len(store._leases) == 1, "the refused broker leaves no lease behind"
        await live.stop()
        await store.close()

    run(scenario())


def test_re_registration_after_a_lost_lease_still_works(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = LocalMetadataStore(tmp_path / "store.json", clock)
        broker = membership(store, "me")
        renewed = []
        broker.on_new_lease(renewed.append)
        await broker.start()
        first = broker.lease
        clock.advance(SESSION_MS)  # etcd unreachable for longer than the session: the lease is gone
        assert await registered(store) is None
        for _ in range(100):
            if renewed:
                break
            await asyncio.sleep(0.05)
        assert renewed and broker.lease is not None and broker.lease != first
        kv = await store.get(records.broker_key(1))
        assert kv is not None and kv.lease == broker.lease.id
        assert records.decode(kv.value, records.BrokerRecord).incarnation == "me"
        await broker.stop()
        await store.close()

    run(scenario())


def test_our_own_registration_under_another_lease_is_taken_over(tmp_path: Path) -> None:
    """A registration put whose answer was lost (MetadataUnavailable) may have happened: the
    key then holds our own incarnation, which we may overwrite."""

    async def scenario() -> None:
        store = LocalMetadataStore(tmp_path / "store.json", SystemClock())
        stray = await store.grant_lease(30)
        await store.put(records.broker_key(1), records.encode(record("me")), lease=stray)
        broker = membership(store, "me")
        await asyncio.wait_for(broker.start(), 1)
        kv = await store.get(records.broker_key(1))
        assert kv is not None and broker.lease is not None and kv.lease == broker.lease.id
        await broker.stop()
        await store.close()

    run(scenario())


class _BrokerRecordBeforeDraining(msgspec.Struct, frozen=True):
    """BrokerRecord as brokers before controlled shutdown wrote and read it."""

    version: int
    node_id: int
    az: str | None
    host: str
    port: int
    rpc_host: str | None
    rpc_port: int
    stateless: bool
    software_version: str
    incarnation: str


def test_the_draining_flag_is_compatible_with_records_of_older_brokers_both_ways() -> None:
    old = _BrokerRecordBeforeDraining(
        records.RECORD_VERSION, 1, "az1", "127.0.0.1", 9092, "127.0.0.1", 9192, False, "old", "x"
    )
    read = records.decode(msgspec.json.encode(old), records.BrokerRecord)
    assert read == records.BrokerRecord(*msgspec.structs.astuple(old)) and read.draining is False
    draining = msgspec.structs.replace(record("y"), draining=True)
    assert records.decode(records.encode(draining), records.BrokerRecord).draining is True
    seen_by_old = msgspec.json.decode(records.encode(draining), type=_BrokerRecordBeforeDraining)
    assert seen_by_old.incarnation == "y", "an older broker ignores the new trailing field"


def test_drain_rewrites_the_registration_under_the_same_lease_and_a_renewal_keeps_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        store = LocalMetadataStore(tmp_path / "store.json", clock)
        announced = Announced()
        broker = Membership(store, record("me"), SESSION_MS, HEARTBEAT_MS, announced, clock)
        await broker.start()
        lease = broker.lease
        await broker.drain()
        kv = await store.get(records.broker_key(1))
        assert kv is not None and kv.lease == lease.id  # type: ignore[union-attr]
        assert records.decode(kv.value, records.BrokerRecord).draining
        assert records.decode(announced.kvs[-1].value, records.BrokerRecord).draining, "applied to the view at once"
        clock.advance(SESSION_MS)  # the lease is lost: the new registration still says draining
        for _ in range(100):
            current = await registered(store)
            if current is not None:
                break
            await asyncio.sleep(0.05)
        assert current is not None and current.draining
        await broker.stop()
        await store.close()

    run(scenario())
