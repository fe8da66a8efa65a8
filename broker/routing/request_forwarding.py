"""Partition requests for diskless partitions this broker does not lead (a stateless broker,
or a representative that hosts no replica or a follower): ListOffsets, OffsetForLeaderEpoch
and DeleteRecords are sent on, per leader, to the partition's leader over the RPC, which
answers them as if the client had asked it. They are rare and small (a consumer's start, a
leader change, an administrator's delete), so their crossing an AZ costs little, and only
the leader may answer them. The leader answers them in dispatch.py (`answer_forwarded`).

Whole Kafka requests, that is; the WAL writer's commits reach their leaders another way
(wal/commit_router.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ..protocol.header import RequestHeader
from ..protocol.messages import RESPONSE_CLASSES
from ..rpc import RpcError, RpcUnavailable
from .messages import ROUTING_VERSION, KafkaForwardRequest, KafkaForwardResponse

if TYPE_CHECKING:
    from .site import RoutingSite

FORWARD_TIMEOUT_S = 30.0


def sub_request(request: Any, topics_attr: str, partitions_attr: str, wanted: list[tuple[int, int]]) -> Any:
    """A new request like `request` holding only the (topic position, partition position) pairs."""
    topics: dict[int, list[int]] = {}
    for t, p in wanted:
        topics.setdefault(t, []).append(p)
    kept = []
    for t, positions in topics.items():
        topic = getattr(request, topics_attr)[t]
        kept.append(_rebuilt(topic, **{partitions_attr: [getattr(topic, partitions_attr)[p] for p in positions]}))
    return _rebuilt(request, **{topics_attr: kept})


def _rebuilt(message: Any, **changes: Any) -> Any:
    """kafka-python messages are built from their fields (a decoded one cannot be copied)."""
    fields = {name: getattr(message, name) for name in message.fields if hasattr(message, name)}
    return type(message)(**{**fields, **changes})


async def forward(broker: "RoutingSite", node: int, header: RequestHeader, request: Any) -> Any:
    """Send `request` to broker `node` and return its decoded response (RpcError if it fails)."""
    registration = broker.view.brokers.get(node)
    if registration is None:
        raise RpcUnavailable(f"broker {node} left the cluster")
    message = KafkaForwardRequest(
        ROUTING_VERSION,
        header.api_key,
        header.api_version,
        header.client_id,
        bytes(request.encode(version=header.api_version)),
    )
    client = broker.rpc_pool.get(node, registration.rpc_host or "", registration.rpc_port)
    answer = cast(KafkaForwardResponse, await client.call(message, FORWARD_TIMEOUT_S))
    return RESPONSE_CLASSES[header.api_key].decode(answer.body, version=header.api_version)


class Forwarded:
    """Slots of a response left for partitions answered elsewhere, filled by `fill`."""

    def __init__(self) -> None:
        self._wanted: dict[int, list[tuple[int, int]]] = {}  # node -> (topic pos, partition pos)
        self._slots: dict[tuple[int, int], tuple[list[Any], int]] = {}

    def reserve(self, node: int, position: tuple[int, int], results: list[Any]) -> None:
        self._wanted.setdefault(node, []).append(position)
        self._slots[position] = (results, len(results))
        results.append(None)

    async def fill(
        self,
        broker: "RoutingSite",
        header: RequestHeader,
        request: Any,
        topics_attr: str,
        partitions_attr: str,
        failed: Callable[[Any], Any],
        answers_attr: str | None = None,
    ) -> None:
        """Ask each node for its partitions (concurrently); `failed(original partition)` makes
        the answer for a partition whose node could not be asked. `answers_attr`: the
        response's per-topic list when it is not named like the request's (DescribeProducers
        asks `partition_indexes` and answers `partitions`)."""

        async def ask(node: int, wanted: list[tuple[int, int]]) -> None:
            try:
                response = await forward(
                    broker, node, header, sub_request(request, topics_attr, partitions_attr, wanted)
                )
                answers = [
                    p for t in getattr(response, topics_attr) for p in getattr(t, answers_attr or partitions_attr)
                ]
            except RpcError:
                answers = [failed(getattr(getattr(request, topics_attr)[t], partitions_attr)[p]) for t, p in wanted]
            for position, answer in zip(wanted, answers):
                results, slot = self._slots[position]
                results[slot] = answer

        await asyncio.gather(*(ask(node, wanted) for node, wanted in self._wanted.items()))
