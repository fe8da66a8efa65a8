"""The broker's object cache: byte ranges of WAL objects, least recently used evicted first.

It exists so that consumers near the tail of a diskless partition never wait for S3: the
uploader writes every fresh object through (`put_object`), and the fetch path caches what its
coalesced ranged GETs bring back (`put_range`). WAL objects are immutable, so a cached range is
valid for as long as it is kept: there is nothing to invalidate.

Bound (`cache.max.bytes`): the bytes of all cached ranges. Inserting past it evicts the least
recently used ranges until the total is back under it; a range larger than the whole bound is
not cached at all (so one huge object cannot flush everything else). 0 disables the cache.
Views handed out by `get` keep their range's bytes alive after eviction: the bound is on what
the cache holds, not on what readers still hold.

Per object, the cached ranges never contain one another (a range inside a cached one is not
added; cached ranges inside a new one are dropped), so sorted by start they are also sorted by
end, and the one range that can contain a lookup is the last one starting at or before it.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Callable

# on_hit(nbytes) / on_miss(nbytes): one call per `get`, with the bytes asked for.
CacheObserver = Callable[[int], None]


class ObjectCache:
    def __init__(
        self,
        max_bytes: int,
        *,
        on_hit: CacheObserver | None = None,
        on_miss: CacheObserver | None = None,
    ) -> None:
        if max_bytes < 0:
            raise ValueError(f"cache.max.bytes must be >= 0, got {max_bytes}")
        self._max_bytes = max_bytes
        self._on_hit = on_hit
        self._on_miss = on_miss
        self._ranges: OrderedDict[tuple[str, int], bytes] = OrderedDict()  # LRU first
        self._starts: dict[str, list[int]] = {}  # object id -> sorted starts of its ranges
        self._size_bytes = 0

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def size_bytes(self) -> int:
        """Bytes of all cached ranges (never more than `max_bytes`)."""
        return self._size_bytes

    @property
    def entries(self) -> int:
        """Number of cached ranges."""
        return len(self._ranges)

    def put_object(self, object_id: str, data: bytes) -> None:
        """Write-through of a whole object just uploaded, so tailing consumers never GET it."""
        self.put_range(object_id, 0, data)

    def put_range(self, object_id: str, start: int, data: bytes) -> None:
        """Cache the object's bytes [start, start + len(data)), e.g. what a ranged GET returned."""
        if start < 0:
            raise ValueError(f"range start must be >= 0, got {start}")
        end = start + len(data)
        if not data or len(data) > self._max_bytes:
            return
        starts = self._starts.setdefault(object_id, [])
        position = bisect.bisect_right(starts, start)
        if position and self._end(object_id, starts[position - 1]) >= end:
            self._ranges.move_to_end((object_id, starts[position - 1]))
            return
        # Ranges starting inside the new one and ending by its end are contained: drop them.
        # They are contiguous in `starts`, beginning at the first start >= `start`.
        position = bisect.bisect_left(starts, start)
        while position < len(starts) and self._end(object_id, starts[position]) <= end:
            self._size_bytes -= len(self._ranges.pop((object_id, starts.pop(position))))
        starts.insert(position, start)
        self._ranges[(object_id, start)] = data
        self._size_bytes += len(data)
        while self._size_bytes > self._max_bytes:
            (victim, victim_start), evicted = self._ranges.popitem(last=False)
            self._size_bytes -= len(evicted)
            self._forget_start(victim, victim_start)

    def get(self, object_id: str, start: int, end: int) -> memoryview | None:
        """A view of the object's bytes [start, end) if one cached range holds all of them
        (that range becomes the most recently used), else None."""
        if not 0 <= start <= end:
            raise ValueError(f"need 0 <= start <= end, got [{start}, {end})")
        starts = self._starts.get(object_id)
        if starts:
            position = bisect.bisect_right(starts, start)
            if position:
                key = (object_id, starts[position - 1])
                data = self._ranges[key]
                if key[1] + len(data) >= end:
                    self._ranges.move_to_end(key)
                    if self._on_hit is not None:
                        self._on_hit(end - start)
                    return memoryview(data)[start - key[1] : end - key[1]]
        if self._on_miss is not None:
            self._on_miss(end - start)
        return None

    def _end(self, object_id: str, start: int) -> int:
        return start + len(self._ranges[(object_id, start)])

    def _forget_start(self, object_id: str, start: int) -> None:
        starts = self._starts[object_id]
        del starts[bisect.bisect_left(starts, start)]
        if not starts:
            del self._starts[object_id]
