"""Metadata with auto-creation when the topic is created by another client and deleted again
before this request reads it back: Kafka answers UNKNOWN_TOPIC_OR_PARTITION for that topic.
(Before, the handler described `None` and failed, which closed the client's connection.)"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.handlers import metadata
from broker.protocol.errors import ApiError, ErrorCode


def test_a_topic_created_elsewhere_and_deleted_at_once_is_unknown() -> None:
    async def create(prepared, assignment):  # type: ignore[no-untyped-def]
        raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, "created by another client")

    broker = SimpleNamespace(
        catalog=SimpleNamespace(
            get=lambda name: None,
            by_id=lambda topic_id: None,
            prepare=lambda name, partitions, configs: SimpleNamespace(partitions=1),
            create=create,
        ),
        config=SimpleNamespace(auto_create_topics_enable=True, default_replication_factor=1),
        assign_replicas=lambda partitions, factor: {},
    )
    answer = asyncio.run(metadata._lookup(broker, "gone", None, True))  # type: ignore[arg-type]
    assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and answer.name == "gone"
