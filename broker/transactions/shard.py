"""The transactional ids of one `__transaction_state` partition: the coordinator runtime's
shard for transactions (Kafka's TransactionStateManager, per partition).

It rebuilds each id's latest `TransactionMetadata` from the log on load, hands the runtime
the live state for compaction (one record per id), and, once loaded, asks the coordinator to
finish what its predecessor left half done (transactions in PrepareCommit/PrepareAbort: their
markers are written again, which is harmless for partitions that have them) and to grant the
permits of ongoing ones again (permits.py). Timed-out
transactions are found by the coordinator's periodic scan, as in Kafka."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..coordinator.record_batches import Record
from . import legacy_records, records
from .metadata import PREPARING, TransactionMetadata, TxnState

if TYPE_CHECKING:
    from ..coordinator.runtime import CoordinatorRuntime

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TxnShardContext:
    runtime: "CoordinatorRuntime[TransactionShard]"
    coordinator_epoch: Callable[[int], int]  # the partition's leader epoch
    resume: Callable[["TransactionShard", TransactionMetadata], None]  # write the markers of a Prepare*
    grant_again: Callable[["TransactionShard", TransactionMetadata], None]  # permits of an Ongoing one


class TransactionShard:
    def __init__(self, index: int, context: TxnShardContext) -> None:
        self.index = index
        self._context = context
        self.txns: dict[str, TransactionMetadata] = {}
        self.coordinator_epoch = context.coordinator_epoch(index)
        self.active = True
        self._legacy_records = False  # replay met records of Shoal's msgpack format

    # -- CoordinatorShard ------------------------------------------------------------------
    def replay(self, end_offset: int, batch: list[Record]) -> None:
        for raw_key, value in batch:
            self._legacy_records |= legacy_records.is_legacy(raw_key)
            txn_id = records.decode_key(raw_key)
            if value is None:
                self.txns.pop(txn_id, None)
            else:
                self.txns[txn_id] = records.decode_value(txn_id, value)

    def replay_transactional(self, first_offset: int, end_offset: int, producer_id: int, batch: list[Record]) -> None:
        pass  # only the coordinator writes here, never in a transaction

    def replay_marker(self, end_offset: int, producer_id: int, commit: bool) -> None:
        pass

    def compaction_floor(self) -> int | None:
        return None

    def holds_legacy_records(self) -> bool:
        return self._legacy_records

    def on_loaded(self) -> None:
        for txn in list(self.txns.values()):
            if txn.state in PREPARING:
                log.info(
                    "%s: resuming the %s of producer %d epoch %d left by the previous coordinator",
                    txn.transactional_id,
                    "commit" if txn.state is TxnState.PREPARE_COMMIT else "abort",
                    txn.producer_id,
                    txn.producer_epoch,
                )
                self._context.resume(self, txn)
            elif txn.state is TxnState.ONGOING:
                self._context.grant_again(self, txn)

    def on_replicated(self, high_watermark: int) -> None:
        pass  # answers wait for replication themselves (runtime.replicated)

    def live_records(self) -> list[Record]:
        return [(records.encode_key(t), records.encode_value(txn)) for t, txn in self.txns.items()]

    def on_unloaded(self) -> None:
        self.active = False  # marker writers and waiters see it and stop

    # -- writes ----------------------------------------------------------------------------
    def write(self, txn: TransactionMetadata) -> int:
        """Append `txn` as the id's latest state; the log end offset to wait for."""

        def appended(_end: int) -> None:
            self.txns[txn.transactional_id] = txn

        return self._context.runtime.append(
            self.index, [(records.encode_key(txn.transactional_id), records.encode_value(txn))], appended
        )

    def remove(self, transactional_id: str) -> int:
        """Append the id's tombstone (it expired); the log end offset to wait for."""

        def appended(_end: int) -> None:
            self.txns.pop(transactional_id, None)

        return self._context.runtime.append(self.index, [(records.encode_key(transactional_id), None)], appended)
