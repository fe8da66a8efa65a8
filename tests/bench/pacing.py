"""Sending at a pace for the cluster benchmarks: round-robin over partitions for a fixed
time, as fast as the producers take records or at a fixed rate."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any


class QueueStayedFull(RuntimeError):
    """A producer's queue did not drain: the cluster stopped acknowledging."""


def send_for(
    producers: Sequence[Any],
    topic: str,
    partitions: int,
    payload: bytes,
    seconds: float,
    rate_rps: float,
    on_delivery: Callable[..., None],
    full_limit_s: float,
) -> float:
    """Produce `payload` to partition i % partitions through producers[partition % len] for
    `seconds` (paced at `rate_rps` when it is not 0); returns when sending started."""
    started = time.perf_counter()
    stop_at = started + seconds
    i = 0
    while True:
        if i % 100 == 0:
            now = time.perf_counter()
            if now >= stop_at:
                return started
            if rate_rps:
                time.sleep(max(0.0, started + i / rate_rps - now))
            for producer in producers:
                producer.poll(0)
        partition = i % partitions
        producer = producers[partition % len(producers)]
        while True:
            try:
                producer.produce(topic, payload, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:  # queue full: wait for acknowledgements
                producer.poll(0.005)
                if time.perf_counter() > stop_at + full_limit_s:
                    raise QueueStayedFull(f"{topic}: producer queue stayed full for {full_limit_s:.0f} s") from None
        i += 1
