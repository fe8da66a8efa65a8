"""Where a topic's mode switch stands, per partition, from the cluster view (what leaders
recorded in the partition states once their mode markers were committed, switch.py).
Any broker can answer: `shoal topics describe`, DescribeConfigs' `diskless.mode.status`,
and the admin API's `topics.modes` all read this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..metadata.records import NO_LEADER, PartitionStateRecord
from ..partition_ids import TopicIdPartition
from ..topic_mode import TopicMode, partition_mode

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from ..topics import Topic

STATUS_CONFIG = "diskless.mode.status"  # the read-only DescribeConfigs entry


@dataclass(frozen=True, slots=True)
class PartitionMode:
    partition: int
    mode: TopicMode  # settled, or on the way to the topic's (a transitional state)
    boundary: int  # offset of the committed mode marker of the last switch (-1: never switched)
    leader: int


def recorded_mode(record: PartitionStateRecord, topic: Topic) -> tuple[bool, int]:
    """(diskless, marker offset) of a partition as its state record says (committed)."""
    return (topic.born_diskless if record.diskless is None else record.diskless), record.mode_offset


def partition_modes(topic: Topic, view: ClusterView) -> list[PartitionMode]:
    found = []
    for index in range(topic.partitions):
        state = view.partitions.get(TopicIdPartition.of(topic.topic_id, index))
        if state is None:
            found.append(
                PartitionMode(index, partition_mode(topic.born_diskless, topic.settings.diskless), -1, NO_LEADER)
            )
            continue
        diskless, boundary = recorded_mode(state.record, topic)
        found.append(
            PartitionMode(index, partition_mode(diskless, topic.settings.diskless), boundary, state.record.leader)
        )
    return found


def switch_status(topic: Topic, modes: list[PartitionMode]) -> str:
    """One line: the topic's mode when every partition is in it, else the switch's progress
    and what each waiting partition waits for."""
    wanted = "diskless" if topic.settings.diskless else "classic"
    waiting = [m for m in modes if m.mode.value != wanted]
    if not waiting:
        return wanted
    reasons = ", ".join(
        f"{m.partition} ({'no leader' if m.leader == NO_LEADER else f'leader {m.leader}'})" for m in waiting[:10]
    )
    more = f" and {len(waiting) - 10} more" if len(waiting) > 10 else ""
    return f"switching to {wanted}: {len(modes) - len(waiting)} of {len(modes)} partitions switched; waiting: {reasons}{more}"
