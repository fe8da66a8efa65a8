"""Committed offsets of all groups a coordinator owns: an in-memory map rebuilt from
`__consumer_offsets`, with Kafka's expiry rule (KIP-211): offsets of a group expire
`offsets.retention.minutes` after the group became empty (or, for a group that never had
members, after the commit), or at the explicit expiry time old clients asked for.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterator

from .records import OffsetValue

TopicPartition = tuple[str, int]


class OffsetStore:
    def __init__(self) -> None:
        self._by_group: dict[str, dict[TopicPartition, OffsetValue]] = defaultdict(dict)

    def commit(self, group: str, topic: str, partition: int, value: OffsetValue) -> None:
        self._by_group[group][(topic, partition)] = value

    def remove(self, group: str, topic: str, partition: int) -> bool:
        offsets = self._by_group.get(group)
        if offsets is None or offsets.pop((topic, partition), None) is None:
            return False
        if not offsets:
            del self._by_group[group]
        return True

    def get(self, group: str, topic: str, partition: int) -> OffsetValue | None:
        offsets = self._by_group.get(group)
        return offsets.get((topic, partition)) if offsets else None

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

    def expired(self, now_ms: int, retention_ms: int,
                empty_since_ms: Callable[[str], int | None]) -> list[tuple[str, str, int]]:
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
