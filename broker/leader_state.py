"""What the leader of one partition knows about its followers: positions, lag, ISR, HW.

Kafka's leader-side Partition/Replica bookkeeping as a pure state machine: the caller feeds
in follower fetches and the leader's log end offset, and asks for the high watermark and for
the followers that should leave or join the ISR. Time is an argument (`now_ms`), so lag
rules are testable without sleeping; changing the ISR in the metadata store is the caller's.

Rules, with Kafka's names:
- Replica.updateFetchState: a fetch at `fetch_offset` while the leader's LEO is `leader_leo`
  makes the follower's LEO `fetch_offset`; it is caught up *now* if fetch_offset >=
  leader_leo, else caught up *as of its previous fetch* if fetch_offset reaches the largest
  leader LEO seen at its earlier fetches.
- Replica.resetReplicaState (new leader): follower LEOs are unknown (-1), so they hold the
  HW until they fetch; ISR members count as caught up at election time, others never.
- Partition.maybeIncrementLeaderHW: HW = min LEO over the ISR and the leader, never lower
  than before and never above the leader's LEO. During a pending ISR change the HW uses the
  "maximal ISR" (committed ∪ pending): waiting for more replicas is always safe.
  Not modelled: recent Kafka also waits for a caught-up replica about to join the ISR
  (maybeIncrementLeaderHW's shouldWaitForReplicaToJoinIsr).
- Partition.getOutOfSyncReplicas: an ISR follower is out of sync when its LEO differs from
  the leader's and it last caught up more than `lag_max_ms` ago.
- Partition.isFollowerInSync: a non-ISR follower may join when its LEO >= HW and >= the
  start offset of the current leader epoch (so it holds everything this leader wrote).
  Beyond Kafka: and, when it reports its log start, once that is at the leader's (so an
  answered DeleteRecords survives its election).
- No shrink or expand is proposed while an ISR change is pending (Kafka's isInflight).
- Partition.lowWatermarkIfLeader: the smallest log start offset over the leader and the
  followers on live brokers (a follower reports its own with every fetch; -1 before it has):
  DeleteRecords answers once it reaches the offset asked (Kafka's DelayedDeleteRecords).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

UNKNOWN_OFFSET = -1  # Kafka's UnifiedLog.UNKNOWN_OFFSET: a follower that has not fetched yet


@dataclass(slots=True)
class _Follower:
    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0
    log_start_offset: int = UNKNOWN_OFFSET


class LeaderState:
    """The leader's view of one partition's replicas, for one leader epoch."""

    def __init__(
        self,
        *,
        leader_id: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        leader_epoch: int,
        leader_epoch_start_offset: int,
        high_watermark: int,
        now_ms: int,
    ) -> None:
        self._leader_id = leader_id
        self._replicas = tuple(replicas)
        if len(set(self._replicas)) != len(self._replicas) or leader_id not in self._replicas:
            raise ValueError(f"replicas {self._replicas} must be distinct and include leader {leader_id}")
        if leader_epoch < 0 or leader_epoch_start_offset < 0 or high_watermark < 0:
            raise ValueError("leader_epoch, leader_epoch_start_offset and high_watermark must be >= 0")
        self._isr = self._checked_isr(isr)
        self._pending_isr: frozenset[int] | None = None
        self._leader_epoch = leader_epoch
        self._leader_epoch_start_offset = leader_epoch_start_offset
        self._high_watermark = high_watermark
        self._followers = {
            r: _Follower(last_caught_up_ms=now_ms if r in self._isr else 0) for r in self._replicas if r != leader_id
        }

    @property
    def leader_id(self) -> int:
        return self._leader_id

    @property
    def replicas(self) -> tuple[int, ...]:
        return self._replicas

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def leader_epoch_start_offset(self) -> int:
        return self._leader_epoch_start_offset

    @property
    def isr(self) -> frozenset[int]:
        """The committed ISR (what the metadata store holds)."""
        return self._isr

    @property
    def pending_isr(self) -> frozenset[int] | None:
        """The ISR proposed to the metadata store and not yet committed or aborted."""
        return self._pending_isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        """Committed ∪ pending: the replicas the HW waits for."""
        return self._isr | (self._pending_isr or frozenset())

    def follower_log_end_offset(self, replica_id: int) -> int:
        """The follower's LEO as of its last fetch (-1 before its first). KeyError if
        `replica_id` is not a follower of this partition."""
        return self._followers[replica_id].log_end_offset

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, leader_leo: int, now_ms: int) -> bool:
        """Record a follower fetch. Returns False, changing nothing, when `replica_id` is not
        a follower in `replicas` (Kafka's updateFollowerFetchState); the caller answers that
        fetch without records."""
        follower = self._followers.get(replica_id)
        if follower is None:
            return False
        if fetch_offset >= leader_leo:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now_ms)
        elif fetch_offset >= follower.last_fetch_leader_log_end_offset:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_leader_log_end_offset = max(leader_leo, follower.last_fetch_leader_log_end_offset)
        follower.last_fetch_ms = now_ms
        return True

    def on_follower_caught_up(self, replica_id: int, as_of_ms: int) -> None:
        """A replica fetch session vouches that the follower held the leader's whole log at
        `as_of_ms` (its latest request; the follower names a partition only when its position
        changes, replication/fetch_sessions.py): as a fetch at that time at the leader's LEO."""
        follower = self._followers.get(replica_id)
        if follower is not None:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, as_of_ms)
            follower.last_fetch_ms = max(follower.last_fetch_ms, as_of_ms)

    def on_follower_log_start(self, replica_id: int, log_start_offset: int) -> bool:
        """Record the log start offset a follower reported with its fetch; True when it
        changed (a DeleteRecords may be waiting for it)."""
        follower = self._followers.get(replica_id)
        if follower is None or follower.log_start_offset == log_start_offset:
            return False
        follower.log_start_offset = log_start_offset
        return True

    def low_watermark(self, leader_log_start_offset: int, alive: Callable[[int], bool]) -> int:
        """The smallest log start offset over the leader and its followers on live brokers
        (`alive`), -1 while one of those has not reported its own."""
        reported = [f.log_start_offset for r, f in self._followers.items() if alive(r)]
        return min([leader_log_start_offset, *reported])

    def high_watermark(self, leader_leo: int) -> int:
        """Advance the HW to the minimum LEO over the maximal ISR (leader's = `leader_leo`)
        if that is higher, and return it. Clamped to `leader_leo`, so only a truncation of
        the leader's own log (which a leader never does) can lower it."""
        candidate = leader_leo
        for replica_id in self.maximal_isr:
            if replica_id != self._leader_id:
                candidate = min(candidate, self._followers[replica_id].log_end_offset)
        self._high_watermark = min(max(self._high_watermark, candidate), leader_leo)
        return self._high_watermark

    def shrink_candidates(self, now_ms: int, lag_max_ms: int, leader_leo: int) -> frozenset[int]:
        """ISR followers not caught up within `lag_max_ms` (replica.lag.time.max.ms); empty
        while an ISR change is pending."""
        if self._pending_isr is not None:
            return frozenset()
        return frozenset(
            r
            for r in self._isr
            if r != self._leader_id
            and self._followers[r].log_end_offset != leader_leo
            and now_ms - self._followers[r].last_caught_up_ms > lag_max_ms
        )

    def expand_candidates(self, leader_leo: int, leader_log_start_offset: int = UNKNOWN_OFFSET) -> frozenset[int]:
        """Non-ISR followers holding everything committed and everything this leader wrote
        (LEO >= HW and >= leader_epoch_start_offset), and nothing the leader deleted: a
        follower that reports its log start must have reached `leader_log_start_offset`, or,
        elected before it learnt of a DeleteRecords answered while it was not live, it would
        serve the deleted records again. Empty while an ISR change is pending."""
        if self._pending_isr is not None:
            return frozenset()
        hw = self.high_watermark(leader_leo)
        return frozenset(
            r
            for r, f in self._followers.items()
            if r not in self._isr
            and f.log_end_offset >= hw
            and f.log_end_offset >= self._leader_epoch_start_offset
            and (f.log_start_offset == UNKNOWN_OFFSET or f.log_start_offset >= leader_log_start_offset)
        )

    def begin_isr_change(self, isr: Iterable[int]) -> None:
        """The caller proposed `isr` to the metadata store; until `set_isr` or
        `abort_isr_change`, the HW waits for committed ∪ proposed. One change at a time."""
        if self._pending_isr is not None:
            raise ValueError(f"an ISR change to {sorted(self._pending_isr)} is already pending")
        self._pending_isr = self._checked_isr(isr)

    def abort_isr_change(self) -> None:
        """The proposal was rejected (e.g. a stale metadata revision); the committed ISR stands."""
        self._pending_isr = None

    def set_isr(self, isr: Iterable[int]) -> None:
        """The metadata store committed `isr`; any pending change is settled by it."""
        self._isr = self._checked_isr(isr)
        self._pending_isr = None

    def _checked_isr(self, isr: Iterable[int]) -> frozenset[int]:
        members = frozenset(isr)
        if self._leader_id not in members or not members <= set(self._replicas):
            raise ValueError(
                f"ISR {sorted(members)} must include leader {self._leader_id} and be within {self._replicas}"
            )
        return members
