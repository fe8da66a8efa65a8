"""The controller's election on a real in-process broker (tests/inprocess.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.inprocess import InProcessBroker


def test_a_controller_whose_campaign_answer_was_lost_takes_the_key_up(tmp_path: Path) -> None:
    """Regression (found by the wal_gc simulation, seed 16): the controller key was written
    but the answer lost, so the process was not active while the key named it; nobody else
    campaigns while the key lives (as long as its lease), so the cluster had no controller,
    and no WAL file manager, for good."""

    async def test(harness: InProcessBroker) -> None:
        controller = harness.broker.controller
        assert controller.active
        controller.active = False  # the state an ambiguous campaign leaves
        await controller.step()
        assert controller.active, "the key names this incarnation under its lease: it is the controller"

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            await test(harness)

    asyncio.run(scenario())
