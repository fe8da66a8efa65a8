"""Degenerate request bodies for every advertised API and version, through dispatch on an
in-process broker (tests/inprocess.py): decoding refuses what a handler could not use.
The listener's side of bad input (framing, lying lengths, random bytes on a socket) is
tests/integration/test_bad_input.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.protocol.errors import ConnectionFault
from tests.inprocess import InProcessBroker, InProcessClient
from tests.integration.clients import build_batch, decode_records
from tests.integration.test_bad_input import DESTRUCTIVE_API_KEYS, request_header

ANSWER_WAIT_S = 0.1  # a request still unanswered by then is left running, as on a closed connection


async def write_canary(client: InProcessClient) -> tuple[str, list[bytes]]:
    """A topic written before any bad input, with its expected values."""
    assert await client.create_topic("canary", 1) == 0
    values = []
    for b in range(3):
        batch_values = [f"canary-{b}-{i}".encode() for i in range(10)]
        assert (await client.produce("canary", 0, build_batch([(None, v) for v in batch_values])))[0] == 0
        values += batch_values
    return "canary", values


async def assert_healthy(harness: InProcessBroker, canary: tuple[str, list[bytes]]) -> dict[int, tuple[int, int]]:
    topic, values = canary
    client = harness.client()  # a fresh connection
    versions = await client.api_versions()
    part = await client.fetch(topic, 0, 0)
    assert part.error_code == 0 and part.high_watermark == len(values)
    assert [r.value for r in decode_records(part.records)] == values
    return versions


async def send_degenerate(client: InProcessClient, frame: bytes) -> None:
    try:
        await client.send_frame(frame)
    except ConnectionFault:
        pass  # the server closes that connection


def test_degenerate_bodies_for_every_advertised_version(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Empty, all-zero (null arrays/strings in flexible versions, empty ones otherwise) and
    all-0xFF bodies for every advertised API and version: the broker answers or closes the
    connection, but no handler may get an ill-typed request (listed all at once)."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            canary = await write_canary(harness.client())
            versions = await assert_healthy(harness, canary)
            unanswered: set[asyncio.Task[None]] = set()
            for key, (lo, hi) in sorted(versions.items()):
                if key in DESTRUCTIVE_API_KEYS:
                    continue
                for v in range(lo, hi + 1):
                    for name, body in (("empty", b""), ("zeros", b"\0" * 64), ("ff", b"\xff" * 64)):
                        client_id = f"deg-{key}-v{v}-{name}".encode()
                        frame = request_header(key, v, client_id=client_id) + body
                        sent = asyncio.create_task(send_degenerate(harness.client(), frame))
                        await asyncio.wait((sent,), timeout=ANSWER_WAIT_S)
                        unanswered.add(sent)
            await assert_healthy(harness, canary)
            for request in unanswered:
                request.cancel()
            await asyncio.gather(*unanswered, return_exceptions=True)
        offenders = sorted(
            {
                r.getMessage().split("(client ")[1].split(",")[0]
                for r in caplog.records
                if "handler for API" in r.getMessage() and "(client deg-" in r.getMessage()
            }
        )
        assert not offenders, f"handlers crashed on {len(offenders)} degenerate requests: {offenders}"

    asyncio.run(scenario())
