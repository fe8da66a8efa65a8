"""How old a partition's oldest open transaction is, for
shoal_partition_open_transaction_age_seconds (and the ShoalHangingTransaction alert).

The producer state keeps each open transaction's first offset, not when it began; the
start is read from the batches it retains per producer (the last NUM_BATCHES_TO_RETAIN,
with their max timestamps, kept in snapshots too): the transaction's first batch while it is
retained, else the oldest retained batch of the transaction. The age is then a lower bound
for a producer that wrote more batches than are retained, which still grows once the
producer stops writing, as a hanging transaction's does. Timestamps are the producer's
(CreateTime) unless the topic uses LogAppendTime.
"""

from __future__ import annotations

from broker.producers.state import ProducerStateManager


def oldest_open_transaction_start_ms(producers: ProducerStateManager) -> int | None:
    """Timestamp (ms) of the first batch of the oldest open transaction; None if none is open."""
    starts = []
    for producer_id, first_offset in producers.ongoing_transactions().items():
        entry = producers.entry(producer_id)
        if entry is None:
            continue
        retained = [b.timestamp_ms for b in entry.batches if b.first_offset >= first_offset]
        starts.append(min(retained, default=entry.last_timestamp_ms))
    return min(starts, default=None)


def open_transaction_age_s(producers: ProducerStateManager, now_ms: int) -> float:
    """Seconds since the oldest open transaction began; 0 with none (or a producer clock ahead)."""
    start = oldest_open_transaction_start_ms(producers)
    return 0.0 if start is None else max(now_ms - start, 0) / 1000
