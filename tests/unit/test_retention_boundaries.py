"""Retention at its exact boundaries, as Kafka's UnifiedLog has them: a segment goes by time
when now - its largest timestamp > retention.ms (exactly retention.ms old stays), and by size
while the log minus that segment is still >= retention.bytes."""

from __future__ import annotations

import pytest

from broker.clock import ManualClock
from tests.unit.test_log_support import T0, append_batch, open_log, small_config

RETENTION_MS = 10_000


@pytest.mark.parametrize("age_ms, deleted", [(RETENTION_MS - 1, 0), (RETENTION_MS, 0), (RETENTION_MS + 1, 1)])
def test_retention_ms_boundary(tmp_path, age_ms: int, deleted: int) -> None:  # type: ignore[no-untyped-def]
    clock = ManualClock(T0)
    log = open_log(tmp_path, clock, small_config(segment_bytes=400, retention_ms=RETENTION_MS))
    for i in range(6):
        append_batch(log, 1, 100, T0 + i * 1000)  # two entries per segment: the first's newest is T0+1000
    bases = log.segment_base_offsets
    assert len(bases) >= 3
    assert log.enforce_retention(T0 + 1000 + age_ms) == deleted
    assert log.log_start_offset == (bases[1] if deleted else 0)
    log.close()


def test_retention_bytes_boundary(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def logged(retention_bytes: int):  # type: ignore[no-untyped-def]
        directory = tmp_path / str(retention_bytes)
        log = open_log(
            directory, config=small_config(segment_bytes=300, retention_bytes=retention_bytes, retention_ms=-1)
        )
        for _ in range(4):
            append_batch(log, 1, 100)  # one entry per segment
        return log

    probe = logged(-1)
    one = probe.size_bytes // 4
    assert probe.size_bytes == 4 * one
    probe.close()
    at_boundary = logged(3 * one)  # dropping the oldest leaves exactly retention.bytes: it goes
    assert at_boundary.enforce_retention() == 1
    at_boundary.close()
    above = logged(3 * one + 1)  # dropping it would go below: it stays
    assert above.enforce_retention() == 0
    above.close()
