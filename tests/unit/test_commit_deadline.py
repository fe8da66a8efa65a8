"""The leader's side of a commit (LocalCommitter) at its edges: the wal.commit.deadline.ms
boundary (invariant 4: "leaders reject commits of objects older than the deadline", so an
object exactly `deadline` ms old is still committed and one ms older is refused), and
coordinates no batch can have (refused for that partition, nothing appended, the others of the
same commit unaffected)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from broker.clock import SystemClock
from broker.wal.commit import COMMIT_VERSION, CommitBatch, CommitPartition, CommitRequest
from broker.objectstore import MemoryObjectStore
from broker.protocol.errors import ErrorCode
from tests.unit.test_partition import CLOCK_START, batch
from tests.unit.test_wal_writer import CLUSTER, TOPIC_ID, Rig
from walfiles.keys import WalKeyAllocator

DEADLINE_MS = 60_000  # the Rig's LocalCommitter


def commit_request(rig: Rig, object_id: str, coordinates: dict[int, tuple[int, int]] | None = None) -> CommitRequest:
    """One batch for each of partitions 0 and 1; (offset, length) overrides per partition."""
    parts = []
    for index in (0, 1):
        append = rig.append(index, batch(0, producer_id=50 + index))
        [(raw, head)] = append.batches
        offset, length = (coordinates or {}).get(index, (8, len(raw)))
        parts.append(CommitPartition(TOPIC_ID, index, -1, [CommitBatch(head, offset, length)], -1))
    return CommitRequest(COMMIT_VERSION, object_id, parts)


def object_aged(age_ms: int) -> str:
    return WalKeyAllocator("", CLUSTER, 0, lambda: CLOCK_START - age_ms, first_sequence=0).next().object_id


@pytest.mark.parametrize(
    "age_ms, committed",
    [
        (0, True),
        (DEADLINE_MS - 1, True),
        (DEADLINE_MS, True),
        (DEADLINE_MS + 1, False),
        (10 * DEADLINE_MS, False),
    ],
)
def test_commit_deadline_boundary(tmp_path: Path, age_ms: int, committed: bool) -> None:
    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=2)
        response = rig.committer.apply(commit_request(rig, object_aged(age_ms)))
        codes = [r.error_code for r in response.results]
        if committed:
            assert codes == [0, 0]
            assert [rig.partitions[i].log.log_end_offset for i in (0, 1)] == [2, 2]
        else:
            assert codes == [ErrorCode.REQUEST_TIMED_OUT] * 2
            assert all("wal.commit.deadline.ms" in r.error_message for r in response.results)
            assert [rig.partitions[i].log.log_end_offset for i in (0, 1)] == [0, 0]

    asyncio.run(scenario())


@pytest.mark.parametrize("offset, length", [(-1, 100), (8, 0), (8, -100), (-(2**40), -1)])
def test_commit_with_impossible_coordinates_fails_only_that_partition(tmp_path: Path, offset: int, length: int) -> None:
    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=2)
        response = rig.committer.apply(commit_request(rig, object_aged(0), {1: (offset, length)}))
        assert [r.error_code for r in response.results] == [0, ErrorCode.CORRUPT_MESSAGE]
        assert "bad range" in response.results[1].error_message
        assert [rig.partitions[i].log.log_end_offset for i in (0, 1)] == [2, 0]

    asyncio.run(scenario())


def test_a_version_2_commit_is_answered_unsupported_version(tmp_path: Path) -> None:
    """A representative not yet upgraded (rolling upgrade) sends version 2, without
    `mode_offset`: it decodes, and is refused as a version the leader does not know, rather
    than its connection being dropped as undecodable."""

    async def scenario() -> None:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=2)
        current = commit_request(rig, object_aged(0))
        old = [
            current.version - 1,
            current.object_id,
            [list(msgspec.structs.astuple(p))[:4] for p in current.partitions],
        ]
        request = msgspec.msgpack.decode(msgspec.msgpack.encode(["commit", *old]), type=CommitRequest)
        response = rig.committer.apply(request)
        assert [r.error_code for r in response.results] == [ErrorCode.UNSUPPORTED_VERSION] * 2
        assert [rig.partitions[i].log.log_end_offset for i in (0, 1)] == [0, 0]

    asyncio.run(scenario())
