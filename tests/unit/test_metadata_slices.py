"""A full Metadata answer hands the event loop back between topics (issue 28): over 100,000
partitions the handler held the loop for 1.4 s, long enough to miss lease keep-alives and
stall every other client. Time here is a clock that moves 5 ms whenever it is read, so the
answer's 40 topics take more than a slice; other tasks must get turns meanwhile, and the
answer must still describe every partition."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from broker.clock import ManualClock
from broker.handlers import metadata
from broker.protocol.api_keys import ApiKey
from broker.protocol.error_codes import error_codes
from broker.protocol.errors import ErrorCode
from broker.protocol.header import RequestHeader
from broker.protocol.messages import encode_response
from tests.topic_view import topic_view_context

TOPICS, PER_TOPIC = 40, 10


class MovingClock(ManualClock):
    def monotonic(self) -> float:
        self.advance(5)
        return super().monotonic()


async def context() -> SimpleNamespace:
    sizes = {f"t{t}": PER_TOPIC for t in range(TOPICS)}
    return await topic_view_context(sizes, clock=MovingClock())


def test_a_full_metadata_answer_lets_other_tasks_run_and_describes_everything() -> None:
    async def scenario() -> None:
        ctx = await context()
        turns = 0
        answering = True

        async def other_work() -> None:
            nonlocal turns
            while answering:
                turns += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        header = RequestHeader(ApiKey.METADATA, 12, 7, "client")
        answer = await metadata.handle(ctx, header, MetadataRequest(topics=None, allow_auto_topic_creation=False))  # type: ignore[arg-type]
        answering = False
        await other
        assert turns > 5, "the answer held the event loop from start to end"
        decoded = MetadataResponse.decode(b"".join(encode_response(header, answer)[1:]), version=12)
        assert [t.name for t in decoded.topics] == [f"t{t}" for t in range(TOPICS)]
        assert all(
            [(p.partition_index, p.leader_id, p.leader_epoch, p.error_code) for p in t.partitions]
            == [(i, 0, 3, 0) for i in range(PER_TOPIC)]
            for t in decoded.topics
        )

    asyncio.run(scenario())


def test_the_error_codes_of_a_hand_encoded_answer_reach_the_error_metric() -> None:
    """shoal_request_errors_total reads the codes of an encoded body from the body's list."""

    async def scenario() -> None:
        ctx = await context()
        ctx.config = SimpleNamespace(auto_create_topics_enable=False)
        header = RequestHeader(ApiKey.METADATA, 12, 7, "client")
        asked = [MetadataRequest.MetadataRequestTopic(name="missing", topic_id=uuid.UUID(int=0))]
        answer = await metadata.handle(ctx, header, MetadataRequest(topics=asked, allow_auto_topic_creation=True))  # type: ignore[arg-type]
        assert error_codes(answer) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        decoded = MetadataResponse.decode(b"".join(encode_response(header, answer)[1:]), version=12)
        assert [(t.name, t.error_code, t.partitions) for t in decoded.topics] == [
            ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
        ]

    asyncio.run(scenario())
