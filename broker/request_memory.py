"""The broker-wide bound on request bytes held in memory (Kafka's memory pool,
`queued.max.request.bytes`).

A connection reserves a frame's declared size when its 4-byte size prefix arrives, before
the body is read, and gives it back when the request is handled. A reservation is granted
while the pool is below its capacity (so a frame larger than the whole pool still gets in
when the pool is empty), which bounds what is held by the capacity plus one frame
(`socket.request.max.bytes`). A connection refused a reservation stops reading from its
socket (TCP pushes back on the client) and waits, first come first served, for bytes to be
given back. Granted frames always complete and are handled, so waiting never deadlocks.
"""

from __future__ import annotations

import collections
from collections.abc import Callable


class RequestMemory:
    def __init__(self, capacity_bytes: int, on_change: Callable[[int], None] | None = None) -> None:
        if capacity_bytes < 1:
            raise ValueError(f"queued.max.request.bytes must be >= 1, got {capacity_bytes}")
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self._on_change = on_change
        self._waiting: collections.OrderedDict[object, Callable[[], None]] = collections.OrderedDict()

    @property
    def waiting(self) -> int:
        """Connections waiting for a reservation."""
        return len(self._waiting)

    def charge(self, nbytes: int) -> None:
        """Count bytes already received (frames complete in one read), granted or not."""
        self.used_bytes += nbytes
        self._changed()

    def try_reserve(self, nbytes: int, waiter: object, on_room: Callable[[], None]) -> bool:
        """Reserve `nbytes` now (True), or queue `waiter` (False): `on_room` is called when it
        is first in line and the pool has room, and must retry (call it soon, not inside)."""
        if self.used_bytes < self.capacity_bytes and (not self._waiting or next(iter(self._waiting)) is waiter):
            self._waiting.pop(waiter, None)
            self.used_bytes += nbytes
            self._changed()
            self._wake_first()
            return True
        self._waiting.setdefault(waiter, on_room)
        return False

    def release(self, nbytes: int) -> None:
        self.used_bytes -= nbytes
        self._changed()
        self._wake_first()

    def forget(self, waiter: object) -> None:
        """A waiting connection closed."""
        if self._waiting.pop(waiter, None) is not None:
            self._wake_first()

    def _wake_first(self) -> None:
        if self._waiting and self.used_bytes < self.capacity_bytes:
            next(iter(self._waiting.values()))()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.used_bytes)
