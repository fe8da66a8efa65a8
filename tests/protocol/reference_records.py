"""A plain reading of a v2 batch's records section, written from Kafka's DefaultRecord.readFrom
and DefaultRecordBatch's record iterator, to judge the broker's C walk (broker/protocol/_records.c)
against: slow, obvious, and sharing no code with it."""

from __future__ import annotations

from dataclasses import dataclass

NO_TIMESTAMP = -1


class Malformed(Exception):
    """Kafka would throw InvalidRecordException (INVALID_RECORD) reading these records."""


@dataclass
class _Reader:
    data: bytes
    pos: int
    end: int

    def byte(self) -> int:
        if self.pos >= self.end:
            raise Malformed("read past the end")
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self, max_bytes: int) -> int:
        """A zigzag varint of at most `max_bytes` bytes (5: int32, 10: int64), truncated to its width."""
        raw = 0
        for i in range(max_bytes):
            b = self.byte()
            raw |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                width = 32 if max_bytes == 5 else 64
                raw &= (1 << width) - 1
                value = (raw >> 1) ^ -(raw & 1)
                return value
        raise Malformed("varint too long")

    def skip(self, n: int) -> None:
        if n > 0:
            if self.pos + n > self.end:
                raise Malformed("field overruns")
            self.pos += n


def record_timestamps(section: bytes, count: int, base_timestamp: int) -> list[int]:
    """Every record's timestamp (baseTimestamp + delta, wrapped like a Java long), or Malformed."""
    reader = _Reader(bytes(section), 0, len(section))
    stamps = []
    while reader.pos < len(section):
        if len(stamps) == count:
            raise Malformed("records still remaining")
        length = reader.varint(5)
        if length < 0 or reader.pos + length > len(section):
            raise Malformed("bad record length")
        body = _Reader(reader.data, reader.pos, reader.pos + length)
        body.byte()  # attributes
        delta = body.varint(10)
        body.varint(5)  # offset delta
        body.skip(body.varint(5))  # key (negative: null)
        body.skip(body.varint(5))  # value
        headers = body.varint(5)
        if headers < 0:
            raise Malformed("negative header count")
        for _ in range(headers):
            key = body.varint(5)
            if key < 0:
                raise Malformed("negative header key")
            body.skip(key)
            body.skip(body.varint(5))
        if body.pos != body.end:
            raise Malformed("record shorter than its length")
        reader.pos = body.end
        ts = (base_timestamp + delta) & ((1 << 64) - 1)
        stamps.append(ts - (1 << 64) if ts >= 1 << 63 else ts)
    if len(stamps) != count:
        raise Malformed("fewer records than the count")
    return stamps


def expected_scan(section: bytes, count: int, base_timestamp: int, earliest: int, latest: int) -> tuple[int, list[int]]:
    """What the walk must answer: (the largest timestamp, at least -1; the indices of records
    whose timestamp is not -1 and lies outside [earliest, latest])."""
    stamps = record_timestamps(section, count, base_timestamp)
    return max([NO_TIMESTAMP, *stamps]), [
        i for i, ts in enumerate(stamps) if ts != NO_TIMESTAMP and not earliest <= ts <= latest
    ]
