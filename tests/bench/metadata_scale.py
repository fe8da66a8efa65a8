"""`make bench`, Metadata at partition scale (issue 28): a full Metadata answer over
--partitions partitions in topics of --topic-partitions (a fifth of them classic, the rest
diskless, so AZ routing picks a representative for most), answered by the real handler over a
real ClusterView fed the partition states, with the request's own dispatch encoding.

It measures what one full Metadata costs the event loop: the answer's wall time, the
longest the handler held the loop without handing it back (a ticker task records the gaps
between its turns), and the encoded size. The catalog is a list of real Topic objects and
the context a namespace with the parts the handler reads (tests/topic_view.py): this measures the handler and the
encoding, not the listener. Not a test: no assertions. Record figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from types import SimpleNamespace

from kafka.protocol.metadata import MetadataRequest

from broker.clock import SystemClock
from broker.handlers import metadata
from broker.protocol.api_keys import ApiKey
from broker.protocol.header import RequestHeader
from broker.protocol.messages import encode_response
from tests.topic_view import topic_view_context

AZS = ("az-a", "az-b", "az-c")


async def build(partitions: int, per_topic: int, brokers_per_az: int) -> SimpleNamespace:
    sizes = {f"topic-{t:05d}": per_topic for t in range(max(1, partitions // per_topic))}
    brokers = {n * len(AZS) + i: az for n in range(brokers_per_az) for i, az in enumerate(AZS)}
    classic = [name for t, name in enumerate(sizes) if t % 5 == 0]
    return await topic_view_context(sizes, brokers, classic=classic, clock=SystemClock())


async def answer_once(ctx: SimpleNamespace, version: int) -> tuple[float, float, int]:
    """(wall seconds, longest loop hold in seconds, encoded bytes) of one full Metadata."""
    gaps: list[float] = []
    done = False

    async def ticker() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    header = RequestHeader(ApiKey.METADATA, version, 1, "bench-client")
    started = time.perf_counter()
    request = MetadataRequest(topics=None, allow_auto_topic_creation=False)
    response = await metadata.handle(ctx, header, request)  # type: ignore[arg-type]
    size = sum(len(part) for part in encode_response(header, response))
    wall = time.perf_counter() - started
    done = True
    await tick
    return wall, max(gaps), size


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--topic-partitions", type=int, default=250)
    parser.add_argument("--brokers-per-az", type=int, default=1)
    parser.add_argument("--version", type=int, default=12)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    started = time.perf_counter()
    ctx = await build(args.partitions, args.topic_partitions, args.brokers_per_az)
    print(
        f"{args.partitions} partitions in topics of {args.topic_partitions}, "
        f"{args.brokers_per_az} broker(s) per AZ, Metadata v{args.version} "
        f"(view built in {time.perf_counter() - started:.1f} s)"
    )
    for run in range(args.runs):
        wall, hold, size = await answer_once(ctx, args.version)
        print(f"  run {run + 1}: answer {wall * 1000:.0f} ms, longest loop hold {hold * 1000:.1f} ms, {size:,} bytes")


if __name__ == "__main__":
    asyncio.run(main())
