"""Kafka's record-batch codecs, as byte streams: decompress in bounded chunks, compress in the
framing Kafka's own clients write.

The produce path decompresses a compressed batch to read its records' timestamps (Kafka's
LogValidator does the same) and, on a topic whose `compression.type` names another codec,
recompresses the same record bytes. A v2 batch's records section is one compressed stream of
the records as they would be uncompressed, so neither needs to look at records here.

Output comes in chunks (at most `CHUNK_BYTES`, or one snappy block), never the whole stream
at once, and decompression stops with
CodecError once the output passes `max_bytes`: a small batch that expands without end (a
decompression bomb) costs bounded memory and bounded time.

Formats, as Kafka reads and writes them (org.apache.kafka.common.compress):
- gzip: RFC 1952 members (java.util.zip's GZIP streams; several members are read in turn);
- snappy: snappy-java's stream framing (a 16-byte header `\\x82SNAPPY\\x00` + version, then
  blocks of [int32 length][raw snappy] holding 32 KiB each), or one raw snappy block, which
  snappy-java also reads (librdkafka writes that);
- lz4: the LZ4 frame format with independent 64 KiB blocks, no block or content checksum (Kafka's
  Lz4BlockOutputStream); level 9, Kafka's default, is lz4's fast mode, the others its HC levels;
- zstd: zstd frames (several are read in turn), levels -131072..22.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

CHUNK_BYTES = 256 * 1024  # decompressed bytes handed on at a time (except whole snappy blocks)


class Codec(IntEnum):
    """The batch attributes' compression bits (and Kafka's CompressionType ids)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CodecError(ValueError):
    """The bytes are not a stream of the batch's codec, or expand beyond the limit."""


def decompress(codec: Codec, data: bytes | memoryview, max_bytes: int) -> Iterator[bytes | memoryview]:
    """The decompressed stream in chunks; raises CodecError for a malformed or truncated stream
    and once more than `max_bytes` would come out (uncompressed records are passed on in
    chunks, whatever their size: they are bounded by the request already)."""
    if codec == Codec.NONE:
        yield from _identity(data)
        return
    chunks = _DECODERS[codec](data, max_bytes)
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > max_bytes:
            raise CodecError(f"the records decompress to more than {max_bytes} bytes")
        yield chunk


def _identity(data: bytes | memoryview) -> Iterator[bytes | memoryview]:
    for start in range(0, len(data), CHUNK_BYTES):
        yield data[start : start + CHUNK_BYTES]


def _gzip(data: bytes | memoryview, max_bytes: int) -> Iterator[bytes]:
    rest = bytes(data)
    first = True
    while first or rest:
        decoder = zlib.decompressobj(31)
        try:
            while not decoder.eof:
                out = decoder.decompress(rest, CHUNK_BYTES)
                rest = decoder.unconsumed_tail
                if out:
                    yield out
                elif not rest and not decoder.eof:
                    raise CodecError("gzip stream is truncated")
        except zlib.error as exc:
            if first:
                raise CodecError(f"not a gzip stream: {exc}") from None
            return  # bytes after a complete member that are not another: ignored, as java.util.zip does
        rest, first = decoder.unused_data, False


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16
_BLOCK_LENGTH = struct.Struct(">i")


def _snappy(data: bytes | memoryview, max_bytes: int) -> Iterator[bytes | memoryview]:
    view = memoryview(data)
    if bytes(view[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        yield _snappy_block(view, max_bytes, max_bytes)
        return
    if len(view) < _XERIAL_HEADER:
        raise CodecError("snappy stream is truncated")
    pos = _XERIAL_HEADER
    budget = max_bytes
    while pos < len(view):
        if len(view) - pos < 4:
            raise CodecError("snappy stream is truncated")
        (length,) = _BLOCK_LENGTH.unpack_from(view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise CodecError(f"snappy block of {length} bytes overruns the stream")
        block = _snappy_block(view[pos : pos + length], budget, max_bytes)
        budget -= len(block)
        pos += length
        yield block


def _snappy_block(block: memoryview, budget: int, max_bytes: int) -> memoryview:
    """One raw snappy block, refused before decompressing when it announces more than the
    `budget` left of `max_bytes`."""
    try:
        if cramjam.snappy.decompress_raw_len(block) > budget:
            raise CodecError(f"the records decompress to more than {max_bytes} bytes")
        return memoryview(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise CodecError(f"not a snappy stream: {exc}") from None


def _lz4(data: bytes | memoryview, max_bytes: int) -> Iterator[bytes]:
    decoder = lz4.frame.LZ4FrameDecompressor()
    rest: bytes | memoryview = data
    try:
        while not decoder.eof:
            out = decoder.decompress(rest, max_length=CHUNK_BYTES)
            rest = b""
            if out:
                yield out
            elif decoder.needs_input and not decoder.eof:
                raise CodecError("lz4 stream is truncated")
    except RuntimeError as exc:  # what the lz4 binding raises for a malformed frame
        raise CodecError(f"not an lz4 frame: {exc}") from None


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE = range(0x184D2A50, 0x184D2A60)
_ZSTD_BLOCKS_PER_CALL = CHUNK_BYTES // (128 << 10)  # a block decompresses to at most 128 KiB
_DID_BYTES = (0, 1, 2, 4)
_FCS_BYTES = (0, 2, 4, 8)


def _zstd(data: bytes | memoryview, max_bytes: int) -> Iterator[bytes]:
    """zstandard's incremental decoder returns all a call's input yields, and a 4-byte block
    may stand for 128 KiB: it is fed whole blocks, two at a time, found by reading the frame
    and block headers (RFC 8878), so that no call yields more than CHUNK_BYTES."""
    decoder = None
    try:
        for piece, frame_ends in _zstd_pieces(memoryview(data)):
            if decoder is None:
                decoder = zstandard.ZstdDecompressor().decompressobj(write_size=CHUNK_BYTES)
            out = decoder.decompress(piece)
            if out:
                yield out
            if frame_ends:
                if not decoder.eof:
                    raise CodecError("zstd frame is incomplete")
                decoder = None
    except zstandard.ZstdError as exc:
        raise CodecError(f"not a zstd stream: {exc}") from None


def _zstd_pieces(view: memoryview) -> Iterator[tuple[memoryview, bool]]:
    """(slice of the input, whether a frame ends with it): a frame's header with its first
    blocks, then up to _ZSTD_BLOCKS_PER_CALL blocks at a time; skippable frames are left out."""
    pos, end = 0, len(view)
    if end == 0:
        raise CodecError("zstd stream is empty")
    while pos < end:
        magic = _le(view, pos, 4)
        if magic in _ZSTD_SKIPPABLE:
            pos += 8 + _le(view, pos + 4, 4)
            continue
        if magic != _ZSTD_MAGIC:
            raise CodecError(f"not a zstd frame (magic {magic:#x})")
        descriptor = _le(view, pos + 4, 1)
        single_segment = descriptor >> 5 & 1
        fcs = _FCS_BYTES[descriptor >> 6] or single_segment  # size 0 means 1 byte in a single segment
        start, pos = pos, pos + 5 + (1 - single_segment) + _DID_BYTES[descriptor & 3] + fcs
        blocks, last = 0, False
        while not last:
            header = _le(view, pos, 3)
            last, kind, size = bool(header & 1), header >> 1 & 3, header >> 3
            if kind == 3:
                raise CodecError("zstd block of the reserved type")
            pos += 3 + (1 if kind == 1 else size)  # an RLE block holds one byte
            blocks += 1
            if last:
                pos += 4 * (descriptor >> 2 & 1)  # the content checksum
            if pos > end:
                raise CodecError("zstd stream is truncated")
            if last or blocks == _ZSTD_BLOCKS_PER_CALL:
                yield view[start:pos], last
                start, blocks = pos, 0


def _le(view: memoryview, pos: int, size: int) -> int:
    if pos + size > len(view):
        raise CodecError("zstd stream is truncated")
    return int.from_bytes(view[pos : pos + size], "little")


_DECODERS = {
    Codec.GZIP: _gzip,
    Codec.SNAPPY: _snappy,
    Codec.LZ4: _lz4,
    Codec.ZSTD: _zstd,
}


# --- compression ------------------------------------------------------------------------------

GZIP_DEFAULT_LEVEL = -1  # zlib's default (6), java.util.zip.Deflater.DEFAULT_COMPRESSION
LZ4_DEFAULT_LEVEL = 9  # Kafka's default, which Kafka maps to lz4's fast compressor
ZSTD_DEFAULT_LEVEL = 3
_SNAPPY_BLOCK = 32 * 1024  # snappy-java's default block size
_XERIAL_STREAM_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)


class Compressor:
    """One compressed stream, fed in chunks: `compress` returns what is ready, `flush` the rest."""

    def __init__(self, codec: Codec, level: int) -> None:
        self.codec = codec
        self._pending = bytearray()  # snappy: input of the block being filled
        if codec == Codec.GZIP:
            self._zlib = zlib.compressobj(level, zlib.DEFLATED, 31)
        elif codec == Codec.LZ4:
            self._lz4 = lz4.frame.LZ4FrameCompressor(
                block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                block_linked=False,
                compression_level=0 if level == LZ4_DEFAULT_LEVEL else level,
                content_checksum=False,
                block_checksum=False,
                auto_flush=False,
            )
            self._started = False
        elif codec == Codec.ZSTD:
            self._zstd = zstandard.ZstdCompressor(level=level).compressobj()
        elif codec != Codec.SNAPPY:
            raise ValueError(f"no compressor for {codec.name}")
        self._head_written = False

    def compress(self, chunk: bytes | memoryview) -> bytes:
        if self.codec == Codec.GZIP:
            return self._zlib.compress(chunk)
        if self.codec == Codec.ZSTD:
            return self._zstd.compress(chunk)
        if self.codec == Codec.LZ4:
            head = b"" if self._started else self._lz4.begin()
            self._started = True
            return head + self._lz4.compress(chunk)
        self._pending += chunk
        out = [] if self._head_written else [_XERIAL_STREAM_HEADER]
        self._head_written = True
        while len(self._pending) >= _SNAPPY_BLOCK:
            out.append(_snappy_frame(self._pending[:_SNAPPY_BLOCK]))
            del self._pending[:_SNAPPY_BLOCK]
        return b"".join(out)

    def flush(self) -> bytes:
        if self.codec == Codec.GZIP:
            return self._zlib.flush()
        if self.codec == Codec.ZSTD:
            return self._zstd.flush()
        if self.codec == Codec.LZ4:
            head = b"" if self._started else self._lz4.begin()
            return head + self._lz4.flush()
        head = b"" if self._head_written else _XERIAL_STREAM_HEADER
        tail = _snappy_frame(self._pending) if self._pending else b""
        self._pending.clear()
        return head + tail


def _snappy_frame(block: bytes | bytearray) -> bytes:
    compressed = bytes(cramjam.snappy.compress_raw(block))
    return _BLOCK_LENGTH.pack(len(compressed)) + compressed
