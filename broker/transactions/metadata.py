"""One transactional id's state (Kafka's TransactionMetadata) and the coordinator's decisions
on it, as pure functions: each takes the current metadata (None for an id never seen) and a
request, and returns the metadata to persist, or raises ApiError with Kafka's error code.
Nothing here writes or waits; the coordinator persists what these return.

States and the moves allowed (Kafka's `TransactionState.validPreviousStates`):

    Empty --AddPartitions--> Ongoing --EndTxn--> PrepareCommit --markers--> CompleteCommit
                               |      \\--EndTxn, timeout, fence--> PrepareAbort --markers--> CompleteAbort
    Complete* --AddPartitions--> Ongoing;  Empty/Complete* --InitProducerId--> Empty (epoch + 1)
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from ..protocol.errors import ApiError, ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767  # Short.MaxValue
# Kafka's isEpochExhausted: an epoch this high cannot be bumped once more for a fence
EXHAUSTED_EPOCH = MAX_PRODUCER_EPOCH - 1


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


_S = TxnState
IDLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
PREPARING = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT, _S.PREPARE_EPOCH_FENCE})


class IllegalTxnTransition(Exception):
    """A move the table forbids: a coordinator bug, never a client error."""


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    txn_start_ms: int  # -1 unless a transaction is open
    last_update_ms: int

    def moved(self, state: TxnState, now_ms: int, **changes: object) -> "TransactionMetadata":
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTxnTransition(f"{self.transactional_id}: {self.state.value} -> {state.value}")
        return dataclasses.replace(self, state=state, last_update_ms=now_ms, **changes)  # type: ignore[arg-type]

    def expired(self, now_ms: int) -> bool:
        """An Ongoing transaction older than its timeout (the coordinator aborts it)."""
        return self.state is _S.ONGOING and self.txn_start_ms >= 0 and now_ms >= self.txn_start_ms + self.timeout_ms


def check_timeout(timeout_ms: int, max_timeout_ms: int) -> None:
    if timeout_ms <= 0 or timeout_ms > max_timeout_ms:
        raise ApiError(
            ErrorCode.INVALID_TRANSACTION_TIMEOUT,
            f"transaction.timeout.ms {timeout_ms} must be in 1..{max_timeout_ms} (transaction.max.timeout.ms)",
        )


def _is_retry_of_last_bump(current: TransactionMetadata, expected: tuple[int, int]) -> bool:
    """KIP-360, as Kafka's `prepareIncrementProducerEpoch`: a producer that presents the
    epoch (or, after the id was rotated, the producer id and exhausted epoch) it had before
    the latest bump is retrying that bump; it gets the current id and epoch, not
    PRODUCER_FENCED. Only the holder of an epoch can be retrying its bump: the last epoch is
    recorded only when the bump presented the current epoch, and is -1 after a new instance's
    InitProducerId, a fence or a timeout abort, so an instance fenced by those presenting its
    old epoch is fenced, never handed its successor's epoch."""
    producer_id, epoch = expected
    if current.state not in IDLE or epoch == NO_PRODUCER_EPOCH or epoch != current.last_producer_epoch:
        return False
    return producer_id == current.producer_id or (
        producer_id == current.previous_producer_id and epoch >= EXHAUSTED_EPOCH
    )


def idle_expired(txn: TransactionMetadata, now_ms: int, expiration_ms: int) -> bool:
    """`transactional.id.expiration.ms`: no transaction open or being ended, and no state
    change for that long (Kafka's `TransactionStateManager` expiry rule)."""
    return txn.state in IDLE and now_ms - txn.last_update_ms >= expiration_ms


def needs_new_producer_id(current: TransactionMetadata | None) -> bool:
    """InitProducerId must allocate a producer id: a new transactional id, or an epoch exhausted."""
    return current is None or current.producer_epoch >= EXHAUSTED_EPOCH


def init_producer_id(
    current: TransactionMetadata | None,
    transactional_id: str,
    *,
    timeout_ms: int,
    now_ms: int,
    new_producer_id: int,
    expected: tuple[int, int] | None = None,
) -> TransactionMetadata:
    """InitProducerId. Empty or complete: the epoch is bumped (fencing the previous producer),
    or a new producer id taken when it is exhausted. Ongoing: the result is PrepareAbort with
    the epoch bumped (the caller writes the ABORT markers and answers CONCURRENT_TRANSACTIONS:
    the client retries). `expected` (KIP-360: the producer id and epoch a producer presents
    to bump its own epoch) must be the current one, or the previous one of a retry.

    The last epoch (what a retry may present) is the epoch bumped only when its holder asked
    (`expected` is the current one); a new instance's bump (no `expected`) and a fence record
    -1, so the instance they fence cannot pass for a retry (Kafka's
    `prepareIncrementProducerEpoch`, `prepareFenceProducerEpoch`, `prepareProducerIdRotation`)."""
    if expected is not None and (expected[0] == NO_PRODUCER_ID) != (expected[1] == NO_PRODUCER_EPOCH):
        raise ApiError(ErrorCode.INVALID_REQUEST, f"producer id {expected[0]} with epoch {expected[1]}")
    if expected == (NO_PRODUCER_ID, NO_PRODUCER_EPOCH):
        expected = None
    if current is None:
        return TransactionMetadata(
            transactional_id,
            producer_id=new_producer_id,
            previous_producer_id=NO_PRODUCER_ID,
            producer_epoch=0,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            state=_S.EMPTY,
            partitions=frozenset(),
            txn_start_ms=-1,
            last_update_ms=now_ms,
        )
    if current.state in PREPARING:
        raise ApiError(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id}: a transaction is being completed")
    if expected is not None and _is_retry_of_last_bump(current, expected):
        return current  # a retry whose answer was lost: the bump it asked for is done
    if expected is not None and expected != (current.producer_id, current.producer_epoch):
        raise ApiError(
            ErrorCode.PRODUCER_FENCED,
            f"{transactional_id}: producer {expected[0]} epoch {expected[1]} is not the current one",
        )
    if current.state is _S.ONGOING:
        return _fenced(current, now_ms)
    if current.state is _S.DEAD:
        raise ApiError(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id} is being removed")
    last_epoch = current.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
    if current.producer_epoch >= EXHAUSTED_EPOCH:
        return current.moved(
            _S.EMPTY,
            now_ms,
            producer_id=new_producer_id,
            previous_producer_id=current.producer_id,
            producer_epoch=0,
            last_producer_epoch=last_epoch,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            txn_start_ms=-1,
        )
    return current.moved(
        _S.EMPTY,
        now_ms,
        producer_epoch=current.producer_epoch + 1,
        last_producer_epoch=last_epoch,
        timeout_ms=timeout_ms,
        partitions=frozenset(),
        txn_start_ms=-1,
    )


def _fenced(txn: TransactionMetadata, now_ms: int) -> TransactionMetadata:
    """The ongoing transaction is aborted with the epoch bumped, fencing its producer, which
    may not present its epoch as a retry afterwards (Kafka's `prepareFenceProducerEpoch`:
    the last epoch is -1)."""
    epoch = txn.producer_epoch + 1 if txn.producer_epoch < MAX_PRODUCER_EPOCH else txn.producer_epoch
    return txn.moved(_S.PREPARE_ABORT, now_ms, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH)


def _check_producer(
    current: TransactionMetadata | None, transactional_id: str, producer_id: int, epoch: int
) -> TransactionMetadata:
    if current is None or current.state is _S.DEAD or producer_id != current.producer_id:
        raise ApiError(
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            f"producer {producer_id} does not hold transactional id {transactional_id}",
        )
    if epoch != current.producer_epoch:
        raise ApiError(
            ErrorCode.PRODUCER_FENCED,
            f"{transactional_id}: epoch {epoch} of producer {producer_id} is fenced by epoch {current.producer_epoch}",
        )
    return current


def add_partitions(
    current: TransactionMetadata | None,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    partitions: frozenset[tuple[str, int]],
    now_ms: int,
) -> TransactionMetadata | None:
    """AddPartitionsToTxn / AddOffsetsToTxn: the metadata with the partitions added (the
    transaction Ongoing), or None when every partition is in it already (nothing to write)."""
    txn = _check_producer(current, transactional_id, producer_id, epoch)
    if txn.state in PREPARING:
        raise ApiError(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id}: the previous transaction is completing")
    if txn.state is _S.ONGOING and partitions <= txn.partitions:
        return None
    start = txn.txn_start_ms if txn.state is _S.ONGOING else now_ms
    return txn.moved(_S.ONGOING, now_ms, partitions=txn.partitions | partitions, txn_start_ms=start)


def verify_partitions(
    current: TransactionMetadata | None,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    partitions: frozenset[tuple[str, int]],
) -> dict[tuple[str, int], ErrorCode]:
    """AddPartitionsToTxn v4+ with verify_only (KIP-890, Kafka's
    `handleVerifyPartitionsInTransaction`): NONE for each partition in the producer's
    ongoing transaction, INVALID_TXN_STATE for the others; raises for the producer itself."""
    txn = _check_producer(current, transactional_id, producer_id, epoch)
    if txn.state in PREPARING:
        raise ApiError(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id}: the transaction is completing")
    ongoing = txn.partitions if txn.state is _S.ONGOING else frozenset()
    return {p: ErrorCode.NONE if p in ongoing else ErrorCode.INVALID_TXN_STATE for p in partitions}


def end_txn(
    current: TransactionMetadata | None,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    commit: bool,
    now_ms: int,
) -> TransactionMetadata | None:
    """EndTxn: PrepareCommit or PrepareAbort, or None for the retry of a completed EndTxn
    (answered NONE without a write)."""
    txn = _check_producer(current, transactional_id, producer_id, epoch)
    done, preparing = (_S.COMPLETE_COMMIT, _S.PREPARE_COMMIT) if commit else (_S.COMPLETE_ABORT, _S.PREPARE_ABORT)
    if txn.state is _S.ONGOING:
        return txn.moved(preparing, now_ms)
    if txn.state is done:
        return None
    if txn.state is preparing:
        raise ApiError(ErrorCode.CONCURRENT_TRANSACTIONS, f"{transactional_id}: markers are being written")
    raise ApiError(
        ErrorCode.INVALID_TXN_STATE,
        f"{transactional_id}: cannot {'commit' if commit else 'abort'} in state {txn.state.value}",
    )


def complete(txn: TransactionMetadata, now_ms: int) -> TransactionMetadata:
    """Every marker is written: CompleteCommit or CompleteAbort, no partitions."""
    state = _S.COMPLETE_COMMIT if txn.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
    return txn.moved(state, now_ms, partitions=frozenset(), txn_start_ms=-1)


def abort_timed_out(txn: TransactionMetadata, now_ms: int) -> TransactionMetadata:
    """A timed-out Ongoing transaction is aborted with the epoch bumped, so its producer is
    fenced (Kafka's abortTimedOutTransactions, through `prepareFenceProducerEpoch`)."""
    return _fenced(txn, now_ms)
