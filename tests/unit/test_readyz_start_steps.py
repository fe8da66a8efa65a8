"""/readyz while a broker starts names the step it waits for, and while it opens its
partitions how far it got (issue 28: a broker with 20,000 partitions spends a minute starting
and said only "starting")."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.partition import Partition
from broker.protocol.errors import ErrorCode
from tests.inprocess import InProcessBroker


def test_readyz_says_which_partition_the_start_is_at(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    async def scenario() -> list[str | None]:
        async with InProcessBroker(tmp_path) as first:
            assert await first.client().create_topic("t", 5) == ErrorCode.NONE
        said: list[str | None] = []
        harness = InProcessBroker(tmp_path)
        opened = Partition.open

        def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
            said.append(harness.broker._not_ready())
            return opened(*args, **kwargs)

        monkeypatch.setattr(Partition, "open", recording)
        said.append(harness.broker._not_ready())
        async with harness:
            said.append(harness.broker._not_ready())
        return said

    said = asyncio.run(scenario())
    assert said[0] == "starting: opening the metrics listener"
    opening = [s for s in said if s and "opening partitions" in s]
    # t's 5 partitions and the offsets topic's one; each message counts what was looked at before
    assert opening[0] == "starting: opening partitions (0 of 6 partition states looked at)", said
    assert opening[-1] == "starting: opening partitions (5 of 6 partition states looked at)", said
    assert said[-1] is None  # started: ready
