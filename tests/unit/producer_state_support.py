"""Shared helpers of the producer-state tests: header factory and a minimal leader."""

from __future__ import annotations

from broker.producers import DuplicateBatch, EndTxn, ProducerStateManager
from broker.protocol.batch import BatchHeader
from broker.protocol.errors import ErrorCode

T0 = 1_700_000_000_000


def hdr(
    pid: int = 1000, epoch: int = 0, seq: int = 0, count: int = 1, ts: int = T0, attributes: int = 0
) -> BatchHeader:
    return BatchHeader(
        base_offset=0,
        batch_length=49,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=attributes,
        last_offset_delta=count - 1,
        base_timestamp=ts,
        max_timestamp=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        records_count=count,
    )


class Log:
    """Minimal leader: check -> assign offsets -> on_append, in order."""

    def __init__(self, mgr: ProducerStateManager) -> None:
        self.mgr = mgr
        self.next_offset = 0
        self.entries: list[tuple[BatchHeader, int]] = []

    def produce(self, h: BatchHeader, end_txn: EndTxn | None = None) -> ErrorCode | DuplicateBatch | int:
        """`end_txn`: `h` is a transaction marker with this content (checked by check_marker)."""
        if end_txn is None:
            verdict = self.mgr.check(h)
        else:
            verdict = self.mgr.check_marker(h.producer_id, h.producer_epoch, end_txn.coordinator_epoch)
        if verdict is not None:
            return verdict
        base = self.next_offset
        self.next_offset += h.last_offset_delta + 1
        self.entries.append((h, base))
        self.mgr.on_append(h, base, end_txn=end_txn)
        return base
