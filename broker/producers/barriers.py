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
that epoch with the same retriable error, until a batch holding the failed sequence (the
retry) or of a newer epoch comes; a batch wholly before it was sent before the failed one and
goes on (cluster seed 101310: lifting the barrier there let the batches after the failed one
through, out of sequence). librdkafka and the Java client retry a failed batch before
the ones after it (they drain the partition first), so the refused batches come back in order.

A partition leader keeps barriers too, for batches it failed to write (a disk error; too few
in-sync replicas for acks=all): a Kafka leader takes the whole log directory offline instead.
And so does a replica for batches it refused as not (yet) the leader: a producer whose
metadata names it leader sends there before it has taken over, and the batches that arrive
once it leads would be OUT_OF_ORDER (Kafka answers so; librdkafka then bumps, see above;
librdkafka issue 4953). A partition's barrier holds back nothing once a batch follows the
producer's last one in its log in sequence: the failed batch reached the log another way
(replicated from the leader that took it).

A batch whose outcome is unknown (its commit's answer was lost) or whose acks=all wait
failed may be in the log after all. Its barrier holds back only the batches sent another way
(another leader, leader epoch or commit stream, `route`): those sent its way follow it in
order, as on one connection, and are safe.

A later batch of the producer acknowledged lifts the barrier too: the leader took it in
sequence, so the failed one is in the log before it (its answer was lost, say), and the
client, which takes every earlier batch as delivered with it (librdkafka's implicit
acknowledgement), will never send the failed one again.

Bounded: at most `max_entries` barriers per representative and per partition leader
(`producer.sequence.barriers.max`; the oldest is dropped: its producer may then see the
out-of-sequence answer described above, as without barriers), and a barrier lapses
MAX_AGE_S after the client can have heard of the failure it stands for (each failure of the
retry renews it). That is not the failure itself: its answer waits on the connection behind
earlier requests' acks=all waits and commits, which the client gives up on only after its
request timeout, the one Produce carries (`timeout_ms`; cluster seed 300066 at e4005e5: a
disk error's answer waited 35 s behind a stalled commit, the barrier lapsed after 10, the
producer's next batch was answered OUT_OF_ORDER_SEQUENCE_NUMBER, and librdkafka, bumping
its epoch, stored two possibly-persisted messages again). So the caller says how long the
answer may take (`answer_within_s`, capped at MAX_ANSWER_WAIT_S), and the age counts from
there. A producer
that retried somewhere else (its partition's leader or representative moved) and came back
with later sequences must not be refused for ever. The batches a barrier refused failed
too, so a lapse leaves no gap: the barrier moves to the first of them (with a new age), and
the producer, which retries in order, sends that one first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Hashable

from ..protocol.batch import NO_SEQUENCE, BatchHeader
from ..protocol.errors import ErrorCode

DEFAULT_MAX_BARRIERS = 10_000  # producer.sequence.barriers.max
MAX_AGE_S = 10.0  # a client retries a failed batch within its retry backoff, after draining
MAX_ANSWER_WAIT_S = 300.0  # librdkafka's default message.timeout.ms: no client waits longer
HALF_SEQUENCE_SPACE = 1 << 30  # sequences wrap at 2**31: "higher" means less than half the space ahead


@dataclass(frozen=True, slots=True)
class Barrier:
    epoch: int
    first_sequence: int
    error: ErrorCode
    since: float  # when the client can have heard of the failure (the owner's monotonic clock, seconds)
    refused: int = NO_SEQUENCE  # the first sequence it refused since: where it moves when it lapses
    # None: batches sent any way are held back. Otherwise the failed batch may be in the log
    # after all (its answer was lost, or its acks=all wait failed), and only batches sent
    # another way than it (another leader, leader epoch or commit stream) could land ahead of
    # it: those sent its way follow it in order, as on one connection.
    route: object = None
    answer_within_s: float = 0.0  # how long its answers may take to reach the client (failed())


class SequenceBarriers:
    def __init__(self, max_entries: int, monotonic: Callable[[], float]) -> None:
        self._max_entries = max_entries
        self._monotonic = monotonic
        self._barriers: OrderedDict[tuple[Hashable, int], Barrier] = OrderedDict()

    def __len__(self) -> int:
        return len(self._barriers)

    def failed(
        self,
        partition: Hashable,
        header: BatchHeader,
        error: ErrorCode,
        route: object = None,
        answer_within_s: float = 0.0,
    ) -> None:
        """`header`'s batch failed without reaching the log, or (`route`: the way it was
        sent) may have reached it although its answer says otherwise. `answer_within_s`: how
        long the answer may take to reach the client (its request's timeout)."""
        if not sequenced(header):
            return
        key = (partition, header.producer_id)
        held = self._live(key)
        if (
            held is not None
            and held.epoch == header.producer_epoch
            and _after(header.base_sequence, held.first_sequence)
        ):  # an earlier barrier of this epoch already holds this one back
            if held.route is None or held.route != route:  # not one more maybe-in-the-log batch its way
                self._refused(key, held, header)
            if held.route is not None and held.route != route:  # failing another way too: hold back every way
                self._barriers[key] = replace(self._barriers[key], route=None)
            return
        wait_s = min(max(answer_within_s, 0.0), MAX_ANSWER_WAIT_S)
        self._barriers[key] = Barrier(
            header.producer_epoch,
            header.base_sequence,
            error,
            self._monotonic() + wait_s,
            route=route,
            answer_within_s=wait_s,
        )
        self._barriers.move_to_end(key)
        while len(self._barriers) > self._max_entries:
            self._barriers.popitem(last=False)

    def check(self, partition: Hashable, header: BatchHeader, route: object = None) -> Barrier | None:
        """The barrier that refuses `header`'s batch (about to be sent `route`), or None; a
        batch that retries the failed one (holds its sequence) or starts a newer epoch lifts
        the barrier. A batch wholly before the failed one goes on and leaves it standing: the
        client sent it before the failed one (pipelined, its object still shipping here), so
        the retry is still to come."""
        if not sequenced(header):
            return None
        key = (partition, header.producer_id)
        held = self._live(key)
        if held is None:
            return None
        if header.producer_epoch == held.epoch and _after(header.base_sequence, held.first_sequence):
            if held.route is not None and held.route == route:
                return None  # it follows the failed one the same way, in order
            self._refused(key, held, header)
            return held
        if header.producer_epoch > held.epoch or (
            header.producer_epoch == held.epoch and not _after(held.first_sequence, header.last_sequence)
        ):  # the retry, or a bumped epoch: in order again
            del self._barriers[key]
        return None

    def acknowledged(self, partition: Hashable, header: BatchHeader) -> None:
        """`header`'s batch is in the log and acknowledged: a barrier of its producer at or
        before it (or of an older epoch) stands for nothing any more."""
        if not sequenced(header):
            return
        key = (partition, header.producer_id)
        held = self._barriers.get(key)
        if held is None or header.producer_epoch < held.epoch:
            return
        if header.producer_epoch == held.epoch and _after(held.first_sequence, header.base_sequence):
            return  # an earlier batch: the failed one may still be missing
        if (
            header.producer_epoch == held.epoch
            and held.refused != NO_SEQUENCE
            and _after(held.refused, header.base_sequence)
        ):  # the batches it refused after this one are still missing
            self._barriers[key] = self._moved_to_refused(held)
            return
        del self._barriers[key]

    def _refused(self, key: tuple[Hashable, int], held: Barrier, header: BatchHeader) -> None:
        """`header`'s batch, after the barrier's, failed or was refused: remember the first."""
        if held.refused == NO_SEQUENCE or _after(held.refused, header.base_sequence):
            self._barriers[key] = replace(held, refused=header.base_sequence)

    def _live(self, key: tuple[Hashable, int]) -> Barrier | None:
        held = self._barriers.get(key)
        if held is not None and self._monotonic() - held.since > MAX_AGE_S:
            if held.refused == NO_SEQUENCE:
                del self._barriers[key]
                return None
            # The batches it refused failed too: hold back what follows the first of them.
            held = self._barriers[key] = self._moved_to_refused(held)
        return held

    def _moved_to_refused(self, held: Barrier) -> Barrier:
        """A barrier at the first batch `held` refused: those were answered with its error,
        on connections as slow as the failed one's."""
        wait_s = held.answer_within_s
        return Barrier(held.epoch, held.refused, held.error, self._monotonic() + wait_s, answer_within_s=wait_s)


def sequenced(header: BatchHeader) -> bool:
    """A batch with a producer id and a sequence (idempotent or transactional, not a marker)."""
    return header.producer_id >= 0 and header.base_sequence != NO_SEQUENCE and not header.is_control


def _after(sequence: int, reference: int) -> bool:
    return 0 < (sequence - reference) % (1 << 31) < HALF_SEQUENCE_SPACE
