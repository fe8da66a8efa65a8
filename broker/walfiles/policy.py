"""What the WAL file manager may delete: pure decisions over one round of answers from every
data broker (a `Sample`), the object listing and what the objects' indexes say. No I/O here;
manager.py does the asking, listing, reading and deleting.

An object X created at c(X) can be deleted when both hold (docs/architecture.md, "WAL file
manager", gives the argument and the races):

1. No commit of it can still succeed: c(X) < cutoff = min over answers of (the broker's clock
   when it answered) - wal.commit.deadline.ms - wal.file.manager.grace.ms. Leaders refuse
   commits of objects older than the deadline on their own clock; the grace covers clocks
   that disagree.
2. No replica references it: for every partition p that may reference X, c(X) < oldest(p),
   the oldest creation time any replica of p references, or else every replica of p says
   it does not reference X when asked. A replica gains references only by a commit (of an
   object younger than the cutoff) or by copying its leader's log (whose answer covers
   them), so once this holds in a complete sample it holds forever.
   Shortcut: c(X) below every partition's oldest reference needs no partitions at all.
   Which partitions reference X (`Known`): its uploader reports those whose commit is
   replicated (committed: they reference X until their log start passes it) and those that
   may (appended but not known replicated: a new leader may have truncated it away; or the
   leader's answer was lost); a partition whose commit was refused references nothing.
   Without a report (the uploader died, or its report went to an earlier manager), the
   partitions in X's index may. A "may" partition that pins X is asked; a committed
   answer makes it a committed partition of X.

The manager then waits `grace` more before deleting (`PendingDeletes`), so reads that
resolved X's coordinates before the last reference went away finish first, and checks the
object again in the sample of the cycle that deletes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .messages import NO_REFERENCE, WalReferencesResponse

PartitionKey = tuple[str, int]  # (topic id, partition)


@dataclass(frozen=True, slots=True)
class Sample:
    """Every data broker's answer from one round, combined."""

    oldest: Mapping[PartitionKey, int]  # oldest referenced creation time per partition (min over replicas)
    commit_floor_ms: int  # objects created before this can no longer be committed anywhere
    referenced_bytes: int  # batch bytes the partition leaders reference

    @property
    def oldest_anywhere(self) -> int | None:
        return min(self.oldest.values(), default=None)


def combine(answers: Iterable[WalReferencesResponse]) -> Sample:
    oldest: dict[PartitionKey, int] = {}
    floor: int | None = None
    referenced = 0
    for answer in answers:
        answer_floor = answer.now_ms - answer.commit_deadline_ms
        floor = answer_floor if floor is None else min(floor, answer_floor)
        for replica in answer.replicas:
            if replica.leader:
                referenced += replica.referenced_bytes
            if replica.oldest_created_ms == NO_REFERENCE:
                continue
            key = (replica.topic_id, replica.partition)
            known = oldest.get(key)
            if known is None or replica.oldest_created_ms < known:
                oldest[key] = replica.oldest_created_ms
    if floor is None:
        raise ValueError("a sample needs at least one answer")
    return Sample(oldest, floor, referenced)


@dataclass(frozen=True, slots=True)
class Known:
    """The partitions that reference an object for good, and those that may."""

    committed: frozenset[PartitionKey]
    maybe: frozenset[PartitionKey]


@dataclass(frozen=True, slots=True)
class Verdict:
    deletable: bool
    reason: str
    needs_index: bool = False  # undecided until the object's partitions are known
    ask: tuple[PartitionKey, ...] = ()  # undecided until these partitions' replicas are asked


YOUNG = Verdict(False, "young: a commit of it may still succeed")
NEEDS_INDEX = Verdict(False, "its partitions are not known yet", needs_index=True)


@dataclass(frozen=True, slots=True)
class Timing:
    """The manager's clock and settings for one cycle."""

    now_ms: int  # wall clock
    commit_deadline_ms: int  # wal.commit.deadline.ms
    grace_ms: int  # wal.file.manager.grace.ms

    def cutoff_ms(self, sample: Sample) -> int:
        """Objects created at or after this may still be committed somewhere."""
        return min(sample.commit_floor_ms, self.now_ms - self.commit_deadline_ms) - self.grace_ms


def judge(created_ms: int, known: Known | None, sample: Sample, timing: Timing) -> Verdict:
    """Whether an object created at `created_ms` is unreferenced in `sample`; `known`: which
    partitions reference it (None: not known yet)."""
    if created_ms >= timing.cutoff_ms(sample):
        return YOUNG
    oldest_anywhere = sample.oldest_anywhere
    if oldest_anywhere is None or created_ms < oldest_anywhere:
        return Verdict(True, "older than every replica's oldest reference")
    if known is None:
        return NEEDS_INDEX

    def pinning(partitions: frozenset[PartitionKey]) -> list[PartitionKey]:
        return sorted(p for p in partitions if sample.oldest.get(p, created_ms + 1) <= created_ms)

    committed = pinning(known.committed)
    if not committed:
        maybe = pinning(known.maybe)
        if maybe:
            return Verdict(False, "partitions with older references may have it: ask them", ask=tuple(maybe))
        partitions = len(known.committed | known.maybe)
        return Verdict(True, f"none of its {partitions} partition(s) references it any more")
    topic_id, index = committed[0]
    more = f" and {len(committed) - 1} more" if len(committed) > 1 else ""
    return Verdict(False, f"referenced by partition {index} of topic {topic_id}{more}")


@dataclass
class PendingDeletes:
    """Objects found unreferenced, waiting out the grace period before they are deleted:
    object key -> when (manager's monotonic ms) it was first found unreferenced. At most
    `max_entries`; an object found while full waits for a later cycle."""

    max_entries: int
    since: dict[str, int] = field(default_factory=dict)

    def update(self, unreferenced: Iterable[str], now_ms: int) -> None:
        """Record this cycle's unreferenced objects; forget those no longer found so (deleted
        by someone else, or no longer listed)."""
        found = list(unreferenced)
        keep = {key: self.since[key] for key in found if key in self.since}
        for key in found:
            if len(keep) >= self.max_entries:
                break
            keep.setdefault(key, now_ms)
        self.since = keep

    def ready(self, grace_ms: int, now_ms: int, limit: int) -> list[str]:
        """Up to `limit` keys unreferenced for at least `grace_ms`, oldest first (key order)."""
        due = [key for key, since in self.since.items() if now_ms - since >= grace_ms]
        due.sort()
        return due[:limit]

    def waiting_ms(self, key: str, grace_ms: int, now_ms: int) -> int:
        since = self.since.get(key)
        return grace_ms if since is None else max(0, grace_ms - (now_ms - since))

    def forget(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.since.pop(key, None)

    def __len__(self) -> int:
        return len(self.since)
