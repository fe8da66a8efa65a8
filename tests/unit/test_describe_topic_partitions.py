"""DescribeTopicPartitions (API 75) paging as Kafka's DescribeTopicPartitionsRequestHandler
answers: topics in name order from the cursor on, at most the smaller of the client's limit
and `max.request.partition.size.limit` partitions, a cursor to the first partition left out,
errors for unknown topics asked by name and for a cursor that does not fit the request."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kafka.protocol.admin import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse

from broker.handlers import describe_topic_partitions as dtp
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.header import RequestHeader
from tests.topic_view import topic_view_context

SIZES = {"b": 3, "a": 5, "c": 4}  # created out of name order
HEADER = RequestHeader(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 1, "admin")


def ask(
    ctx: SimpleNamespace, names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None
) -> DescribeTopicPartitionsResponse:
    request = DescribeTopicPartitionsRequest(
        topics=[DescribeTopicPartitionsRequest.TopicRequest(name=n) for n in names],
        response_partition_limit=limit,
        cursor=None
        if cursor is None
        else DescribeTopicPartitionsRequest.Cursor(topic_name=cursor[0], partition_index=cursor[1]),
    )
    wire = request.encode(version=0)  # through the wire format, as a client sends it
    answer = asyncio.run(dtp.handle(ctx, HEADER, DescribeTopicPartitionsRequest.decode(wire, version=0)))  # type: ignore[arg-type]
    return DescribeTopicPartitionsResponse.decode(answer.encode(version=0), version=0)


def pages(answer: Any) -> tuple[list[tuple[str, list[int]]], tuple[str, int] | None]:
    cursor = answer.next_cursor
    return (
        [(t.name, [p.partition_index for p in t.partitions]) for t in answer.topics],
        None if cursor is None else (cursor.topic_name, cursor.partition_index),
    )


def context(**config: str) -> SimpleNamespace:
    return asyncio.run(topic_view_context(SIZES, {0: "az-a", 1: "az-b", 2: "az-c"}, config=config))


def test_every_topic_in_name_order_in_pages_that_resume_at_the_cursor() -> None:
    ctx = context()
    assert pages(ask(ctx, [])) == ([("a", [0, 1, 2, 3, 4]), ("b", [0, 1, 2]), ("c", [0, 1, 2, 3])], None)
    assert pages(ask(ctx, [], limit=4)) == ([("a", [0, 1, 2, 3])], ("a", 4))
    assert pages(ask(ctx, [], limit=4, cursor=("a", 4))) == ([("a", [4]), ("b", [0, 1, 2])], ("c", 0))
    assert pages(ask(ctx, [], limit=4, cursor=("c", 0))) == ([("c", [0, 1, 2, 3])], None)
    assert pages(ask(ctx, [], limit=0)) == ([("a", [0])], ("a", 1))  # at least one partition


def test_the_broker_limit_caps_the_clients() -> None:
    ctx = context(**{"max.request.partition.size.limit": "6"})
    assert pages(ask(ctx, [], limit=2000)) == ([("a", [0, 1, 2, 3, 4]), ("b", [0])], ("b", 1))


def test_topics_asked_by_name_and_unknown_ones() -> None:
    ctx = context()
    answer = ask(ctx, ["c", "zz", "a"], limit=100)
    assert [(t.name, t.error_code, len(t.partitions)) for t in answer.topics] == [
        ("a", 0, 5),
        ("c", 0, 4),
        ("zz", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0),
    ]
    assert answer.next_cursor is None


def test_a_cursor_that_does_not_fit_the_request_is_invalid() -> None:
    ctx = context()
    for cursor in (("b", 0), ("a", -1)):
        answer = ask(ctx, ["a", "c"], cursor=cursor)
        assert [(t.name, t.error_code, t.partitions) for t in answer.topics] == [
            ("a", ErrorCode.INVALID_REQUEST, []),
            ("c", ErrorCode.INVALID_REQUEST, []),
        ]


def test_partitions_say_what_metadata_says() -> None:
    """Same leader (a diskless partition's representative in the client's AZ), epoch,
    replicas, ISR and offline replicas as Metadata; no ELR; every topic operation allowed."""
    ctx = context()
    answer = ask(ctx, ["b"])
    (topic,) = answer.topics
    assert topic.topic_authorized_operations == 3576 and topic.is_internal is False
    for p in topic.partitions:
        assert p.leader_id == 0  # the only broker in az-a represents every diskless partition
        assert (p.leader_epoch, len(p.replica_nodes), p.isr_nodes, p.offline_replicas) == (3, 3, p.replica_nodes, [])
        assert (p.eligible_leader_replicas, p.last_known_elr) == ([], [])
