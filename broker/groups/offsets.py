"""Committed offsets of all groups a coordinator owns: in-memory maps rebuilt from
`__consumer_offsets`, with Kafka's expiry rule (KIP-211): offsets of a group expire
`offsets.retention.minutes` after the group became empty (or, for a group that never had
members, after the commit), or at the explicit expiry time old clients asked for.

`ReplicatedOffsets` keeps two views, as Kafka's coordinator runtime does (replicate, then
expose): `latest` holds every change appended to the log (what compaction must re-append
and what expiry and deletion decide on), `committed` only the changes below the partition's
high watermark (what OffsetFetch answers). A failover can lose an unreplicated change, so
no client may see it before it is replicated.

It also keeps where in the log each latest offset was written (the first offset of its
batch): a transaction's offsets take effect at its COMMIT marker only where no offset of the
partition was written after them (Kafka's `replayEndTransactionMarker` compares record
offsets), so a plain OffsetCommit made while the transaction was open is not rolled back.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Callable, Iterator

import msgspec

from ..partition_ids import TopicPartition


class OffsetValue(msgspec.Struct, frozen=True):
    """A committed offset (Kafka's OffsetAndMetadata): `metadata` is "" when the client sent
    none, as Kafka stores it; `expire_timestamp_ms` only from OffsetCommit v2-v4's retention time."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1


class OffsetStore:
    def __init__(self) -> None:
        self._by_group: dict[str, dict[TopicPartition, OffsetValue]] = defaultdict(dict)

    def commit(self, group: str, topic: str, partition: int, value: OffsetValue) -> None:
        self._by_group[group][TopicPartition(topic, partition)] = value

    def remove(self, group: str, topic: str, partition: int) -> bool:
        offsets = self._by_group.get(group)
        if offsets is None or offsets.pop(TopicPartition(topic, partition), None) is None:
            return False
        if not offsets:
            del self._by_group[group]
        return True

    def get(self, group: str, topic: str, partition: int) -> OffsetValue | None:
        offsets = self._by_group.get(group)
        return offsets.get(TopicPartition(topic, partition)) if offsets else None

    def of_group(self, group: str) -> dict[TopicPartition, OffsetValue]:
        return dict(self._by_group.get(group, {}))

    def has_group(self, group: str) -> bool:
        return group in self._by_group

    def groups(self) -> list[str]:
        return list(self._by_group)

    def items(self) -> Iterator[tuple[str, str, int, OffsetValue]]:
        for group, offsets in self._by_group.items():
            for (topic, partition), value in offsets.items():
                yield group, topic, partition, value

    def of_topic(self, topic: str) -> list[tuple[str, int]]:
        """(group, partition) of every offset committed for `topic` (to clean up a deleted topic)."""
        return [(g, p) for g, t, p, _ in self.items() if t == topic]

    def expired(
        self, now_ms: int, retention_ms: int, empty_since_ms: Callable[[str], int | None]
    ) -> list[tuple[str, str, int]]:
        """Offsets due for removal. `empty_since_ms(group)` is when the group became empty,
        None while it has members; groups unknown to the membership side count as
        'never had members' and expire by commit time."""
        due = []
        for group, offsets in self._by_group.items():
            since = empty_since_ms(group)
            for (topic, partition), value in offsets.items():
                if value.expire_timestamp_ms >= 0:
                    expired = now_ms >= value.expire_timestamp_ms
                elif since is None:
                    expired = False
                else:
                    base = since if since >= 0 else value.commit_timestamp_ms
                    expired = now_ms >= base + retention_ms
                if expired:
                    due.append((group, topic, partition))
        return due


OffsetChange = tuple[str, str, int, "OffsetValue | None"]  # group, topic, partition, value (None: deleted)
WrittenChange = tuple[OffsetChange, int]  # a change and the log offset of the batch that wrote it


class ReplicatedOffsets:
    """Offsets of one `__consumer_offsets` partition this coordinator leads, as appended
    (`latest`) and as replicated (`committed`). Changes move from one to the other, in log
    order, once the partition's high watermark passes the batch that holds them."""

    def __init__(self) -> None:
        self.latest = OffsetStore()
        self.committed = OffsetStore()
        self._pending: deque[tuple[int, list[OffsetChange]]] = deque()  # (end offset, changes)
        self._written_at: dict[tuple[str, str, int], int] = {}  # log offset behind each latest offset

    def appended(self, first_offset: int, end_offset: int, changes: list[OffsetChange]) -> None:
        """Changes written by the batch at `first_offset`, ending before `end_offset`."""
        self._append(end_offset, [(change, first_offset) for change in changes], newer_only=False)

    def committed_txn(self, end_offset: int, changes: list[WrittenChange]) -> None:
        """A transaction's offsets, at its COMMIT marker ending before `end_offset`: each takes
        effect unless an offset of its partition was written later in the log."""
        self._append(end_offset, changes, newer_only=True)

    def _append(self, end_offset: int, changes: list[WrittenChange], newer_only: bool) -> None:
        applied: list[OffsetChange] = []
        for change, written_at in changes:
            group, topic, partition, value = change
            key = (group, topic, partition)
            if newer_only and self._written_at.get(key, -1) > written_at:
                continue
            _apply(self.latest, group, topic, partition, value)
            if value is None:
                self._written_at.pop(key, None)
            else:
                self._written_at[key] = written_at
            applied.append(change)
        if applied:
            self._pending.append((end_offset, applied))

    def written_at(self, group: str, topic: str, partition: int) -> int | None:
        """The log offset of the batch that wrote the latest offset, None if there is none."""
        return self._written_at.get((group, topic, partition))

    def replicated(self, high_watermark: int) -> None:
        """Expose the changes below `high_watermark`."""
        pending = self._pending
        while pending and pending[0][0] <= high_watermark:
            for group, topic, partition, value in pending.popleft()[1]:
                _apply(self.committed, group, topic, partition, value)

    def is_pending(self, group: str, topic: str, partition: int) -> bool:
        """A change of this offset is appended and not yet replicated."""
        return any((g, t, p) == (group, topic, partition) for _end, changes in self._pending for g, t, p, _v in changes)


def _apply(store: OffsetStore, group: str, topic: str, partition: int, value: OffsetValue | None) -> None:
    if value is None:
        store.remove(group, topic, partition)
    else:
        store.commit(group, topic, partition, value)
