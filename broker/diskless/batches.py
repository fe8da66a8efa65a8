"""Partition-log entries back into the Kafka batches they stand for.

A RECORDS entry is the batch itself. A COORDINATES entry is the batch's authoritative 61-byte
header (offsets, leader epoch, any LogAppendTime stamp as committed) plus where the bytes are;
its batch is that header followed by the WAL object's bytes after the first 61. All
COORDINATES entries of one call are read together, so batches of one WAL object share
coalesced GETs.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..log import EntryKind, LogEntry
from ..log.coordinates import decode_ref
from ..protocol.batch import BATCH_HEADER_SIZE
from .reader import ReadFailure, WalReader

Pieces = list[memoryview | bytes]  # a batch as buffers to concatenate


async def batch_pieces(reader: WalReader, entries: Sequence[LogEntry]) -> list[Pieces | ReadFailure]:
    """One outcome per entry, in order: the buffers of its batch (empty for kinds that are
    not batches), or the reader's error for a batch that could not be read (ObjectStoreError,
    WalReadError). A failure touches only the entries whose bytes it concerns."""
    refs = [decode_ref(e.payload) for e in entries if e.kind == EntryKind.COORDINATES]
    bodies = iter(await reader.read_each(refs)) if refs else iter(())
    pieces: list[Pieces | ReadFailure] = []
    for entry in entries:
        if entry.kind == EntryKind.RECORDS:
            pieces.append([entry.data])
        elif entry.kind == EntryKind.COORDINATES:
            body = next(bodies)
            pieces.append(body if isinstance(body, Exception) else
                          [entry.data[:BATCH_HEADER_SIZE], body[BATCH_HEADER_SIZE:]])
        else:
            pieces.append([])
    return pieces
