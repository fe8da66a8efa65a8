"""A client's Produce to an internal topic is refused (INVALID_TOPIC_EXCEPTION, as Kafka's
ReplicaManager refuses it): only the coordinators write `__consumer_offsets` and
`__transaction_state`, and a record they cannot read would stop the partition's next load.
The coordinator's own writes go on as before."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from broker.protocol.errors import ErrorCode
from tests.inprocess import InProcessBroker
from tests.integration.clients import build_batch


def test_a_client_cannot_append_to_the_offsets_topic_and_commits_still_work(tmp_path: Path) -> None:
    asyncio.run(scenario(tmp_path))


async def scenario(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path / "data") as harness:
        client = harness.client()
        found = await client.request(FindCoordinatorRequest(key="g", key_type=0), 1)
        assert found.error_code == 0
        assert await client.create_topic("t") == 0

        error, base = await client.produce("__consumer_offsets", 0, build_batch([(b"k", b"garbage")]))
        assert (error, base) == (ErrorCode.INVALID_TOPIC_EXCEPTION, -1)
        error, _ = await client.produce("__consumer_offsets", 0, build_batch([(b"k", b"garbage")]), acks=1)
        assert error == ErrorCode.INVALID_TOPIC_EXCEPTION

        commit = OffsetCommitRequest
        request = commit(
            group_id="g",
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                commit.OffsetCommitRequestTopic(
                    name="t",
                    partitions=[
                        commit.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=5, committed_metadata=""
                        )
                    ],
                )
            ],
        )
        committed = await client.request(request, 8)
        assert committed.topics[0].partitions[0].error_code == 0
        fetch = OffsetFetchRequest
        answer = await client.request(
            fetch(group_id="g", topics=[fetch.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]), 7
        )
        assert answer.topics[0].partitions[0].committed_offset == 5
