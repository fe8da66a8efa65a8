"""Which replica may answer a read of a partition, or who should: one policy for Fetch,
ListOffsets, OffsetForLeaderEpoch and the replica read service.

- A partition whose mode does not serve by AZ (classic) is read from its leader only.
- One that does (diskless) is served to a client by its AZ's representative: from the
  replica it hosts, leader or follower, when that replica holds the offset asked for; else
  from a source replica elsewhere: an in-sync replica in this broker's AZ (the leader
  first), else the leader. Record bytes come from the object store either way.
- Only the leader may say OFFSET_OUT_OF_RANGE: a client told so by a lagging replica (it
  restarted, or retention moved its log start) would reset its offsets. A follower that
  does not hold an offset serves nothing, or sends the asking broker on to the leader.
- Offset queries (ListOffsets, OffsetForLeaderEpoch) are answered from the leader's log end
  and epoch history only: a follower's may lag, and a client would act on them (reset its
  offsets, or see a truncation that did not happen). Other brokers send them on to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..partition_ids import TopicIdPartition, TopicPartition

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from ..config import BrokerConfig
    from ..partition import Partition
    from ..protocol.header import RequestHeader
    from ..replica_manager import ReplicaManager
    from ..topics import Topic


class ReplicaSite(Protocol):
    """What the policy reads of this broker: who and where it is, the cluster, its replicas."""

    @property
    def config(self) -> "BrokerConfig": ...

    @property
    def view(self) -> "ClusterView": ...

    @property
    def replica_manager(self) -> "ReplicaManager": ...


def is_authoritative(replica: "Partition") -> bool:
    """Whether this replica may say an offset is out of range: only the leader may."""
    return replica.leader_state is not None


def holds(replica: "Partition", offset: int) -> bool:
    """Whether the replica's log covers `offset` (its log end included: a fetch may wait there)."""
    return replica.log.log_start_offset <= offset <= replica.log.log_end_offset


def fetch_replica(site: ReplicaSite, topic: "Topic", index: int) -> "Partition":
    """The hosted replica a fetch reads: any replica of a partition served by AZ, the leader
    of any other (NOT_LEADER_OR_FOLLOWER or UNKNOWN_TOPIC_OR_PARTITION if there is none here)."""
    if topic.mode.serves_by_az:
        return site.replica_manager.get(topic.name, index)
    return site.replica_manager.leader(topic.name, index)


def fetches_elsewhere(site: ReplicaSite, topic: "Topic", index: int, offset: int) -> bool:
    """Whether a fetch at `offset` must be read from a source replica (`source_replica`):
    the partition is served by AZ and this broker hosts no replica of it, or hosts a follower
    that does not hold the offset."""
    if not topic.mode.serves_by_az or not 0 <= index < topic.partitions:
        return False
    hosted = site.replica_manager.partitions.get(TopicPartition(topic.name, index))
    return hosted is None or (not is_authoritative(hosted) and not holds(hosted, offset))


def forward_target(site: ReplicaSite, header: "RequestHeader", topic: "Topic", index: int) -> int | None:
    """The broker to send an offset query about this partition to, or None to answer here:
    the leader of a partition served by AZ, when this broker is not it (and the query was
    not itself sent on)."""
    if header.forwarded or not topic.mode.serves_by_az or not 0 <= index < topic.partitions:
        return None
    hosted = site.replica_manager.partitions.get(TopicPartition(topic.name, index))
    if hosted is not None and is_authoritative(hosted):
        return None
    return leader_of(site, str(topic.topic_id), index)


def source_replica(site: ReplicaSite, topic_id: str, partition: int) -> int | None:
    """Who serves a partition's entries to this broker when it cannot: an in-sync replica
    in its AZ (the leader first), else the leader; never this broker itself."""
    state = site.view.partitions.get(TopicIdPartition(topic_id, partition))
    if state is None:
        return None
    record = state.record
    live = site.view.brokers
    me = site.config.node_id
    in_sync = [r for r in [record.leader, *record.isr] if r != me and r in live and live[r].az == site.config.az]
    if in_sync:
        return in_sync[0]
    return record.leader if record.leader != me and record.leader in live else None


def leader_of(site: ReplicaSite, topic_id: str, partition: int) -> int | None:
    """The partition's live leader, if it is another broker."""
    state = site.view.partitions.get(TopicIdPartition(topic_id, partition))
    if state is None:
        return None
    leader = state.record.leader
    return leader if leader != site.config.node_id and leader in site.view.brokers else None
