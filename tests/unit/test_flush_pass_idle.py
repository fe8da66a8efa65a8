"""The broker's one-second flush and roll pass looks only at logs with something due (issue
28): it asked every partition's log every second whether it needed a roll or a flush, about
4 microseconds each, so 20,000 idle partitions cost 8% of a core for nothing. After one look
an idle log is skipped until its next roll or flush time; an append brings it back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.log import PartitionLog
from broker.protocol.errors import ErrorCode
from tests.inprocess import InProcessBroker
from tests.integration.clients import build_batch


def test_an_idle_pass_asks_no_log_and_an_append_is_looked_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[PartitionLog] = []
    needs_flush = PartitionLog.needs_flush

    def counting(self: PartitionLog, now_ms: int) -> bool:
        asked.append(self)
        return needs_flush(self, now_ms)

    monkeypatch.setattr(PartitionLog, "needs_flush", counting)

    async def scenario() -> None:
        async with InProcessBroker(tmp_path, {"log.flush.interval.ms": "600000"}) as harness:
            client = harness.client()
            assert await client.create_topic("t", 30, {"diskless.enable": "false"}) == ErrorCode.NONE
            manager = harness.broker.replica_manager
            await manager._flush_and_roll()  # the first look at each log plans its next
            asked.clear()
            await manager._flush_and_roll()
            assert asked == [], f"an idle pass asked {len(asked)} logs"
            assert await client.produce("t", 7, build_batch([(None, b"v")])) == (ErrorCode.NONE, 0)
            await manager._flush_and_roll()
            assert [(p.topic, p.index) for p in manager.partitions.values() if p.log in asked] == [("t", 7)]

    asyncio.run(scenario())
