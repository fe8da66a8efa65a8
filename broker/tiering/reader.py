"""Reads from tiered segments: what Fetch and ListOffsets serve below a partition's local log.

A read finds its start in the segment's offset index (GET whole once, then cached), reads the
`.log` from there in aligned 8 MiB blocks (one ranged GET each, cached in the broker's object
cache like WAL objects, single flight across concurrent readers), and returns
the complete batches from the one holding the offset, KIP-74-sized: the first batch whole,
then up to `max_bytes`. No record is decoded. Any broker that reaches the store can read: a
follower or a stateless broker serves its own AZ without a byte crossing zones.

For read_committed, the aborted transactions of a range below the local log come from the
tiered segments' `.txnindex` files (GET whole once, cached; never for a segment whose marker
says it has none), from the segment holding the fetch offset on, then from the local index,
as Kafka's RemoteLogManager.collectAbortedTransactions.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.wal.cache import ObjectCache
from broker.log.remote_segments import RemoteSegment
from broker.log.txn_index import AbortedTxn, TxnIndexCorruptError, collect_overlapping, decode_entries
from broker.objectstore.store import ObjectReader
from broker.protocol.batch import BatchHeader
from tiering.segment import lookup_position, lookup_timestamp, split_log
from walfiles.keys import SegmentFile, format_tiered_segment_key

if TYPE_CHECKING:
    from broker.partition import Partition

BLOCK_BYTES = 8 << 20  # a .log is read in aligned blocks of this size, each GET once and cached
MIN_READ_BYTES = 256 << 10  # what a read asks for at least, from the batch holding its offset
MAX_STEPS = 64  # reads one fetch may chain (a batch larger than the first read, an index gap)


class TieredReadError(Exception):
    """The segment's files are not what its marker says (shorter, or not Kafka batches)."""

    retriable = False


class TieredReader:
    def __init__(
        self,
        store: ObjectReader,
        cluster_id: Callable[[], str],
        cache: ObjectCache,
        on_get: Callable[[int], None] | None = None,
    ) -> None:
        self._store = store
        self._cluster_id = cluster_id
        self._cache = cache
        self._on_get = on_get
        self._in_flight: dict[tuple[str, int, int], asyncio.Future[bytes]] = {}

    def key(self, topic_id: str, partition: int, segment: RemoteSegment, file: SegmentFile) -> str:
        return format_tiered_segment_key(
            "",
            self._cluster_id(),
            uuid.UUID(topic_id),
            partition,
            segment.base_offset,
            uuid.UUID(segment.segment_id),
            file,
        )

    async def _get(self, key: str, start: int, end: int) -> memoryview:
        """[start, end) of an object, from the cache or one GET (single flight: readers of the
        same range wait for the GET in flight)."""
        cached = self._cache.get(key, start, end)
        if cached is not None:
            return cached
        flight = self._in_flight.get((key, start, end))
        if flight is None:
            flight = asyncio.ensure_future(self._fetch(key, start, end))
            self._in_flight[(key, start, end)] = flight
            flight.add_done_callback(lambda _: self._in_flight.pop((key, start, end), None))
        return memoryview(await asyncio.shield(flight))

    async def _fetch(self, key: str, start: int, end: int) -> bytes:
        data = await self._store.get(key, start, end)
        if self._on_get is not None:
            self._on_get(len(data))
        self._cache.put_range(key, start, data)
        return data

    async def _read_log(self, key: str, size: int, start: int, end: int) -> memoryview:
        """[start, end) of a .log of `size` bytes, through aligned blocks: consumers reading on
        (and several at once) hit blocks already read, so a segment costs size / BLOCK_BYTES
        GETs whatever the fetch sizes. With a cache too small to keep blocks, exactly the range."""
        if self._cache.max_bytes < 4 * BLOCK_BYTES:
            return await self._get(key, start, end)
        first, last = start // BLOCK_BYTES, (max(end, start + 1) - 1) // BLOCK_BYTES
        blocks = await asyncio.gather(
            *(self._get(key, b * BLOCK_BYTES, min(size, (b + 1) * BLOCK_BYTES)) for b in range(first, last + 1))
        )
        offset = start - first * BLOCK_BYTES
        if len(blocks) == 1:
            return blocks[0][offset : offset + end - start]
        return memoryview(b"".join(blocks))[offset : offset + end - start]

    async def read(
        self, topic_id: str, partition: int, segment: RemoteSegment, offset: int, max_bytes: int
    ) -> list[tuple[BatchHeader, memoryview]]:
        """The batches from the one holding `offset` to the segment's end or `max_bytes`."""
        index = await self._get(
            self.key(topic_id, partition, segment, SegmentFile.OFFSET_INDEX), 0, segment.index_bytes
        )
        position = lookup_position(index, segment.base_offset, offset)
        log_key = self.key(topic_id, partition, segment, SegmentFile.LOG)
        found: list[tuple[BatchHeader, memoryview]] = []
        size = 0
        for _step in range(MAX_STEPS):
            if position >= segment.size_bytes:
                return found
            want = max(MIN_READ_BYTES, max_bytes - size)
            chunk = await self._read_log(
                log_key, segment.size_bytes, position, min(segment.size_bytes, position + want)
            )
            batches = split_log(chunk)
            if not batches:  # a batch larger than what we read: read exactly it
                if len(chunk) < 12:
                    raise TieredReadError(f"{log_key}: {len(chunk)} bytes at {position}, expected a batch")
                length = int.from_bytes(chunk[8:12], "big") + 12
                if position + length > segment.size_bytes:
                    raise TieredReadError(f"{log_key}: batch at {position} runs past the segment's end")
                chunk = await self._read_log(log_key, segment.size_bytes, position, position + length)
                batches = split_log(chunk)
            for at, header in batches:
                if header.last_offset < offset:
                    continue
                if found and size + header.size > max_bytes:
                    return found
                found.append((header, chunk[at : at + header.size]))
                size += header.size
            last_at, last = batches[-1]
            position += last_at + last.size
            if size >= max_bytes:
                return found
        return found

    async def txn_index(self, topic_id: str, partition: int, segment: RemoteSegment) -> list[AbortedTxn]:
        """The entries of a segment's `.txnindex` (none without a GET when it has no file)."""
        if not segment.txn_index_bytes:
            return []
        key = self.key(topic_id, partition, segment, SegmentFile.TXN_INDEX)
        data = await self._get(key, 0, segment.txn_index_bytes)
        try:
            return decode_entries(bytes(data), segment.base_offset, segment.next_offset)
        except TxnIndexCorruptError as exc:
            raise TieredReadError(f"{key}: {exc}") from None

    async def aborted_transactions(self, partition: Partition, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper), `fetch_offset` below
        the local log: the tiered indexes from the segment holding it up to the local log
        (the local index has the rest), then the local index; each once."""
        found: list[AbortedTxn] = []
        local_start = partition.log.log_start_offset
        for segment in partition.remote_segments.readable:
            if segment.base_offset >= local_start:
                break
            if segment.end_offset < fetch_offset:
                continue
            entries = await self.txn_index(partition.topic_id, partition.index, segment)
            if collect_overlapping(entries, fetch_offset, upper, found):
                return found
        found += partition.aborted_transactions(fetch_offset, upper)
        return list(dict.fromkeys(found))  # a segment both tiered and local lists its entries twice

    async def offset_for_timestamp(
        self, topic_id: str, partition: int, segment: RemoteSegment, timestamp_ms: int
    ) -> int:
        """Where to start looking for the first batch with a timestamp >= `timestamp_ms`."""
        time_index = await self._get(
            self.key(topic_id, partition, segment, SegmentFile.TIME_INDEX), 0, segment.time_index_bytes
        )
        return lookup_timestamp(time_index, segment.base_offset, timestamp_ms)
