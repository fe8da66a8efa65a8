"""What one replica's log references (broker/wal_references.py), on real partition logs: the
oldest referenced object across segments, kept up incrementally and correct after retention,
DeleteRecords, truncation and a restart at the leader's log start; and which of some asked
objects the log references."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.config import load_config
from broker.log.coordinates import make_ref
from broker.metadata.records import PartitionStateRecord
from broker.log_validator import prepare_diskless
from broker.partition import Partition
from broker.topic_config import effective
from broker import wal_references
from tests.integration.clients import build_batch
from walfiles.keys import format_wal_id

T0 = 1_700_000_000_000


def object_id(created_ms: int, sequence: int = 0) -> str:
    return format_wal_id(created_ms, 1, sequence)


@pytest.fixture
def partition(tmp_path: Path):
    settings = effective({"diskless.enable": "true", "segment.bytes": "150"}, load_config(environ={}))  # ~2 per segment
    clock = ManualClock(T0)
    opened = Partition.open("t", 0, tmp_path / "t-0", settings, clock, 86_400_000, on_append=lambda _p: None)
    opened.make_leader(0, PartitionStateRecord(1, [0], 0, 0, [0]), 1)
    yield opened
    opened.close()


def commit(partition: Partition, oid: str) -> None:
    [(view, head)] = prepare_diskless(memoryview(build_batch([(None, b"x")], timestamp_ms=T0)), partition.settings, T0)
    partition.append_coordinates([(head, make_ref(oid, 8, len(view)))], acks=1, mode_offset=-1)


def test_the_oldest_reference_follows_appends_retention_and_delete_records(partition: Partition) -> None:
    refs = partition.wal_references
    assert refs.oldest_created_ms() is None
    for i, created in enumerate([T0 + 30, T0 + 10, T0 + 40, T0 + 50, T0 + 60, T0 + 70]):
        commit(partition, object_id(created, i))
    assert len(partition.log.segment_base_offsets) >= 3
    assert refs.oldest_created_ms() == T0 + 10  # not in commit order: the minimum, not the first
    partition.log.delete_records_before(2)  # inside or at a segment boundary: entries 0-1 gone
    assert refs.oldest_created_ms() == T0 + 40
    partition.log.delete_records_before(5)
    assert refs.oldest_created_ms() == T0 + 70
    partition.log.delete_records_before(6)  # everything: nothing referenced
    assert refs.oldest_created_ms() is None


def test_a_truncated_tail_stops_counting_and_new_entries_at_its_offsets_count(partition: Partition) -> None:
    refs = partition.wal_references
    for i, created in enumerate([T0 + 50, T0 + 60, T0 + 5]):
        commit(partition, object_id(created, i))
    assert refs.oldest_created_ms() == T0 + 5
    partition.truncate_to(2)
    assert refs.oldest_created_ms() == T0 + 50
    commit(partition, object_id(T0 + 55, 9))
    assert refs.oldest_created_ms() == T0 + 50
    assert refs.referenced_among({object_id(T0 + 5, 2): T0 + 5, object_id(T0 + 55, 9): T0 + 55}) == {
        object_id(T0 + 55, 9): 2
    }
    partition.restart_at(10)
    assert refs.oldest_created_ms() is None


def test_referenced_among_finds_exactly_the_referenced_objects(partition: Partition, monkeypatch) -> None:
    monkeypatch.setattr(wal_references, "CHUNK_ENTRIES", 4)
    refs = partition.wal_references
    committed = [object_id(T0 + 10 * i, i) for i in range(40)]
    for oid in committed:
        commit(partition, oid)
    never = {object_id(T0 + 10 * i + 5, 100 + i): T0 + 10 * i + 5 for i in range(40)}
    never[object_id(T0 + 10 * 7, 999)] = T0 + 70  # same millisecond as a committed object
    asked = {**never, committed[3]: T0 + 30, committed[37]: T0 + 370}
    assert refs.referenced_among(asked) == {committed[3]: 3, committed[37]: 37}
    assert refs.referenced_among({}) == {}
