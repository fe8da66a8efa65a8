"""Parked fetches: a fetch waiting for data registers here and is woken by the append
that makes data available, so long polling answers as soon as data arrives rather
than at the end of max_wait_ms.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Callable, Hashable, Iterable


class FetchWaiters:
    def __init__(self) -> None:
        # per key, the waiting futures in arrival order (a dict, not a set: woken first come,
        # first served, the same way in every run)
        self._waiting: dict[Hashable, dict[asyncio.Future[None], None]] = defaultdict(dict)
        self._listeners: list[Callable[[Hashable], None]] = []

    def subscribe(self, listener: Callable[[Hashable], None]) -> None:
        """Told every notified key, whether or not a fetch waits for it (replica fetch
        sessions remember which partitions changed between their requests)."""
        self._listeners.append(listener)

    async def wait(self, keys: Iterable[Hashable], timeout_s: float) -> None:
        """Return when any of `keys` is notified or after `timeout_s`."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for key in keys:
            self._waiting[key][future] = None
        try:
            # asyncio.wait never cancels `future` nor swallows our own cancellation (wait_for can, on 3.11)
            await asyncio.wait((future,), timeout=timeout_s)
        finally:
            for key in keys:
                waiters = self._waiting.get(key)
                if waiters is not None:
                    waiters.pop(future, None)
                    if not waiters:
                        del self._waiting[key]

    def notify(self, key: Hashable) -> None:
        for listener in self._listeners:
            listener(key)
        for future in self._waiting.pop(key, ()):
            if not future.done():
                future.set_result(None)

    def notify_all(self) -> None:
        for key in list(self._waiting):
            self.notify(key)
