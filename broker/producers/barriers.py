"""Sequence barriers: after an idempotent producer's batch fails before reaching the log, its
later batches for that partition fail too, until the failed one is sent again.

Why: a Kafka leader handles a connection's requests one after another, so when batch N of a
producer fails, the batches N+1.. it already had in flight fail with it (out of sequence).
A diskless representative has no such order: N's WAL object can fail to upload while N+1's
next object commits. N+1 then reaches the leader with N missing, and either
- the leader knows the producer: OUT_OF_ORDER_SEQUENCE_NUMBER, and librdkafka, seeing a
  sequence past the next one it expects acknowledged, drains, bumps its epoch and sends every
  unacknowledged message again from sequence 0. A message the broker had answered
  "not persisted" (NOT_LEADER_OR_FOLLOWER after appending it, as Kafka also does when a
  leader changes under an acks=all wait) lands a second time, after later ones;
- or the leader does not know it yet (a new producer's first batch failed): the batch is
  accepted, the retry of N lands after it, out of order.

So the representative records (partition, producer id) -> (epoch, first sequence, error) when
a batch fails, and refuses the producer's batches of that partition with a higher sequence in
that epoch with the same retriable error, until a batch at or below the failed sequence (the
retry) or of a newer epoch comes. librdkafka and the Java client retry a failed batch before
the ones after it (they drain the partition first), so the refused batches come back in order.

A partition leader keeps barriers too, for batches it failed to write (a disk error; too few
in-sync replicas for acks=all): a Kafka leader takes the whole log directory offline instead.

Bounded: at most `max_entries` barriers per representative and per partition leader
(`producer.sequence.barriers.max`; the oldest is dropped: its producer may then see the
out-of-sequence answer described above, as without barriers), and a barrier lapses
MAX_AGE_S after the failure it stands for (each failure of the retry renews it). A producer
that retried somewhere else (its partition's leader or representative moved) and came back
with later sequences must not be refused for ever.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Hashable

from ..protocol.batch import NO_SEQUENCE, BatchHeader
from ..protocol.errors import ErrorCode

DEFAULT_MAX_BARRIERS = 10_000  # producer.sequence.barriers.max
MAX_AGE_S = 10.0  # a client retries a failed batch within its retry backoff, after draining
HALF_SEQUENCE_SPACE = 1 << 30  # sequences wrap at 2**31: "higher" means less than half the space ahead


@dataclass(frozen=True, slots=True)
class Barrier:
    epoch: int
    first_sequence: int
    error: ErrorCode
    since: float  # when the failure happened (the owner's monotonic clock, seconds)


class SequenceBarriers:
    def __init__(self, max_entries: int, monotonic: Callable[[], float]) -> None:
        self._max_entries = max_entries
        self._monotonic = monotonic
        self._barriers: OrderedDict[tuple[Hashable, int], Barrier] = OrderedDict()

    def __len__(self) -> int:
        return len(self._barriers)

    def failed(self, partition: Hashable, header: BatchHeader, error: ErrorCode) -> None:
        """`header`'s batch failed without reaching the log."""
        if not sequenced(header):
            return
        key = (partition, header.producer_id)
        held = self._live(key)
        if (
            held is not None
            and held.epoch == header.producer_epoch
            and _after(header.base_sequence, held.first_sequence)
        ):
            return  # an earlier barrier of this epoch already holds this one back
        self._barriers[key] = Barrier(header.producer_epoch, header.base_sequence, error, self._monotonic())
        self._barriers.move_to_end(key)
        while len(self._barriers) > self._max_entries:
            self._barriers.popitem(last=False)

    def check(self, partition: Hashable, header: BatchHeader) -> Barrier | None:
        """The barrier that refuses `header`'s batch, or None; a batch that retries the failed
        one (at or below its sequence) or starts a newer epoch lifts the barrier."""
        if not sequenced(header):
            return None
        key = (partition, header.producer_id)
        held = self._live(key)
        if held is None:
            return None
        if header.producer_epoch == held.epoch and _after(header.base_sequence, held.first_sequence):
            return held
        if header.producer_epoch >= held.epoch:  # the retry, or a bumped epoch: in order again
            del self._barriers[key]
        return None

    def _live(self, key: tuple[Hashable, int]) -> Barrier | None:
        held = self._barriers.get(key)
        if held is not None and self._monotonic() - held.since > MAX_AGE_S:
            del self._barriers[key]
            return None
        return held


def sequenced(header: BatchHeader) -> bool:
    """A batch with a producer id and a sequence (idempotent or transactional, not a marker)."""
    return header.producer_id >= 0 and header.base_sequence != NO_SEQUENCE and not header.is_control


def _after(sequence: int, reference: int) -> bool:
    return 0 < (sequence - reference) % (1 << 31) < HALF_SEQUENCE_SPACE
