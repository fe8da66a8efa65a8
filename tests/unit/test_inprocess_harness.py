"""The in-process broker harness (tests/inprocess.py) drives the real handlers: topics,
classic and diskless produce, fetch, ListOffsets and a consumer group's whole round trip,
through dispatch and without a process or a socket."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from broker.protocol.errors import ConnectionFault
from broker.protocol.errors import ErrorCode
from tests.inprocess import InProcessBroker, InProcessClient
from tests.integration.clients import build_batch, decode_records
from tests.integration.groups_support import consumer_assignment, consumer_subscription

MODES = {"classic": "false", "diskless": "true"}
EARLIEST, LATEST = -2, -1


async def list_offset(client: InProcessClient, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
    """ListOffsets of one partition: its (error_code, offset)."""
    wanted = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[
            wanted(name=topic, partitions=[wanted.ListOffsetsPartition(partition_index=partition, timestamp=timestamp)])
        ],
    )
    response = await client.request(request, await client.version(ListOffsetsRequest, cap=7))
    [answer] = response.topics[0].partitions
    return answer.error_code, answer.offset


@pytest.mark.parametrize("mode", sorted(MODES))
def test_create_produce_fetch_and_list_offsets(tmp_path: Path, mode: str) -> None:
    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            assert await client.create_topic("t", 2, {"diskless.enable": MODES[mode]}) == ErrorCode.NONE
            assert await client.create_topic("t", 2) == ErrorCode.TOPIC_ALREADY_EXISTS
            for i in range(3):
                batch = build_batch([(b"k", b"v%d-%d" % (i, r)) for r in range(2)])
                assert await client.produce("t", 1, batch) == (ErrorCode.NONE, 2 * i)
            part = await client.fetch("t", 1, 0)
            assert part.error_code == ErrorCode.NONE and part.high_watermark == 6
            assert [r.value for r in decode_records(part.records)] == [
                b"v%d-%d" % (i, r) for i in range(3) for r in range(2)
            ]
            assert await list_offset(client, "t", 1, EARLIEST) == (ErrorCode.NONE, 0)
            assert await list_offset(client, "t", 1, LATEST) == (ErrorCode.NONE, 6)
            assert await list_offset(client, "t", 0, LATEST) == (ErrorCode.NONE, 0)
            assert (await client.produce("nope", 0, build_batch([(b"k", b"v")])))[
                0
            ] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    asyncio.run(scenario())


def test_diskless_batches_land_in_the_object_store(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            assert await client.create_topic("d", 1, {"diskless.enable": "true"}) == ErrorCode.NONE
            assert await client.produce("d", 0, build_batch([(b"k", b"v")])) == (ErrorCode.NONE, 0)
            assert len(harness.objects.keys()) == 1

    asyncio.run(scenario())


def test_a_consumer_group_round_trip(tmp_path: Path) -> None:
    """FindCoordinator, JoinGroup (following MEMBER_ID_REQUIRED), SyncGroup, Heartbeat,
    OffsetCommit, OffsetFetch: one member through the real coordinator."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path, {"group.initial.rebalance.delay.ms": "0"}) as harness:
            client = harness.client("consumer-1")
            assert await client.create_topic("orders", 2) == ErrorCode.NONE
            found = await client.request(
                FindCoordinatorRequest(key="g", key_type=0, coordinator_keys=["g"]),
                await client.version(FindCoordinatorRequest, cap=4),
            )
            [coordinator] = found.coordinators
            assert coordinator.error_code == ErrorCode.NONE and coordinator.node_id == harness.broker.node_id

            protocol = JoinGroupRequest.JoinGroupRequestProtocol(
                name="range", metadata=consumer_subscription(["orders"])
            )

            async def join(member_id: str) -> Any:
                return await client.request(
                    JoinGroupRequest(
                        group_id="g",
                        session_timeout_ms=10_000,
                        rebalance_timeout_ms=10_000,
                        member_id=member_id,
                        group_instance_id=None,
                        protocol_type="consumer",
                        protocols=[protocol],
                        reason=None,
                    ),
                    await client.version(JoinGroupRequest, cap=9),
                )

            first = await join("")
            assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
            joined = await join(first.member_id)
            assert joined.error_code == ErrorCode.NONE and joined.leader == joined.member_id == first.member_id
            member, generation = joined.member_id, joined.generation_id

            assignment = SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=member, assignment=consumer_assignment("orders", [0, 1])
            )
            synced = await client.request(
                SyncGroupRequest(
                    group_id="g",
                    generation_id=generation,
                    member_id=member,
                    group_instance_id=None,
                    protocol_type="consumer",
                    protocol_name="range",
                    assignments=[assignment],
                ),
                await client.version(SyncGroupRequest, cap=5),
            )
            assert synced.error_code == ErrorCode.NONE
            assert synced.assignment == consumer_assignment("orders", [0, 1])

            beat = await client.request(
                HeartbeatRequest(group_id="g", generation_id=generation, member_id=member, group_instance_id=None),
                await client.version(HeartbeatRequest, cap=4),
            )
            assert beat.error_code == ErrorCode.NONE

            topic = OffsetCommitRequest.OffsetCommitRequestTopic
            committed = await client.request(
                OffsetCommitRequest(
                    group_id="g",
                    generation_id_or_member_epoch=generation,
                    member_id=member,
                    group_instance_id=None,
                    retention_time_ms=-1,
                    topics=[
                        topic(
                            name="orders",
                            partitions=[
                                topic.OffsetCommitRequestPartition(
                                    partition_index=p,
                                    committed_offset=10 + p,
                                    committed_leader_epoch=-1,
                                    commit_timestamp=-1,
                                    committed_metadata="m",
                                )
                                for p in (0, 1)
                            ],
                        )
                    ],
                ),
                await client.version(OffsetCommitRequest, cap=8),
            )
            assert [p.error_code for t in committed.topics for p in t.partitions] == [ErrorCode.NONE] * 2

            group = OffsetFetchRequest.OffsetFetchRequestGroup
            fetched = await client.request(
                OffsetFetchRequest(
                    groups=[
                        group(
                            group_id="g",
                            member_id=None,
                            member_epoch=-1,
                            topics=[group.OffsetFetchRequestTopics(name="orders", partition_indexes=[0, 1])],
                        )
                    ],
                    require_stable=False,
                ),
                await client.version(OffsetFetchRequest, cap=9),
            )
            [answer] = fetched.groups
            assert answer.error_code == ErrorCode.NONE
            assert {
                p.partition_index: (p.committed_offset, p.metadata) for t in answer.topics for p in t.partitions
            } == {0: (10, "m"), 1: (11, "m")}

    asyncio.run(scenario())


def test_the_manual_clock_drives_time_based_broker_logic(tmp_path: Path) -> None:
    """Record ages are measured on the harness's clock: a batch stamped at the clock's now is
    accepted, and the same batch is refused once the clock has moved past
    message.timestamp.before.max.ms, without any real time passing."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path, start_ms=1_000_000_000_000) as harness:
            client = harness.client()
            assert await client.create_topic("t", 1, {"message.timestamp.before.max.ms": "60000"}) == 0
            stamped = build_batch([(b"k", b"v")], timestamp_ms=1_000_000_000_000)
            assert await client.produce("t", 0, stamped) == (ErrorCode.NONE, 0)
            harness.clock.advance(120_000)
            assert (await client.produce("t", 0, stamped))[0] == ErrorCode.INVALID_TIMESTAMP

    asyncio.run(scenario())


def test_a_frame_the_server_would_close_the_connection_on_is_a_connection_fault(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            with pytest.raises(ConnectionFault):
                await harness.client().send_frame(b"\x27\x0f\x00\x00\x00\x00\x00\x01")  # API 9999

    asyncio.run(scenario())
