"""The WAL object format: many partitions' record batches in one immutable object.

A WAL object is written by one broker in one PUT and never modified. It holds the batches'
ORIGINAL bytes, back to back and unmodified (Kafka v2 record batches as producers sent them;
the broker patches baseOffset/partitionLeaderEpoch in its copy when serving a fetch), followed
by an index and a fixed-size footer at the very end. Layout (big-endian, version 1):

    header   8 bytes    magic b"SHWL", u16 format_version, u16 flags (0)
    batches  n bytes    batch after batch, starting at offset 8
    index    m bytes    msgpack (msgspec) `WalIndex`, CRC32C in the footer
    footer  32 bytes    u64 index_offset, u32 index_length, u32 index_crc32c, u32 batch_count,
                        u16 flags (0), u32 footer_crc32c, u16 format_version, magic b"SHWL"

The footer's last 6 bytes (version, magic) are the same in every format version, so a reader
can always name the version it does not know. `footer_crc32c` covers every other footer byte,
so a version number is believed only when the footer is intact, and a corrupt footer is never
mistaken for a newer one.

Reading the index alone (WAL file manager, tooling): fetch a generous tail (`tail_range`,
64 KiB by default) with one ranged GET, then `index_from_tail`; only when the index is larger
than the tail does the caller issue a second GET for `footer.index_range`, then `decode_index`.
The fetch path never reads the index: a partition log entry already holds the batch's
coordinates (object key, byte offset, byte length) and its 61-byte header.

What the index stores per batch: topic id, partition, byte offset, byte length, record count.
Header fields (producer id/epoch, base sequence, last offset delta, timestamps) are NOT
repeated here: the commit carries the full 61-byte header from the representative, which has
the batch in memory, and any later reader of the object has the batch bytes themselves. Keeping
the index to ~11 bytes per batch keeps it inside one tail GET for typical objects.

Which layer catches what: this module checks the framing of the object (magic, version, footer
CRC32C, index CRC32C, bounds, and that the indexed batches tile the data region exactly). It
does not checksum the batch bytes: each batch carries its own CRC32C (Kafka's, bytes 21..end),
which the produce path verified before the batch was buffered and which consumers verify
again. A flipped byte inside a batch is therefore caught by the batch CRC (or, for the
baseOffset/batchLength/partitionLeaderEpoch fields outside that CRC, by the batchLength check
against the coordinates and by the patching on fetch), not by the WAL format.

Nothing here does I/O or touches records: a batch costs one 61-byte header parse on append.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import crc32c
import msgspec

from broker.protocol.batch import LOG_OVERHEAD, MAGIC_V2, BatchFormatError, parse_header

MAGIC = b"SHWL"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = frozenset({FORMAT_VERSION})
INDEX_VERSION = 1
SUPPORTED_INDEX_VERSIONS = frozenset({INDEX_VERSION})

_HEADER = struct.Struct(">4sHH")
HEADER_SIZE = _HEADER.size  # 8
DATA_START = HEADER_SIZE  # byte offset of the first batch

_FOOTER_BODY = struct.Struct(">QIIIH")  # index_offset, index_length, index_crc32c, batch_count, flags
_FOOTER_CRC = struct.Struct(">I")
_FOOTER_TRAILER = struct.Struct(">H4s")  # format_version, magic: identical in every version
FOOTER_SIZE = _FOOTER_BODY.size + _FOOTER_CRC.size + _FOOTER_TRAILER.size  # 32
TRAILER_SIZE = _FOOTER_TRAILER.size  # 6

MIN_OBJECT_SIZE = HEADER_SIZE + FOOTER_SIZE
DEFAULT_TAIL_BYTES = 64 << 10
# S3's limit for a single PUT. `wal.buffer.max.bytes` (8 MiB by default) is the real bound;
# this one only stops a caller bug from building an object no store would accept.
MAX_OBJECT_BYTES = 5 << 30
MAX_INDEX_BYTES = 0xFFFFFFFF
MAX_PARTITION = 2**31 - 1


# --- errors -----------------------------------------------------------------------------------


class WalFormatError(ValueError):
    """The bytes are not a readable WAL object. Never retriable: objects are immutable, so
    reading the same bytes again gives the same answer."""

    retriable = False


class TruncatedObjectError(WalFormatError):
    """Fewer bytes than the format needs (a cut object, or a tail shorter than the footer)."""


class BadMagicError(WalFormatError):
    """The header or footer magic is not b"SHWL": not a WAL object, or cut short."""


class UnsupportedVersionError(WalFormatError):
    """A format or index version this code does not know (written by a newer broker?)."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


class ChecksumMismatchError(WalFormatError):
    """The footer or index CRC32C does not match: corrupt bytes."""


class CorruptIndexError(WalFormatError):
    """An intact-looking footer or index that is inconsistent: ranges outside the object,
    overlapping or missing batches, counts that disagree, undecodable msgpack."""


# --- index ------------------------------------------------------------------------------------


class IndexBatch(msgspec.Struct, array_like=True, frozen=True):
    """One batch of a partition inside the object (msgpack array [offset, length, record_count])."""

    offset: int  # byte offset of the batch inside the object
    length: int  # byte length of the batch (= its batchLength + 12)
    record_count: int


class IndexPartition(msgspec.Struct, array_like=True, frozen=True):
    """A partition's batches in this object, in the order they were appended (= offset order)."""

    topic_id: uuid.UUID  # 16 raw bytes in msgpack
    partition: int
    batches: list[IndexBatch]


class IndexEntry(msgspec.Struct, frozen=True):
    """A flat view of one batch: what `WalIndex.entries()` returns (not part of the encoding)."""

    topic_id: uuid.UUID
    partition: int
    offset: int
    length: int
    record_count: int

    @property
    def end(self) -> int:
        return self.offset + self.length


class WalIndex(msgspec.Struct, array_like=True, frozen=True):
    """The index of a WAL object: partitions sorted by (topic id bytes, partition)."""

    version: int
    partitions: list[IndexPartition]

    @property
    def batch_count(self) -> int:
        return sum(len(p.batches) for p in self.partitions)

    def entries(self) -> list[IndexEntry]:
        """Every batch, in object order (ascending byte offset)."""
        out = [
            IndexEntry(p.topic_id, p.partition, b.offset, b.length, b.record_count)
            for p in self.partitions
            for b in p.batches
        ]
        out.sort(key=lambda e: e.offset)
        return out

    def partition_keys(self) -> list[tuple[uuid.UUID, int]]:
        """The (topic id, partition) pairs with at least one batch in the object."""
        return [(p.topic_id, p.partition) for p in self.partitions]

    def batches_of(self, topic_id: uuid.UUID, partition: int) -> list[IndexBatch]:
        """One partition's batches in append order; [] when it has none here."""
        for p in self.partitions:
            if p.partition == partition and p.topic_id == topic_id:
                return list(p.batches)
        return []


class _VersionOnly(msgspec.Struct, array_like=True):
    version: int


_INDEX_ENCODER = msgspec.msgpack.Encoder(uuid_format="bytes")
_INDEX_DECODER = msgspec.msgpack.Decoder(WalIndex)
_VERSION_DECODER = msgspec.msgpack.Decoder(_VersionOnly)


# --- footer -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Footer:
    version: int
    index_offset: int
    index_length: int
    index_crc32c: int
    batch_count: int

    @property
    def index_range(self) -> tuple[int, int]:
        """[start, end) of the index inside the object, for a ranged GET."""
        return self.index_offset, self.index_offset + self.index_length

    @property
    def data_end(self) -> int:
        """End of the batch region (= start of the index)."""
        return self.index_offset


def _encode_footer(index_offset: int, index_length: int, index_crc: int, batch_count: int) -> bytes:
    body = _FOOTER_BODY.pack(index_offset, index_length, index_crc, batch_count, 0)
    trailer = _FOOTER_TRAILER.pack(FORMAT_VERSION, MAGIC)
    crc = crc32c.crc32c(trailer, crc32c.crc32c(body))
    return body + _FOOTER_CRC.pack(crc) + trailer


def tail_range(object_size: int, tail_bytes: int = DEFAULT_TAIL_BYTES) -> tuple[int, int]:
    """[start, end) of the tail to fetch first (S3: the same as `Range: bytes=-tail_bytes`)."""
    if object_size < 0 or tail_bytes < FOOTER_SIZE:
        raise ValueError(f"need object_size >= 0 and tail_bytes >= {FOOTER_SIZE}")
    return max(0, object_size - tail_bytes), object_size


def parse_footer(tail: bytes | bytearray | memoryview, object_size: int) -> Footer:
    """Parse and validate the footer from the last `len(tail)` bytes of an object of
    `object_size` bytes. Checks magic, version, footer CRC32C and that the index lies between
    the header and the footer; raises a WalFormatError subclass otherwise."""
    if len(tail) > object_size:
        raise ValueError(f"tail of {len(tail)} bytes is longer than the object ({object_size} bytes)")
    if object_size < MIN_OBJECT_SIZE:
        raise TruncatedObjectError(
            f"WAL object of {object_size} bytes is shorter than header + footer ({MIN_OBJECT_SIZE} bytes)"
        )
    if len(tail) < FOOTER_SIZE:
        raise TruncatedObjectError(f"tail of {len(tail)} bytes is shorter than the {FOOTER_SIZE}-byte footer")
    view = memoryview(tail)[len(tail) - FOOTER_SIZE :]
    version, magic = _FOOTER_TRAILER.unpack_from(view, FOOTER_SIZE - TRAILER_SIZE)
    if magic != MAGIC:
        raise BadMagicError(
            f"no WAL footer: the last 4 bytes are {bytes(magic)!r}, not {MAGIC!r} "
            "(truncated object, or not a WAL object)"
        )
    body = view[: _FOOTER_BODY.size]
    (stored_crc,) = _FOOTER_CRC.unpack_from(view, _FOOTER_BODY.size)
    crc = crc32c.crc32c(view[FOOTER_SIZE - TRAILER_SIZE :], crc32c.crc32c(body))
    if version not in SUPPORTED_VERSIONS:
        # A newer format may lay its footer out differently, so its CRC cannot be checked here.
        raise UnsupportedVersionError(
            f"WAL object format version {version} is not supported (this broker reads "
            f"{sorted(SUPPORTED_VERSIONS)}); written by a newer broker?"
            + ("" if crc == stored_crc else " (or a corrupt footer: its v1 CRC32C does not match)"),
            version,
        )
    if crc != stored_crc:
        raise ChecksumMismatchError(f"WAL footer CRC32C mismatch (stored {stored_crc:#010x}, computed {crc:#010x})")
    index_offset, index_length, index_crc, batch_count, flags = _FOOTER_BODY.unpack_from(body)
    if flags != 0:
        raise CorruptIndexError(f"WAL footer flags {flags:#06x} must be 0 in format version {version}")
    if index_offset < DATA_START or index_offset + index_length != object_size - FOOTER_SIZE:
        raise CorruptIndexError(
            f"WAL footer places the index at [{index_offset}, {index_offset + index_length}), which is not "
            f"between the header ({DATA_START}) and the footer ({object_size - FOOTER_SIZE}) of a "
            f"{object_size}-byte object (truncated or wrong object size?)"
        )
    return Footer(version, index_offset, index_length, index_crc, batch_count)


def decode_index(data: bytes | bytearray | memoryview, footer: Footer) -> WalIndex:
    """Verify the index bytes against the footer (length, CRC32C) and decode them.

    Also checks that the index is internally consistent: known version, partitions sorted and
    unique, batch count as in the footer, and the batches tiling [DATA_START, index_offset)
    exactly (no gap, no overlap, nothing outside the object)."""
    if len(data) != footer.index_length:
        raise TruncatedObjectError(f"WAL index is {len(data)} bytes, the footer says {footer.index_length}")
    crc = crc32c.crc32c(data)
    if crc != footer.index_crc32c:
        raise ChecksumMismatchError(
            f"WAL index CRC32C mismatch (stored {footer.index_crc32c:#010x}, computed {crc:#010x})"
        )
    try:
        version = _VERSION_DECODER.decode(data).version
    except msgspec.DecodeError as e:
        raise CorruptIndexError(f"WAL index does not decode: {e}") from None
    if version not in SUPPORTED_INDEX_VERSIONS:
        raise UnsupportedVersionError(
            f"WAL index version {version} is not supported (this broker reads "
            f"{sorted(SUPPORTED_INDEX_VERSIONS)}); written by a newer broker?",
            version,
        )
    try:
        index = _INDEX_DECODER.decode(data)
    except msgspec.DecodeError as e:
        raise CorruptIndexError(f"WAL index does not decode: {e}") from None
    _check_index(index, footer)
    return index


def _check_index(index: WalIndex, footer: Footer) -> None:
    previous: tuple[bytes, int] | None = None
    spans: list[tuple[int, int]] = []
    for p in index.partitions:
        key = (p.topic_id.bytes, p.partition)
        if not 0 <= p.partition <= MAX_PARTITION:
            raise CorruptIndexError(f"WAL index has partition {p.partition} of topic {p.topic_id}")
        if previous is not None and key <= previous:
            raise CorruptIndexError("WAL index partitions are not sorted and unique")
        previous = key
        if not p.batches:
            raise CorruptIndexError(f"WAL index lists {p.topic_id}/{p.partition} with no batches")
        for b in p.batches:
            if b.length <= 0 or b.record_count < 0:
                raise CorruptIndexError(
                    f"WAL index batch of {p.topic_id}/{p.partition} has length {b.length}, "
                    f"record count {b.record_count}"
                )
            spans.append((b.offset, b.length))
    if len(spans) != footer.batch_count:
        raise CorruptIndexError(f"WAL index lists {len(spans)} batches, the footer says {footer.batch_count}")
    spans.sort()
    position = DATA_START
    for offset, length in spans:
        if offset != position:
            raise CorruptIndexError(
                f"WAL index batch at byte {offset} does not follow the previous one (expected {position}): "
                "batches must tile the data region"
            )
        position += length
    if position != footer.index_offset:
        raise CorruptIndexError(
            f"WAL index batches end at byte {position}, but the index starts at {footer.index_offset}"
        )


def index_from_tail(tail: bytes | bytearray | memoryview, object_size: int) -> tuple[Footer, WalIndex | None]:
    """Footer, and the index when `tail` (the object's last bytes) contains all of it.

    When the index is None the caller fetches `footer.index_range` and calls `decode_index`.
    """
    footer = parse_footer(tail, object_size)
    tail_start = object_size - len(tail)
    if footer.index_offset < tail_start:
        return footer, None
    start = footer.index_offset - tail_start
    view = memoryview(tail)[start : start + footer.index_length]
    return footer, decode_index(view, footer)


def read_object(data: bytes | bytearray | memoryview) -> tuple[WalIndex, memoryview]:
    """Validate a whole object and return its index and a view of it (batches are sliced
    from the view by their coordinates, without copying)."""
    view = memoryview(data)
    footer = parse_footer(view, len(view))
    magic, version, flags = _HEADER.unpack_from(view, 0)
    if magic != MAGIC:
        raise BadMagicError(f"WAL object starts with {bytes(magic)!r}, not {MAGIC!r}")
    if version != footer.version or flags != 0:
        raise CorruptIndexError(
            f"WAL header (version {version}, flags {flags:#06x}) disagrees with the footer "
            f"(version {footer.version}, flags 0)"
        )
    start, end = footer.index_range
    return decode_index(view[start:end], footer), view


# --- builder ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchCoordinates:
    """Where one batch lives inside its WAL object (the object key is the caller's)."""

    offset: int
    length: int

    @property
    def end(self) -> int:
        return self.offset + self.length


Buffer = bytes | bytearray | memoryview


class WalObjectBuilder:
    """Accumulates batches of many partitions and builds one WAL object.

    `append` keeps a reference to the caller's buffer, it does not copy: the caller must not
    mutate it afterwards (request bytes are immutable `bytes` in the produce path). `size` is
    the object size so far without index and footer, which is what `wal.buffer.max.bytes`
    bounds; the index adds about 11 bytes per batch and 25 per partition, the footer 32.
    `buffers()`/`build()` seal the builder: later appends raise.
    """

    def __init__(self, max_object_bytes: int = MAX_OBJECT_BYTES) -> None:
        if max_object_bytes < MIN_OBJECT_SIZE:
            raise ValueError(f"max_object_bytes must be >= {MIN_OBJECT_SIZE}, got {max_object_bytes}")
        self._max_object_bytes = max_object_bytes
        self._header = _HEADER.pack(MAGIC, FORMAT_VERSION, 0)
        self._batches: list[Buffer] = []
        self._partitions: dict[tuple[uuid.UUID, int], list[IndexBatch]] = {}
        self._size = HEADER_SIZE
        self._tail: bytes | None = None

    @property
    def size(self) -> int:
        """Header plus batch bytes appended so far (excludes the index and footer)."""
        return self._size

    @property
    def batch_count(self) -> int:
        return len(self._batches)

    @property
    def sealed(self) -> bool:
        return self._tail is not None

    def append(self, topic_id: uuid.UUID, partition: int, batch: Buffer) -> BatchCoordinates:
        """Add one v2 record batch of `topic_id`/`partition`; return its coordinates.

        Only the header is looked at (framing: length, batchLength, magic; and recordsCount
        for the index). The produce path has validated the batch (CRC, sizes) already.
        """
        if self._tail is not None:
            raise RuntimeError("WAL object builder is sealed: no appends after buffers()/build()")
        if not isinstance(topic_id, uuid.UUID):
            raise TypeError(f"topic_id must be uuid.UUID, not {type(topic_id).__name__}")
        if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition <= MAX_PARTITION:
            raise ValueError(f"partition must be an int in [0, {MAX_PARTITION}], got {partition!r}")
        length = len(batch) if not isinstance(batch, memoryview) else batch.nbytes
        try:
            header = parse_header(batch)
        except BatchFormatError as e:
            raise ValueError(f"not a record batch: {e}") from None
        if header.size != length or header.magic != MAGIC_V2 or header.records_count < 0:
            raise ValueError(
                f"not a single v2 record batch: {length} bytes, batchLength {header.batch_length} "
                f"(+{LOG_OVERHEAD}), magic {header.magic}, recordsCount {header.records_count}"
            )
        if self._size + length > self._max_object_bytes:
            raise ValueError(
                f"batch of {length} bytes would make the WAL object larger than {self._max_object_bytes} bytes"
            )
        coordinates = BatchCoordinates(self._size, length)
        self._batches.append(batch)
        entry = IndexBatch(self._size, length, header.records_count)
        self._partitions.setdefault((topic_id, partition), []).append(entry)
        self._size += length
        return coordinates

    def index(self) -> WalIndex:
        """The index as it would be written now."""
        keys = sorted(self._partitions, key=lambda k: (k[0].bytes, k[1]))
        return WalIndex(
            INDEX_VERSION,
            [IndexPartition(t, p, list(self._partitions[(t, p)])) for t, p in keys],
        )

    def buffers(self) -> list[Buffer]:
        """Seal and return the object as buffers to send in order (no join, no copy of the
        batches). Calling it again returns the same object."""
        if self._tail is None:
            index = _INDEX_ENCODER.encode(self.index())
            if len(index) > MAX_INDEX_BYTES:
                raise ValueError(f"WAL index of {len(index)} bytes exceeds {MAX_INDEX_BYTES}")
            self._tail = index + _encode_footer(self._size, len(index), crc32c.crc32c(index), len(self._batches))
        return [self._header, *self._batches, self._tail]

    def build(self) -> bytes:
        """Seal and return the whole object as one bytes (one copy of everything)."""
        return b"".join(self.buffers())

    @property
    def object_size(self) -> int | None:
        """The built object's size once sealed, else None."""
        return None if self._tail is None else self._size + len(self._tail)


# --- coalesced reads --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CoalescedRange:
    """One ranged GET [start, end) covering the requested ranges at `members` (input indices,
    ascending by start)."""

    start: int
    end: int
    members: list[int] = field(default_factory=list)


def coalesce(
    ranges: Sequence[tuple[int, int]],
    max_gap: int,
    max_bytes: int | None = None,
) -> list[CoalescedRange]:
    """Group half-open byte ranges [start, end) into as few GETs as possible.

    Ranges are sorted by start. A range joins the current group when it overlaps it (so GETs
    never overlap), or when the gap between the group's end and its start is at most `max_gap`
    (gap bytes are read and thrown away) and, if `max_bytes` is given, the grown group would
    not exceed `max_bytes`. A single range longer than `max_bytes` still gets its own GET; a
    group exceeds `max_bytes` only through overlapping inputs (batches in one WAL object never
    overlap). Returns groups in ascending, disjoint order. Pure: no I/O.
    """
    if max_gap < 0:
        raise ValueError(f"max_gap must be >= 0, got {max_gap}")
    if max_bytes is not None and max_bytes <= 0:
        raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
    for i, (start, end) in enumerate(ranges):
        if start < 0 or end < start:
            raise ValueError(f"range {i} is [{start}, {end}): need 0 <= start <= end")
    order = sorted(range(len(ranges)), key=lambda i: (ranges[i][0], ranges[i][1]))
    groups: list[CoalescedRange] = []
    for i in order:
        start, end = ranges[i]
        if groups:
            last = groups[-1]
            new_end = max(last.end, end)
            overlaps = start < last.end
            fits = max_bytes is None or new_end - last.start <= max_bytes
            if overlaps or (start - last.end <= max_gap and fits):
                last.members.append(i)
                groups[-1] = CoalescedRange(last.start, new_end, last.members)
                continue
        groups.append(CoalescedRange(start, end, [i]))
    return groups


def coalesce_coordinates(
    coordinates: Iterable[BatchCoordinates],
    max_gap: int,
    max_bytes: int | None = None,
) -> list[CoalescedRange]:
    """`coalesce` over batch coordinates (members are indices into `coordinates`)."""
    return coalesce([(c.offset, c.end) for c in coordinates], max_gap, max_bytes)
