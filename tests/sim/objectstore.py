"""An object store that fails, delays, loses answers, stalls and rots: the object-store seam
(STYLE 19) for simulations and unit tests.

`FaultyObjectStore` wraps the real MemoryObjectStore with the same interface. One call is
one "request": it may wait a virtual delay, fail before it is applied (a retriable 503), be
applied and then fail anyway (the answer was lost: the caller cannot tell it from the first
case), or fail for good (a 403). Each decision is drawn from the seeded rng and recorded in
the trace. Explicit controls model what probabilities cannot: `stall()` (every call waits
until `resume()`), `make_unreadable(key)` and `corrupt(key)`.

`build_object_store` stacks the broker's own retry layer on top, the class production
stacks over S3's requests (broker/objectstore/retrying.py):

    RetryingObjectStore(FaultyObjectStore(MemoryObjectStore()))   ~   RetryingObjectStore(S3Requests(real S3))

so the broker sees the same kinds of errors, after the same retries, slots and per-attempt
timeouts, as in production. The faults signal retriability the way the broker's stores do
(ObjectStoreError's `retriable` flag), which is the classification the layer is given here.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from broker.clock import Clock
from broker.objectstore import (
    DEFAULT_MAX_CONCURRENCY,
    MemoryObjectStore,
    ObjectInfo,
    ObjectStoreError,
    ObjectStoreUnavailable,
    RetryingObjectStore,
    RetryPolicy,
)

from .determinism import SimRandom
from .trace import Trace

OPERATIONS = frozenset({"get", "head", "put", "put_if_absent", "list", "delete_many"})


@dataclass(frozen=True)
class ObjectStoreFaults:
    """Per-request fault probabilities and virtual delays (seconds, uniform in [low, high])."""

    delay_s: tuple[float, float] = (0.005, 0.030)  # every request: S3's usual first-byte latency
    slow_p: float = 0.0  # a tail-latency request instead takes slow_s
    slow_s: tuple[float, float] = (0.5, 5.0)
    fail_p: float = 0.0  # retriable failure, nothing applied (503 SlowDown, a reset connection)
    lost_answer_p: float = 0.0  # applied, then a retriable failure (the response was lost)
    fatal_p: float = 0.0  # non-retriable failure, nothing applied (403, a bad request)
    partial_delete_p: float = 0.0  # delete_many: each key independently reported as failed
    operations: frozenset[str] = OPERATIONS  # which operations the probabilities apply to

    @classmethod
    def none(cls) -> ObjectStoreFaults:
        """No faults and no delay: the store behaves as MemoryObjectStore."""
        return cls(delay_s=(0.0, 0.0))

    @classmethod
    def flaky(cls) -> ObjectStoreFaults:
        """A store that fails often enough for every path to be taken in a short run."""
        return cls(slow_p=0.02, fail_p=0.05, lost_answer_p=0.03, partial_delete_p=0.05)


class FaultyObjectStore:
    """MemoryObjectStore behind seeded faults; see the module docstring. `faults` may be
    replaced at any time (e.g. `ObjectStoreFaults.none()` to switch faults off for a
    scenario's final audit); `inner` is the ground truth, without faults."""

    def __init__(
        self,
        inner: MemoryObjectStore,
        rng: SimRandom,
        trace: Trace,
        *,
        faults: ObjectStoreFaults | None = None,
        name: str = "objectstore",
        list_page_size: int = 1000,
    ) -> None:
        self.inner = inner
        self.faults = faults or ObjectStoreFaults()
        self._rng = rng
        self._trace = trace
        self._name = name
        self._list_page_size = list_page_size
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._unreadable: set[str] = set()
        self._corrupt: dict[str, int] = {}  # key -> seed of the damage
        self.requests = 0

    # -- explicit controls ---------------------------------------------------------------------
    def stall(self) -> None:
        """From now on every request waits (after its delay) until `resume()`: a store that
        accepts connections and never answers. Callers' timeouts decide what happens."""
        self._resumed.clear()
        self._trace.record(self._name, "stalled")

    def resume(self) -> None:
        self._resumed.set()
        self._trace.record(self._name, "resumed")

    @property
    def stalled(self) -> bool:
        return not self._resumed.is_set()

    def make_unreadable(self, key: str) -> None:
        """GET and HEAD of `key` fail (retriable) until `make_readable`: a key S3 keeps
        answering 500 for, or a replica that lost it."""
        self._unreadable.add(key)
        self._trace.record(self._name, "unreadable %s", key)

    def make_readable(self, key: str) -> None:
        self._unreadable.discard(key)

    def corrupt(self, key: str) -> None:
        """GETs of `key` return damaged bytes (one flipped byte per ranged read, at a place
        fixed per key) until `heal`: bit rot or a buggy middlebox, which checksums must catch."""
        self._corrupt[key] = self._rng.getrandbits(32)
        self._trace.record(self._name, "corrupt %s", key)

    def heal(self, key: str) -> None:
        self._corrupt.pop(key, None)

    # -- the store interface -------------------------------------------------------------------
    async def put(self, key: str, data: bytes) -> None:
        lost = await self._before("put", key)
        await self.inner.put(key, data)
        self._after("put", key, lost, f"{len(data)}B")

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        lost = await self._before("put_if_absent", key)
        created = await self.inner.put_if_absent(key, data)
        self._after("put_if_absent", key, lost, str(created))
        return created

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        lost = await self._before("get", key)
        if key in self._unreadable:
            self._trace.record(self._name, "get %s unreadable", key)
            raise ObjectStoreUnavailable(f"sim: GET {key} keeps failing (made unreadable)")
        data = await self.inner.get(key, start, end)
        damage = self._corrupt.get(key)
        if damage is not None and data:
            position = damage % len(data)
            data = data[:position] + bytes([data[position] ^ 0xFF]) + data[position + 1 :]
            self._trace.record(self._name, "get %s [%s:%s] corrupted at +%d", key, start, end, position)
        self._after("get", key, lost, f"[{start}:{end}] {len(data)}B")
        return data

    async def head(self, key: str) -> ObjectInfo | None:
        lost = await self._before("head", key)
        if key in self._unreadable:
            raise ObjectStoreUnavailable(f"sim: HEAD {key} keeps failing (made unreadable)")
        info = await self.inner.head(key)
        self._after("head", key, lost, "missing" if info is None else f"{info.size}B")
        return info

    async def delete_many(self, keys: Iterable[str]) -> list[str]:
        wanted = list(keys)
        label = f"{len(wanted)} key(s)"
        lost = await self._before("delete_many", label)
        faults = self.faults
        if faults.partial_delete_p > 0 and "delete_many" in faults.operations:
            failed = {k for k in wanted if self._rng.chance(faults.partial_delete_p)}
        else:
            failed = set()
        deleted = await self.inner.delete_many([k for k in wanted if k not in failed])
        if failed:
            self._trace.record(
                self._name, "delete_many: %d key(s) reported failed: %s", len(failed), ",".join(sorted(failed))
            )
        self._after("delete_many", label, lost, f"{len(deleted)} deleted")
        return [k for k in wanted if k not in failed]

    async def list(self, prefix: str = "", start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        """Pages of `list_page_size` keys; each page is a request that may be delayed or fail
        (an iteration may end with an error after yielding some keys, as S3's does)."""
        in_page = 0
        lost = await self._before("list", prefix)
        async for info in self.inner.list(prefix, start_after):
            if in_page == self._list_page_size:
                in_page = 0
                lost = await self._before("list", prefix)
            in_page += 1
            yield info
        self._after("list", prefix, lost, "end")

    async def close(self) -> None:
        await self.inner.close()

    def keys(self) -> builtins.list[str]:
        return self.inner.keys()

    # -- faults --------------------------------------------------------------------------------
    async def _before(self, operation: str, key: str) -> bool:
        """Delay, wait out a stall, maybe fail; returns whether the answer will be lost."""
        self.requests += 1
        faults = self.faults
        rng = self._rng
        delay = rng.between(faults.delay_s)
        applies = operation in faults.operations
        if applies and rng.chance(faults.slow_p):
            delay = rng.between(faults.slow_s)
            self._trace.record(self._name, "%s %s slow: %.3fs", operation, key, delay)
        if delay > 0:
            await asyncio.sleep(delay)
        if not self._resumed.is_set():
            await self._resumed.wait()
        if not applies:
            return False
        if rng.chance(faults.fatal_p):
            self._trace.record(self._name, "%s %s failed (fatal)", operation, key)
            raise ObjectStoreError(f"sim: {operation} {key}: access denied", retriable=False)
        if rng.chance(faults.fail_p):
            self._trace.record(self._name, "%s %s failed (retriable, not applied)", operation, key)
            raise ObjectStoreUnavailable(f"sim: {operation} {key}: 503 SlowDown")
        return rng.chance(faults.lost_answer_p)

    def _after(self, operation: str, key: str, lost: bool, detail: str) -> None:
        if lost:
            self._trace.record(self._name, "%s %s applied, answer lost (%s)", operation, key, detail)
            raise ObjectStoreUnavailable(f"sim: {operation} {key}: connection reset after the request was sent")
        self._trace.record(self._name, "%s %s ok %s", operation, key, detail)


@dataclass
class SimObjectStore:
    """The three layers a simulation holds: `store` for the broker (retries over faults),
    `faulty` for the scenario's controls, `memory` for the auditor's ground truth.
    `new_client()` is another retry layer over the same faults and objects, as each broker
    process has its own client: its concurrency slots die with the process. One client shared
    by every broker incarnation kept the slots of requests a crash froze (a killed process's
    tasks never run again), and once they were all held, every broker's requests waited for
    ever (`tiering` seed 680030: a killed broker's tiering job held them)."""

    store: RetryingObjectStore
    faulty: FaultyObjectStore
    memory: MemoryObjectStore
    new_client: Callable[[], RetryingObjectStore]


def build_object_store(
    rng: SimRandom,
    trace: Trace,
    clock: Clock,
    *,
    faults: ObjectStoreFaults | None = None,
    max_attempts: int = 4,
    request_timeout_s: float | None = 30.0,
    name: str = "objectstore",
) -> SimObjectStore:
    """Compose memory <- faults <- retries, with the retry jitter drawn from `rng` and the
    backoff slept on virtual time; `clock` stamps objects' last-modified times."""
    memory = MemoryObjectStore(clock=clock)
    faulty = FaultyObjectStore(memory, rng.fork("faults"), trace, faults=faults, name=name)
    policy = RetryPolicy(max_attempts=max_attempts, random=rng.fork("retry").random, sleep=asyncio.sleep)

    def new_client() -> RetryingObjectStore:  # one retry policy (one jitter stream) for all
        return RetryingObjectStore(
            faulty,
            policy,
            clock=clock,
            attempt_timeout_s=request_timeout_s,
            max_concurrency=DEFAULT_MAX_CONCURRENCY,
            name="sim",
        )

    return SimObjectStore(new_client(), faulty, memory, new_client)
