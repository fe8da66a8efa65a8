"""In-memory object store: the bottom layer that unit tests and simulations swap in
(STYLE 4), so the real WAL, log and commit code runs without a disk or a network.

It follows the same contract as the S3 and local stores (tests/contract), including key
validation, so code that passes over memory does not fail on S3 for a bad key. Unbounded
by design: it holds what a test writes.
"""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator, Iterable

from broker.clock import Clock
from broker.objectstore.store import (
    MAX_DELETE_BATCH,
    MAX_LIST_PAGE,
    NotFound,
    ObjectInfo,
    RequestObserver,
    RequestTimer,
    as_bytes,
    validate_key,
    validate_list_page_size,
    validate_range,
)


class MemoryObjectStore:
    def __init__(
        self,
        *,
        clock: Clock,
        on_request: RequestObserver | None = None,
        list_page_size: int = MAX_LIST_PAGE,
    ) -> None:
        self._clock = clock
        self._on_request = on_request
        self._list_page_size = validate_list_page_size(list_page_size)
        self._objects: dict[str, tuple[bytes, int]] = {}  # key -> (data, last_modified_ms)
        self._sorted_keys: list[str] = []

    @property
    def in_flight(self) -> int:
        return 0

    def keys(self) -> list[str]:
        """All keys, sorted (test helper)."""
        return self._sorted_keys.copy()

    async def put(self, key: str, data: bytes) -> None:
        validate_key(key)
        timer = RequestTimer(self._on_request, "put", self._clock)
        self._store(key, as_bytes(data))
        timer.done("ok", len(data))

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        validate_key(key)
        timer = RequestTimer(self._on_request, "put_if_absent", self._clock)
        existing = self._objects.get(key)
        if existing is not None:
            same = existing[0] == data
            timer.done("ok" if same else "exists", 0)
            return same
        self._store(key, as_bytes(data))
        timer.done("ok", len(data))
        return True

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        validate_key(key)
        first, stop = validate_range(start, end)
        timer = RequestTimer(self._on_request, "get", self._clock)
        entry = self._objects.get(key)
        if entry is None:
            timer.done("not_found")
            raise NotFound(f"no object {key!r}")
        data = entry[0]
        result = data[first:stop] if (first or stop is not None) else data
        timer.done("ok", len(result))
        return result

    async def head(self, key: str) -> ObjectInfo | None:
        validate_key(key)
        timer = RequestTimer(self._on_request, "head", self._clock)
        entry = self._objects.get(key)
        if entry is None:
            timer.done("not_found")
            return None
        timer.done("ok")
        return ObjectInfo(key, len(entry[0]), entry[1])

    async def delete_many(self, keys: Iterable[str]) -> list[str]:
        wanted = [validate_key(key) for key in keys]
        for index in range(0, len(wanted), MAX_DELETE_BATCH):
            timer = RequestTimer(self._on_request, "delete_many", self._clock)
            for key in wanted[index : index + MAX_DELETE_BATCH]:
                if self._objects.pop(key, None) is not None:
                    position = bisect.bisect_left(self._sorted_keys, key)
                    del self._sorted_keys[position]
            timer.done("ok")
        return wanted

    async def list(self, prefix: str = "", start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        cursor = prefix if start_after is None or start_after < prefix else start_after
        inclusive = start_after is None or start_after < prefix
        while True:
            # One page per step, re-searched from the cursor so that writes and deletes
            # between pages behave as they do on S3 (no snapshot, no crash).
            timer = RequestTimer(self._on_request, "list", self._clock)
            keys = self._sorted_keys
            position = (bisect.bisect_left if inclusive else bisect.bisect_right)(keys, cursor)
            page: list[ObjectInfo] = []
            while position < len(keys) and len(page) < self._list_page_size:
                key = keys[position]
                if not key.startswith(prefix):
                    break
                data, modified_ms = self._objects[key]
                page.append(ObjectInfo(key, len(data), modified_ms))
                position += 1
            timer.done("ok")
            for info in page:
                yield info
            if len(page) < self._list_page_size:
                return
            cursor, inclusive = page[-1].key, False
            await self._clock.sleep(0)

    async def close(self) -> None:
        return None

    def _store(self, key: str, data: bytes) -> None:
        if key not in self._objects:
            bisect.insort(self._sorted_keys, key)
        self._objects[key] = (data, self._clock.now_ms())
