"""Which partitions have batches in a WAL object: told by the uploaders (RecentUploads), or
read from the object's index with one ranged GET of its tail (a second one only for an index
larger than the tail, walfiles/format.py). Remembered in a bounded LRU cache, because an
object still referenced is judged again every cycle.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

from walfiles.format import decode_index, index_from_tail, tail_range

from ..objectstore import ObjectReader
from .policy import Known, PartitionKey

PartitionSet = frozenset[PartitionKey]


class PartitionSets:
    """object id -> `Known` (which partitions reference it), at most `max_objects` (least
    recently used go first). Equal sets are shared: objects written close together mostly
    hold the same partitions."""

    def __init__(self, max_objects: int) -> None:
        self._max_objects = max_objects
        self._known: collections.OrderedDict[str, Known] = collections.OrderedDict()
        self._interned: dict[PartitionSet, PartitionSet] = {}

    def get(self, object_id: str) -> Known | None:
        found = self._known.get(object_id)
        if found is not None:
            self._known.move_to_end(object_id)
        return found

    def put(self, object_id: str, committed: Iterable[PartitionKey], maybe: Iterable[PartitionKey]) -> Known:
        known = Known(self._intern(committed), self._intern(maybe))
        self._known[object_id] = known
        self._known.move_to_end(object_id)
        while len(self._known) > self._max_objects:
            self._known.popitem(last=False)
        if len(self._interned) > 4 * self._max_objects:
            self._interned = {}
            for kept in self._known.values():
                self._intern(kept.committed)
                self._intern(kept.maybe)
        return known

    def _intern(self, partitions: Iterable[PartitionKey]) -> PartitionSet:
        as_set = frozenset(partitions)
        return self._interned.setdefault(as_set, as_set)

    def forget(self, object_id: str) -> None:
        self._known.pop(object_id, None)

    def __len__(self) -> int:
        return len(self._known)


async def read_partitions(store: ObjectReader, key: str, size: int) -> list[PartitionKey]:
    """The partitions in the object at `key` (of `size` bytes), from its index. Raises the
    store's errors (NotFound: it is gone) and WalFormatError for an object that is not a WAL
    object this broker can read."""
    start, end = tail_range(size)
    tail = await store.get(key, start, end)
    footer, index = index_from_tail(tail, size)
    if index is None:
        index_start, index_end = footer.index_range
        index = decode_index(await store.get(key, index_start, index_end), footer)
    return [(str(topic_id), partition) for topic_id, partition in index.partition_keys()]
