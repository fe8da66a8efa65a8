"""Produce-path validation benchmark (part of `make bench`, not of CI): the CPU that
broker/log_validator.py spends per batch, in-process, single-threaded (as on the event loop).

For each codec, a batch of about 16 KiB of records (JSON-like values of 100-250 bytes, the
Java client's default batch.size) and one of about 1 MB (librdkafka's batch.size), built by
kafka-python, timed through:
- header only: what the produce path did before issue 26 (split, 61-byte header, CRC32C in C);
- validate: `log_validator.validate` on a `compression.type=producer` topic (the records walked
  in C through the codec's decompressor; nothing rewritten);
- maxTimestamp -1: the same batch as older Go clients send it (the header rewritten, one copy);
- recompress: a topic whose compression.type is another codec (decompress, walk, compress).
Each figure is the best of 7 rounds (the machine is shared), in microseconds per batch; the
calibration line (a pure-Python loop) tells how loaded the machine was.
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import time

import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.config import load_config
from broker.log_validator import validate
from broker.protocol import batch as batches
from broker.topic_config import effective

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
NOW = 1_800_000_000_000


def json_batch(codec: int, target_bytes: int = 16 * 1024) -> tuple[bytes, int, int]:
    """(batch, records, uncompressed record bytes) of about `target_bytes` of records."""
    rnd = random.Random(7)
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=target_bytes,
    )
    count = 0
    while True:
        value = json.dumps(
            {
                "id": count,
                "user": f"user-{rnd.randrange(10_000)}",
                "event": rnd.choice(["view", "click", "purchase", "scroll"]),
                "ts": NOW + count,
                "path": "/"
                + "/".join(rnd.choice(["a", "shop", "item", "cart", "x"]) for _ in range(rnd.randrange(1, 6))),
                "note": "".join(rnd.choice("abcdefghij ") for _ in range(rnd.randrange(10, 120))),
            }
        ).encode()
        if builder.append(count, timestamp=NOW + count, key=b"k%d" % count, value=value, headers=[]) is None:
            break
        count += 1
    raw = bytes(builder.build())
    return raw, count, builder.size() if codec == 0 else _uncompressed_size(raw, count)


def _uncompressed_size(raw: bytes, count: int) -> int:
    from broker.protocol.compression import Codec, decompress

    header = batches.parse_header(raw)
    return sum(len(c) for c in decompress(Codec(header.compression), raw[61:], 1 << 30)) + 61


def without_max_timestamp(raw: bytes) -> bytes:
    out = bytearray(raw)
    struct.pack_into(">q", out, 35, -1)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def header_only(data: memoryview) -> None:
    for pos, header in batches.split_batches(data):
        batches.crc_is_valid(data[pos : pos + header.size], header)


def best_us(fn, data: bytes, iterations: int, rounds: int = 7) -> float:  # type: ignore[no-untyped-def]
    view = memoryview(data)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(iterations):
            fn(view)
        best = min(best, (time.perf_counter() - start) / iterations)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300, help="batches per round (16 KiB batches)")
    args = parser.parse_args()
    broker = load_config(environ={})
    topics = {
        name: effective({"compression.type": name if name != "none" else "uncompressed"}, broker) for name in CODECS
    }
    producer = effective({}, broker)
    print(f"calibration: sum(range(1000)) takes {best_us(lambda _v: sum(range(1000)), b'', 2000):.1f} µs here")
    print()
    print(
        "| batch | records | bytes sent / uncompressed | header only | validate | maxTimestamp -1 | records/s (validate) |"
    )
    print("|---|---|---|---|---|---|---|")
    shapes = [
        ("16 KiB", lambda codec: json_batch(codec), args.iterations),
        ("1 MB", lambda codec: json_batch(codec, 1_000_000), max(3, args.iterations // 50)),
    ]
    recompress_rows = []
    for label, make, iterations in shapes:
        for name, codec in CODECS.items():
            raw, count, plain = make(codec)
            assert batches.parse_header(raw).compression == codec, f"{name}: kafka-python sent it uncompressed"
            cost = best_us(lambda v: validate(v, producer, NOW), raw, iterations)
            print(
                f"| {label} {name} | {count} | {len(raw):,} / {plain:,} | {best_us(header_only, raw, iterations):.1f} µs "
                f"| {cost:.1f} µs | {best_us(lambda v: validate(v, producer, NOW), without_max_timestamp(raw), iterations):.1f} µs "
                f"| {count / cost * 1e6:,.0f} |"
            )
            if label == "16 KiB":
                recompress_rows.append(
                    (name, [best_us(lambda v, t=topics[t]: validate(v, t, NOW), raw, iterations) for t in CODECS])
                )
    print()
    print(
        "Recompression of the 16 KiB batch, µs per batch (rows: the producer's codec; columns: the topic's compression.type):"
    )
    print()
    print("| producer \\ topic | " + " | ".join("uncompressed" if t == "none" else t for t in CODECS) + " |")
    print("|---|" + "---|" * len(CODECS))
    for name, costs in recompress_rows:
        print(f"| {name} | " + " | ".join(f"{c:.0f}" for c in costs) + " |")


if __name__ == "__main__":
    main()
