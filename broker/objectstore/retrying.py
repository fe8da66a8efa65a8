"""The one retry layer: a decorator over any ObjectStore, in production and in the simulation.

`open_object_store` stacks it over the S3 requests (`S3ObjectStore`); the simulation stacks
the same class over its fault-injecting memory store, so the retries a simulation exercises
are the retries users run (STYLE 23). Memory and local stores are not wrapped: they do not
fail transiently.

A request runs as attempts. An attempt holds one of `max_concurrency` slots (not while
backing off) and runs under `attempt_timeout_s`; a failure that the injected `Failures`
call retriable is tried again under `RetryPolicy`. What finally escapes is an
ObjectStoreError: the inner store's own (NotFound, a closed store) as it is, a retriable
failure that outlasted the policy as ObjectStoreUnavailable, anything else as a
non-retriable ObjectStoreError.

The inner store reports the requests it answered to its own `on_request` (ok, not_found,
exists); this layer reports the attempts that failed (throttled, retry, error), so every
attempt is reported once.

One call of the inner store is one attempt, so operations that span several requests are
cut here: `delete_many` into batches of `delete_batch_size` keys, `list` into pages of
`list_page_size` (set both as the inner store's, so that an attempt is one request). A page
is read whole before it is yielded; a failed page is read again from the key after the last
page. A listing that ends on a full page costs one more (empty) page request, because the
inner iterator does not say whether more keys follow.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from broker.clock import Clock
from broker.objectstore.retry import RetryPolicy
from broker.objectstore.store import (
    DEFAULT_MAX_CONCURRENCY,
    MAX_DELETE_BATCH,
    MAX_LIST_PAGE,
    NotFound,
    ObjectInfo,
    ObjectStore,
    ObjectStoreError,
    ObjectStoreUnavailable,
    RequestObserver,
    RequestTimer,
    as_bytes,
    validate_key,
    validate_list_page_size,
    validate_max_concurrency,
    validate_range,
)

T = TypeVar("T")


def store_error_is_retriable(exc: BaseException) -> bool:
    """For stores that raise ObjectStoreError kinds: their `retriable` flag; and the
    per-attempt timeout."""
    return isinstance(exc, TimeoutError) or (isinstance(exc, ObjectStoreError) and exc.retriable)


def describe_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _never(exc: BaseException) -> bool:
    return False


@dataclass(frozen=True)
class Failures:
    """How the inner store's failures read: whether another attempt may work, whether the
    store asked us to slow down (reported as "throttled" rather than "retry"), and how to
    name one in the final error's message."""

    retriable: Callable[[BaseException], bool] = store_error_is_retriable
    throttled: Callable[[BaseException], bool] = _never
    describe: Callable[[BaseException], str] = describe_error


STORE_FAILURES = Failures()  # ObjectStoreError's own `retriable` flag (the simulation's faults)


class RetryingObjectStore:
    """Retries, concurrency slots and per-attempt timeouts over `inner`; see the module
    docstring. `name` starts the final errors' messages ("S3 put failed after 6 attempts")."""

    def __init__(
        self,
        inner: ObjectStore,
        policy: RetryPolicy,
        *,
        clock: Clock,
        failures: Failures = STORE_FAILURES,
        attempt_timeout_s: float | None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        on_request: RequestObserver | None = None,
        list_page_size: int = MAX_LIST_PAGE,
        delete_batch_size: int = MAX_DELETE_BATCH,
        name: str = "object store",
    ) -> None:
        if attempt_timeout_s is not None and attempt_timeout_s <= 0:
            raise ValueError(f"attempt timeout must be > 0 s, got {attempt_timeout_s}")
        if not 1 <= delete_batch_size <= MAX_DELETE_BATCH:
            raise ValueError(f"delete batch size must be in [1, {MAX_DELETE_BATCH}], got {delete_batch_size}")
        self.inner = inner
        self.policy = policy
        self._clock = clock
        self._failures = failures
        self._attempt_timeout_s = attempt_timeout_s
        self._slots = asyncio.Semaphore(validate_max_concurrency(max_concurrency))
        self._on_request = on_request
        self._list_page_size = validate_list_page_size(list_page_size)
        self._delete_batch_size = delete_batch_size
        self._name = name
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        """Attempts holding a concurrency slot right now."""
        return self._in_flight

    # -- operations ----------------------------------------------------------------------

    async def put(self, key: str, data: bytes) -> None:
        validate_key(key)
        payload = as_bytes(data)
        await self._request("put", lambda: self.inner.put(key, payload))

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        validate_key(key)
        payload = as_bytes(data)
        if await self._request("put_if_absent", lambda: self.inner.put_if_absent(key, payload)):
            return True
        # Something is there. It may be our own write whose answer was lost: an attempt of
        # ours, or a transport's silent resend (aiohttp resends an idempotent PUT once when
        # the connection drops), and S3 answers 412 whatever the bytes. Same bytes: success.
        info = await self.head(key)
        if info is None or info.size != len(payload):
            return False
        with contextlib.suppress(NotFound):
            return await self.get(key) == payload
        return False

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        validate_key(key)
        validate_range(start, end)
        return await self._request("get", lambda: self.inner.get(key, start, end))

    async def head(self, key: str) -> ObjectInfo | None:
        validate_key(key)
        return await self._request("head", lambda: self.inner.head(key))

    async def delete_many(self, keys: Iterable[str]) -> list[str]:
        wanted = [validate_key(key) for key in keys]
        failed: set[str] = set()
        size = self._delete_batch_size
        for index in range(0, len(wanted), size):
            batch = wanted[index : index + size]
            deleted = await self._request("delete_many", functools.partial(self.inner.delete_many, batch))
            failed.update(set(batch).difference(deleted))
        return [key for key in wanted if key not in failed]

    async def list(self, prefix: str = "", start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        cursor = start_after
        while True:
            page = await self._request("list", functools.partial(self._page, prefix, cursor))
            for info in page:
                yield info
            if len(page) < self._list_page_size:
                return
            cursor = page[-1].key

    async def close(self) -> None:
        await self.inner.close()

    # -- machinery -----------------------------------------------------------------------

    async def _page(self, prefix: str, start_after: str | None) -> builtins.list[ObjectInfo]:
        """At most one page of the inner listing, stopping before it asks for the next."""
        page: builtins.list[ObjectInfo] = []
        listing = self.inner.list(prefix, start_after)
        try:
            async for info in listing:
                page.append(info)
                if len(page) == self._list_page_size:
                    break
        finally:
            if isinstance(listing, AsyncGenerator):
                await listing.aclose()
        return page

    async def _request(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        policy = self.policy
        failures = self._failures

        async def attempt(number: int) -> T:
            async with self._slots:
                self._in_flight += 1
                timer = RequestTimer(self._on_request, operation, self._clock)
                try:
                    async with asyncio.timeout(self._attempt_timeout_s):
                        return await call()
                except NotFound:
                    raise
                except Exception as exc:
                    if not policy.will_retry(number, failures.retriable(exc)):
                        timer.done("error")
                    else:
                        timer.done("throttled" if failures.throttled(exc) else "retry")
                    raise
                finally:
                    self._in_flight -= 1

        try:
            return await policy.run(attempt, failures.retriable)
        except ObjectStoreError:
            raise
        except Exception as exc:
            described = failures.describe(exc)
            if failures.retriable(exc):
                raise ObjectStoreUnavailable(
                    f"{self._name} {operation} failed after {policy.max_attempts} attempts: {described}"
                ) from exc
            raise ObjectStoreError(f"{self._name} {operation} failed: {described}", retriable=False) from exc
