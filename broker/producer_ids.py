"""Producer ids for idempotent producers, allocated in blocks through the metadata store.

A broker reserves `block_size` ids with one compare-and-set, then hands them out from
memory; a restart wastes at most the rest of one block, never reuses an id.
"""

from __future__ import annotations

from .metadata import MetadataStore, RevisionConflict
from .metadata import records

BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, store: MetadataStore, block_size: int = BLOCK_SIZE) -> None:
        self._store = store
        self._block_size = block_size
        self._next = 0
        self._end = 0

    async def next_id(self) -> int:
        if self._next >= self._end:
            await self._reserve_block()
        producer_id = self._next
        self._next += 1
        return producer_id

    async def _reserve_block(self) -> None:
        for _ in range(100):
            current = await self._store.get(records.PRODUCER_ID_KEY)
            start = records.decode(current.value, records.ProducerIdBlockRecord).next_producer_id if current else 0
            record = records.ProducerIdBlockRecord(records.RECORD_VERSION, start + self._block_size)
            try:
                await self._store.put(
                    records.PRODUCER_ID_KEY,
                    records.encode(record),
                    expected_revision=current.revision if current else 0,
                )
            except RevisionConflict:
                continue
            self._next, self._end = start, start + self._block_size
            return
        raise RuntimeError("could not reserve a producer id block: too much contention")
