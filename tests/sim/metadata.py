"""A metadata store that is slow, unavailable, ambiguous and breaks its watches: the
metadata seam (STYLE 19) for simulations and unit tests.

`FaultyMetadataStore` wraps the real LocalMetadataStore (in memory, on the SimClock, so
leases expire in virtual time) with the MetadataStore interface and etcd's failure modes:

- a virtual delay on the way in and on the way back of every call;
- unavailability: a call fails with MetadataUnavailable before it is applied, at random
  (`unavailable_p`) or for a whole window (`set_unavailable`, `unavailable_for`);
- ambiguous writes: put, delete, txn and the lease calls are applied and then fail with
  MetadataUnavailable ("outcome unknown": the caller must read before retrying a CAS). An
  answer on its way back when a window starts is lost the same way;
- lagging watches: now and then (`watch_lag_p`) a watch delivers its next event late
  (`watch_lag_s`), as an etcd watcher behind under load does, so brokers' views of the
  same revision differ for a while;
- broken watches: a watch iteration raises MetadataUnavailable at random instead of
  delivering an event, and every open watch breaks when a window starts (or on
  `break_watches()`), so consumers must list again and watch from the listing.

Lease keep-alives started through this wrapper renew through it, so they see the faults;
a lease whose renewals fail for its TTL expires in the inner store, as in etcd.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from broker.clock import Clock
from broker.metadata.local import LocalMetadataStore
from broker.metadata.store import KeyValue, Lease, LeaseKeepAlive, MetadataError, MetadataUnavailable, WatchEvent

from .determinism import SimRandom
from .trace import Trace

T = TypeVar("T")


@dataclass(frozen=True)
class MetadataFaults:
    """Fault probabilities per call (per delivered event for watches) and one-way delays
    (seconds, uniform in [low, high])."""

    delay_s: tuple[float, float] = (0.0005, 0.003)
    unavailable_p: float = 0.0
    ambiguous_p: float = 0.0  # writes only
    watch_break_p: float = 0.0
    watch_lag_p: float = 0.0  # per delivered event
    watch_lag_s: tuple[float, float] = (0.05, 0.5)

    @classmethod
    def none(cls) -> MetadataFaults:
        return cls(delay_s=(0.0, 0.0))

    @classmethod
    def flaky(cls) -> MetadataFaults:
        return cls(unavailable_p=0.03, ambiguous_p=0.03, watch_break_p=0.02)


class FaultyMetadataStore:
    """LocalMetadataStore behind seeded faults; see the module docstring. `inner` is the
    ground truth, without faults; `faults` may be replaced at any time."""

    def __init__(
        self,
        inner: LocalMetadataStore,
        rng: SimRandom,
        trace: Trace,
        *,
        clock: Clock,
        faults: MetadataFaults | None = None,
        name: str = "metadata",
    ) -> None:
        self.inner = inner
        self._clock = clock  # the inner store's: keep-alives pace themselves on it
        self.faults = faults or MetadataFaults()
        self._rng = rng
        self._trace = trace
        self._name = name
        self._down = False
        self._down_until: asyncio.TimerHandle | None = None
        self._breaker: asyncio.Future[None] | None = None
        self._keepers: list[LeaseKeepAlive] = []  # a list, not a set: stopped in a fixed order
        self.calls = 0

    # -- explicit controls ---------------------------------------------------------------------
    @property
    def available(self) -> bool:
        return not self._down

    def set_unavailable(self, down: bool = True) -> None:
        """Start (or end) a window in which every call fails unapplied and watches break."""
        if self._down_until is not None:
            self._down_until.cancel()
            self._down_until = None
        if down == self._down:
            return
        self._down = down
        self._trace.record(self._name, "unavailable" if down else "available again")
        if down:
            self.break_watches()

    def unavailable_for(self, seconds: float) -> None:
        self.set_unavailable(True)
        self._down_until = asyncio.get_running_loop().call_later(seconds, self.set_unavailable, False)

    def break_watches(self) -> None:
        """Every open watch's iteration raises MetadataUnavailable (its stream broke)."""
        breaker, self._breaker = self._breaker, None
        if breaker is not None and not breaker.done():
            breaker.set_result(None)
            self._trace.record(self._name, "watches broken")

    # -- key-value -----------------------------------------------------------------------------
    async def get(self, key: str) -> KeyValue | None:
        return await self._call("get", key, False, lambda: self.inner.get(key))

    async def put(
        self, key: str, value: bytes, expected_revision: int | None = None, lease: Lease | None = None
    ) -> int:
        return await self._call("put", key, True, lambda: self.inner.put(key, value, expected_revision, lease))

    async def delete(self, key: str, expected_revision: int | None = None) -> bool:
        return await self._call("delete", key, True, lambda: self.inner.delete(key, expected_revision))

    async def list(self, prefix: str) -> list[KeyValue]:
        return await self._call("list", prefix, False, lambda: self.inner.list(prefix))

    async def list_with_revision(self, prefix: str) -> tuple[builtins.list[KeyValue], int]:
        return await self._call("list", prefix, False, lambda: self.inner.list_with_revision(prefix))

    async def txn(
        self,
        compares: Mapping[str, int],
        puts: Mapping[str, bytes] | None = None,
        deletes: Collection[str] = (),
        lease: Lease | None = None,
    ) -> int:
        label = ",".join(sorted([*compares, *(puts or {}), *deletes]))
        return await self._call("txn", label, True, lambda: self.inner.txn(compares, puts, deletes, lease))

    # -- leases --------------------------------------------------------------------------------
    async def grant_lease(self, ttl_s: int) -> Lease:
        return await self._call("grant_lease", str(ttl_s), True, lambda: self.inner.grant_lease(ttl_s))

    async def keep_alive(self, lease: Lease) -> int:
        return await self._call("keep_alive", f"{lease.id:x}", True, lambda: self.inner.keep_alive(lease))

    def start_keep_alive(self, lease: Lease) -> LeaseKeepAlive:
        """Renews through this wrapper, so renewals see the faults."""
        self._keepers = [k for k in self._keepers if k.running]
        keeper = LeaseKeepAlive(self, lease, clock=self._clock).start()
        self._keepers.append(keeper)
        return keeper

    async def revoke_lease(self, lease: Lease) -> None:
        await self._call("revoke_lease", f"{lease.id:x}", True, lambda: self.inner.revoke_lease(lease))
        for keeper in [k for k in self._keepers if k.lease.id == lease.id]:
            self._keepers.remove(keeper)
            await keeper.revoked()

    # -- watches -------------------------------------------------------------------------------
    async def watch(self, prefix: str, start_revision: int | None = None) -> _FaultyWatch:
        inner = await self._call("watch", prefix, False, lambda: self.inner.watch(prefix, start_revision))
        return _FaultyWatch(self, inner, prefix)

    async def close(self) -> None:
        for keeper in self._keepers:
            await keeper.stop()
        self._keepers.clear()
        if self._down_until is not None:
            self._down_until.cancel()
        await self.inner.close()

    # -- faults --------------------------------------------------------------------------------
    def _break_signal(self) -> asyncio.Future[None]:
        if self._breaker is None:
            self._breaker = asyncio.get_running_loop().create_future()
        return self._breaker

    async def _call(self, operation: str, key: str, write: bool, apply: Callable[[], Awaitable[T]]) -> T:
        self.calls += 1
        faults = self.faults
        rng = self._rng
        delay = rng.between(faults.delay_s)
        if delay > 0:
            await asyncio.sleep(delay)
        if self._down or rng.chance(faults.unavailable_p):
            self._trace.record(self._name, "%s %s unavailable (not applied)", operation, key)
            raise MetadataUnavailable(f"sim: metadata store unavailable ({operation} {key} not applied)")
        try:
            result = await apply()
        except MetadataError as exc:
            self._trace.record(self._name, "%s %s -> %s", operation, key, type(exc).__name__)
            raise
        ambiguous = write and rng.chance(faults.ambiguous_p)
        delay = rng.between(faults.delay_s)
        if delay > 0:
            await asyncio.sleep(delay)
        if ambiguous or self._down:
            self._trace.record(self._name, "%s %s applied, answer lost", operation, key)
            raise MetadataUnavailable(f"sim: no answer from the metadata store ({operation} {key}: outcome unknown)")
        self._trace.record(self._name, "%s %s ok", operation, key)
        return result


class _FaultyWatch:
    """An inner watch whose iteration can break (see FaultyMetadataStore)."""

    def __init__(self, store: FaultyMetadataStore, inner: Any, prefix: str) -> None:
        self._store = store
        self._inner = inner
        self._prefix = prefix
        self._broken = False

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self

    async def __anext__(self) -> WatchEvent:
        store = self._store
        if self._broken:
            raise MetadataUnavailable(f"sim: watch of {self._prefix!r} is broken")
        loop = asyncio.get_running_loop()
        following = loop.create_task(self._inner.__anext__(), name=f"watch {self._prefix}")
        breaker = store._break_signal()
        waiter: asyncio.Future[None] = loop.create_future()

        def wake(_: object) -> None:
            if not waiter.done():
                waiter.set_result(None)

        following.add_done_callback(wake)
        breaker.add_done_callback(wake)
        try:
            await waiter
        except asyncio.CancelledError:
            following.cancel()
            raise
        finally:
            breaker.remove_done_callback(wake)
        if not following.done():
            following.cancel()
            await asyncio.gather(following, return_exceptions=True)
            await self._break("the stream broke")
        event = following.result()  # StopAsyncIteration and the inner watch's errors pass through
        if store.faults.watch_lag_p and store._rng.chance(store.faults.watch_lag_p):
            await asyncio.sleep(store._rng.between(store.faults.watch_lag_s))
        if store._rng.chance(store.faults.watch_break_p):
            await self._break(f"broke before delivering revision {event.revision}")
        return event

    async def _break(self, why: str) -> None:
        self._broken = True
        self._store._trace.record(self._store._name, "watch %s %s", self._prefix, why)
        await self._inner.close()
        raise MetadataUnavailable(f"sim: watch of {self._prefix!r} {why}")

    async def close(self) -> None:
        await self._inner.close()

    async def __aenter__(self) -> _FaultyWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def build_metadata_store(
    rng: SimRandom,
    trace: Trace,
    clock: Any,
    *,
    faults: MetadataFaults | None = None,
    name: str = "metadata",
    **options: Any,
) -> FaultyMetadataStore:
    """An in-memory LocalMetadataStore on `clock` (leases expire in virtual time) behind
    faults drawn from `rng`."""
    inner = LocalMetadataStore(None, clock, **options)
    return FaultyMetadataStore(inner, rng, trace, clock=clock, faults=faults, name=name)
