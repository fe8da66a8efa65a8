"""The aborted-transaction index: Kafka's `.txnindex`, one file per log segment.

Each entry records one aborted transaction, in the segment where its ABORT marker was
appended, in marker order. Layout (Kafka's `AbortedTxn`, big-endian, 34 bytes)::

    0  version             int16  0
    2  producer_id         int64
   10  first_offset        int64  the transaction's first offset
   18  last_offset         int64  the ABORT marker's offset
   26  last_stable_offset  int64  the partition's last stable offset right after the abort

A read_committed fetch asks for the aborted transactions that overlap the offsets it returns
(`collect`, Kafka's `TransactionIndex.collectAbortedTxns`, walking segments from the one
holding the fetch offset until an entry's last stable offset reaches the upper bound).

Lifecycle, as the offset index's: the file of a segment is created with the segment (empty),
appended to only while the segment is active, fsynced when the segment is sealed, cut back
with the log (`truncate_from`, entries whose marker is dropped) and deleted with the segment
(Segment.delete_files, retention and DeleteRecords included). At open a corrupt file (size
not a multiple of 34, an unknown version, entries outside the segment or out of order) or a
missing one in a directory that has any, is rebuilt: the partition reloads producer state
from a snapshot at or below that segment and replays the log from there
(`Partition._rebuild_producer_state`), which appends the aborts again. A directory with no
`.txnindex` file at all was written before transactions existed (no transaction could be
aborted): its segments get empty files.

The in-memory copy (a few entries per segment) answers fetches without reading the files.
A tiered segment carries the entries whose marker lies in its range as its own `.txnindex`
(KIP-405's `TRANSACTION_INDEX`, `markers_in` when planned), so the index outlives the local
segment; reads below the local log walk the tiered indexes, then this one
(broker/tiering/reader.py).
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from broker.log.segment import TXNINDEX_SUFFIX, parse_segment_name, segment_name

log = logging.getLogger(__name__)

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
VERSION = 0


class TxnIndexCorruptError(ValueError):
    """A `.txnindex` file that cannot be trusted; the index is rebuilt from the log."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int


def encode_entries(txns: list[AbortedTxn]) -> bytes:
    return b"".join(
        ENTRY.pack(VERSION, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset) for t in txns
    )


def decode_entries(data: bytes, base_offset: int = 0, next_offset: int | None = None) -> list[AbortedTxn]:
    """The entries of one file (TxnIndexCorruptError when it cannot be trusted)."""
    if len(data) % ENTRY_SIZE:
        raise TxnIndexCorruptError(f"{len(data)} bytes is not a whole number of {ENTRY_SIZE}-byte entries")
    out: list[AbortedTxn] = []
    for pos in range(0, len(data), ENTRY_SIZE):
        version, pid, first, last, lso = ENTRY.unpack_from(data, pos)
        if version != VERSION:
            raise TxnIndexCorruptError(f"entry version {version} at position {pos} (this broker reads {VERSION})")
        if last < base_offset or (next_offset is not None and last >= next_offset) or first > last:
            raise TxnIndexCorruptError(f"entry at position {pos} (offsets {first}..{last}) is outside the segment")
        if out and last <= out[-1].last_offset:
            raise TxnIndexCorruptError(f"entry at position {pos} is out of order")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TxnIndex:
    """The aborted transactions of one partition log, per segment (base offset)."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._bases: list[int] = []  # sorted
        self._entries: dict[int, list[AbortedTxn]] = {}

    def path(self, base_offset: int) -> Path:
        return self._dir / (segment_name(base_offset) + TXNINDEX_SUFFIX)

    @classmethod
    def open(cls, directory: Path, segment_bases: list[int]) -> tuple["TxnIndex", int | None]:
        """Load the files of the log's segments. Returns the index and the offset from which
        it must be rebuilt by replaying the log (None: every file was usable); the caller
        drops what lies above it (`truncate_from`) before replaying."""
        index = cls(directory)
        present = {b for b in (_parse(n) for n in _names(directory)) if b is not None}
        legacy = not present  # written before transactions: nothing was ever aborted
        rebuild_from: int | None = None
        for i, base in enumerate(segment_bases):
            next_base = segment_bases[i + 1] if i + 1 < len(segment_bases) else None
            entries: list[AbortedTxn] = []
            if base not in present:
                if not legacy and rebuild_from is None:
                    log.warning(
                        "%s is missing: rebuilding the transaction index from offset %d", index.path(base), base
                    )
                    rebuild_from = base
                _create_empty(index.path(base))
            else:
                try:
                    entries = decode_entries(index.path(base).read_bytes(), base, next_base)
                except TxnIndexCorruptError as exc:
                    log.warning("%s is corrupt (%s): rebuilding the transaction index", index.path(base), exc)
                    rebuild_from = base if rebuild_from is None else min(rebuild_from, base)
                    os.truncate(index.path(base), 0)  # the replay appends its entries again
            index._bases.append(base)
            index._entries[base] = entries
        for base in present - set(segment_bases):  # left by a crash between two unlinks
            index.path(base).unlink(missing_ok=True)
        return index, rebuild_from

    # --- changes ------------------------------------------------------------------------------

    def ensure(self, base_offset: int) -> None:
        """A new segment: its (empty) file exists from now on."""
        if base_offset not in self._entries:
            bisect.insort(self._bases, base_offset)
            self._entries[base_offset] = []
        if not self.path(base_offset).exists():
            _create_empty(self.path(base_offset))

    def append(self, segment_base: int, txn: AbortedTxn) -> None:
        """An ABORT marker at `txn.last_offset`, in the segment starting at `segment_base`."""
        self.ensure(segment_base)
        entries = self._entries[segment_base]
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(f"aborted transaction at {txn.last_offset} is not after {entries[-1].last_offset}")
        fd = os.open(self.path(segment_base), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            data = encode_entries([txn])
            if os.write(fd, data) != len(data):
                raise OSError(f"short write to {self.path(segment_base)}")
        finally:
            os.close(fd)
        entries.append(txn)

    def truncate_from(self, offset: int) -> None:
        """Drop the entries whose marker is at or above `offset` (the log was cut there, or
        the index is rebuilt from there)."""
        for base in reversed(self._bases):
            entries = self._entries[base]
            if not entries or entries[-1].last_offset < offset:
                if base <= offset:
                    break
                continue
            kept = [t for t in entries if t.last_offset < offset]
            self._entries[base] = kept
            path = self.path(base)
            if path.exists():
                os.truncate(path, len(kept) * ENTRY_SIZE)

    def retain(self, segment_bases: list[int]) -> None:
        """Forget the segments the log no longer has (their files went with them)."""
        if self._bases == segment_bases:
            return
        keep = set(segment_bases)
        for base in self._bases:
            if base not in keep:
                del self._entries[base]
        self._bases = [b for b in self._bases if b in keep]

    def flush(self, base_offset: int) -> None:
        """fsync one segment's file (when the segment is sealed)."""
        if not self._entries.get(base_offset):
            return
        try:
            fd = os.open(self.path(base_offset), os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # --- reads --------------------------------------------------------------------------------

    def entries(self, base_offset: int) -> list[AbortedTxn]:
        return list(self._entries.get(base_offset, ()))

    def all_entries(self) -> list[AbortedTxn]:
        return [t for base in self._bases for t in self._entries[base]]

    def markers_in(self, base_offset: int, next_offset: int) -> list[AbortedTxn]:
        """The entries whose ABORT marker lies in [base_offset, next_offset): the index of a
        tiered segment of that range, whatever the local segment boundaries."""
        return [t for t in self.all_entries() if base_offset <= t.last_offset < next_offset]

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset): from the
        segment holding `fetch_offset` on, until an entry's last stable offset reaches the
        upper bound (Kafka's collectAbortedTxns)."""
        out: list[AbortedTxn] = []
        start = max(bisect.bisect_right(self._bases, fetch_offset) - 1, 0)
        for base in self._bases[start:]:
            if collect_overlapping(self._entries[base], fetch_offset, upper_bound_offset, out):
                break
        return out


def collect_overlapping(
    entries: list[AbortedTxn], fetch_offset: int, upper_bound_offset: int, out: list[AbortedTxn]
) -> bool:
    """Add to `out` the entries of one segment's index (local or tiered) that overlap
    [fetch_offset, upper_bound_offset); True once an entry's last stable offset reaches the
    upper bound: no later segment can hold an overlapping one (Kafka's TxnIndexSearchResult)."""
    for txn in entries:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
            out.append(txn)
        if txn.last_stable_offset >= upper_bound_offset:
            return True
    return False


def _names(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def _parse(name: str) -> int | None:
    if not name.endswith(TXNINDEX_SUFFIX):
        return None
    return parse_segment_name(name[: -len(TXNINDEX_SUFFIX)] + ".log")


def _create_empty(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
