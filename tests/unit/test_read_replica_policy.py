"""Which replica may answer a read, or who should (reads/replica_policy.py): pure checks over
a fake broker, its hosted replicas and the cluster view."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.cluster.view import PartitionState
from broker.metadata.records import BrokerRecord, PartitionStateRecord
from broker.protocol.errors import ApiError, ErrorCode
from broker.reads.replica_policy import (
    fetch_replica,
    fetches_elsewhere,
    forward_target,
    holds,
    is_authoritative,
    leader_of,
    source_replica,
)
from broker.topic_mode import TopicMode

TOPIC_ID = "00000000-0000-0000-0000-000000000001"
ME, LEADER, OTHER = 2, 0, 1
NOT_FORWARDED, FORWARDED = SimpleNamespace(forwarded=False), SimpleNamespace(forwarded=True)


def topic(mode: TopicMode) -> SimpleNamespace:
    return SimpleNamespace(name="t", topic_id=TOPIC_ID, partitions=2, mode=mode)


def replica(leading: bool, start: int = 0, end: int = 10) -> SimpleNamespace:
    return SimpleNamespace(
        leader_state=object() if leading else None, log=SimpleNamespace(log_start_offset=start, log_end_offset=end)
    )


def site(
    hosted: SimpleNamespace | None = None,
    leader: int = LEADER,
    isr: tuple[int, ...] = (LEADER, OTHER),
    azs: dict[int, str] | None = None,
) -> SimpleNamespace:
    azs = {LEADER: "az1", OTHER: "az1", ME: "az1"} if azs is None else azs
    partitions = {("t", 0): hosted} if hosted is not None else {}

    def get(name: str, index: int):  # type: ignore[no-untyped-def]
        if (name, index) not in partitions:
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "not a replica")
        return partitions[(name, index)]

    def leader_replica(name: str, index: int):  # type: ignore[no-untyped-def]
        found = get(name, index)
        if found.leader_state is None:
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader")
        return found

    return SimpleNamespace(
        config=SimpleNamespace(node_id=ME, az="az1"),
        view=SimpleNamespace(
            partitions={
                (TOPIC_ID, 0): PartitionState(PartitionStateRecord(1, [LEADER, OTHER, ME], leader, 3, list(isr)), 1)
            },
            brokers={n: BrokerRecord(1, n, az, "h", 9092, "h", 9093, False, "0", "x") for n, az in azs.items()},
        ),
        replica_manager=SimpleNamespace(partitions=partitions, get=get, leader=leader_replica),
    )


def test_only_the_leader_is_authoritative_and_a_replica_holds_its_log_end() -> None:
    assert is_authoritative(replica(True)) and not is_authoritative(replica(False))
    assert holds(replica(False, 2, 10), 2) and holds(replica(False, 2, 10), 10)
    assert not holds(replica(False, 2, 10), 1) and not holds(replica(False, 2, 10), 11)


def test_a_classic_fetch_reads_the_local_leader_only() -> None:
    leading = replica(True)
    assert fetch_replica(site(leading), topic(TopicMode.CLASSIC), 0) is leading
    with pytest.raises(ApiError):
        fetch_replica(site(replica(False)), topic(TopicMode.CLASSIC), 0)
    assert not fetches_elsewhere(site(), topic(TopicMode.CLASSIC), 0, 5)


def test_a_diskless_fetch_reads_any_local_replica_holding_the_offset_else_elsewhere() -> None:
    follower = replica(False, 0, 10)
    diskless = topic(TopicMode.DISKLESS)
    assert fetch_replica(site(follower), diskless, 0) is follower
    assert not fetches_elsewhere(site(follower), diskless, 0, 10)
    assert fetches_elsewhere(site(follower), diskless, 0, 11), "a lagging follower does not answer"
    assert not fetches_elsewhere(site(replica(True, 0, 10)), diskless, 0, 11), "the leader says out of range"
    assert fetches_elsewhere(site(), diskless, 0, 0), "not hosted here"
    assert not fetches_elsewhere(site(), diskless, 2, 0), "no such partition: answered here"


def test_offset_queries_go_to_the_leader_of_a_diskless_partition() -> None:
    diskless = topic(TopicMode.DISKLESS)
    assert forward_target(site(replica(False)), NOT_FORWARDED, diskless, 0) == LEADER
    assert forward_target(site(), NOT_FORWARDED, diskless, 0) == LEADER
    assert forward_target(site(replica(True), leader=ME), NOT_FORWARDED, diskless, 0) is None
    assert forward_target(site(), FORWARDED, diskless, 0) is None, "never sent on twice"
    assert forward_target(site(), NOT_FORWARDED, topic(TopicMode.CLASSIC), 0) is None
    assert forward_target(site(), NOT_FORWARDED, diskless, 5) is None
    assert forward_target(site(azs={OTHER: "az1", ME: "az1"}), NOT_FORWARDED, diskless, 0) is None, "leader gone"


def test_the_source_replica_is_in_sync_in_this_az_leader_first_else_the_leader() -> None:
    assert source_replica(site(), TOPIC_ID, 0) == LEADER
    assert source_replica(site(azs={LEADER: "az2", OTHER: "az1", ME: "az1"}), TOPIC_ID, 0) == OTHER
    assert source_replica(site(isr=(LEADER,), azs={LEADER: "az2", OTHER: "az1", ME: "az1"}), TOPIC_ID, 0) == LEADER
    assert source_replica(site(leader=ME, isr=(ME,)), TOPIC_ID, 0) is None, "never this broker"
    assert source_replica(site(), TOPIC_ID, 1) is None and leader_of(site(), TOPIC_ID, 1) is None
    assert leader_of(site(), TOPIC_ID, 0) == LEADER and leader_of(site(leader=ME), TOPIC_ID, 0) is None
