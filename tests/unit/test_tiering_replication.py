"""A follower that starts over above the leader's local log (restart_at) learns the leader's
tiered segments from the OFFSET_OUT_OF_RANGE answer, so it serves and, as a new leader,
keeps the tiered range the old leader committed (regression: without the snapshot a follower
that fell behind the leader's local start forgot every segment tiered below it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.log.markers import EVENT_VERSION, RemoteSegmentEvent, RemoteSegmentState
from broker.protocol.errors import ErrorCode
from tests.unit.test_partition import open_partition
from tests.unit.test_replication_leader_service import Rig


def test_out_of_range_answer_carries_the_tiered_segments_and_the_follower_installs_them(tmp_path: Path) -> None:
    async def scenario() -> None:
        rig = Rig(tmp_path / "leader", isr=(0,))
        for _ in range(4):
            rig.append()
        tiered = RemoteSegmentEvent(EVENT_VERSION, RemoteSegmentState.COPY_SEGMENT_FINISHED, "seg-1", 0, 7, 3, 100, 1)
        rig.partition.append_marker(tiered)
        assert [s.segment_id for s in rig.partition.remote_segments.readable] == ["seg-1"]
        rig.partition.log.delete_records_before(8)  # the local log now starts above the tiered range

        answer = await rig.fetch(0)
        assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and answer.remote_segments

        follower = open_partition(tmp_path / "follower", rig.clock)
        follower.restart_at(answer.log_start_offset)
        follower.remote_segments.install(answer.remote_segments, answer.log_start_offset)
        assert [(s.segment_id, s.base_offset, s.end_offset) for s in follower.remote_segments.readable] == [
            ("seg-1", 0, 7)
        ]
        assert follower.log_start_offset == 0  # the tiered start, as on the leader
        follower.close()
        reopened = open_partition(tmp_path / "follower", rig.clock)
        assert [s.segment_id for s in reopened.remote_segments.readable] == ["seg-1"]

    asyncio.run(scenario())


def test_answer_within_the_log_carries_no_snapshot(tmp_path: Path) -> None:
    async def scenario() -> None:
        rig = Rig(tmp_path, isr=(0,))
        rig.append()
        answer = await rig.fetch(0, wait_s=5.0)
        assert answer.error_code == 0 and answer.remote_segments == b""

    asyncio.run(scenario())
