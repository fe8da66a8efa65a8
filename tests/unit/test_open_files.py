"""The broker-wide bound on open segment files (broker/log/open_files.py): logs sharing a
tight bound append, read, truncate, flush and recover exactly as unbounded ones, while the
process never holds more segment files than the bound."""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

import pytest

from broker.log import PartitionLog
from broker.log.open_files import OpenFiles, log_file_bound, open_with_room
from tests.unit.test_log_support import T0, all_entries, append_batch, crash, open_log, small_config


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def payloads(log: PartitionLog) -> list[bytes]:
    return [bytes(e.payload) for e in all_entries(log)]


def test_many_logs_hold_no_more_files_than_the_bound(tmp_path: Path) -> None:
    before = open_fds()
    files = OpenFiles(10)
    logs = [open_log(tmp_path / f"p{i}", open_files=files, config=small_config(segment_bytes=300)) for i in range(60)]
    bodies: dict[int, list[bytes]] = {i: [] for i in range(60)}
    for round_ in range(8):  # several segments per log; every log's file closed between its appends
        for i, log in enumerate(logs):
            body = f"{i}:{round_}".encode() * 5
            bodies[i].append(body)
            append_batch(log, payload=body, max_ts=T0 + round_)
            assert len(files) <= 10 and open_fds() - before <= 10
    for i, log in enumerate(logs):  # reads reopen sealed and active segments alike
        assert payloads(log) == bodies[i]
        assert len(log.segment_base_offsets) > 1
    for log in logs:
        log.flush()  # syncs files that were closed for the bound too
        log.close()
    assert len(files) == 0 and open_fds() == before
    for i in range(60):
        reopened = open_log(tmp_path / f"p{i}", config=small_config(segment_bytes=300))
        assert payloads(reopened) == bodies[i]
        reopened.close()


def test_appends_to_a_closed_active_segment_go_to_its_end_and_survive_a_crash(tmp_path: Path) -> None:
    reopened_files: list[int] = []
    files = OpenFiles(1, on_reopen=lambda: reopened_files.append(1))
    first, second = open_log(tmp_path / "a", open_files=files), open_log(tmp_path / "b", open_files=files)
    append_batch(first, payload=b"a0")
    append_batch(second, payload=b"b0")  # closes first's file
    append_batch(first, payload=b"a1")  # reopened for appending, at the end
    first.truncate_to(1)  # a truncation through a reopened file
    append_batch(second, payload=b"b1")
    append_batch(first, payload=b"a2")
    assert reopened_files and len(files) == 1
    crash(first)
    crash(second)
    assert payloads(open_log(tmp_path / "a")) == [b"a0", b"a2"]
    assert payloads(open_log(tmp_path / "b")) == [b"b0", b"b1"]


def test_running_out_of_descriptors_closes_idle_segment_files_and_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28: EMFILE must not fail a produce to a partition for others' idle files."""
    files = OpenFiles(None)
    idle = [open_log(tmp_path / f"idle{i}", open_files=files) for i in range(4)]
    assert len(files) == 4
    real_open = os.open
    failures = [OSError(errno.EMFILE, "Too many open files")]

    def open_once_out_of_descriptors(*args, **kwargs):  # type: ignore[no-untyped-def]
        if failures:
            raise failures.pop()
        return real_open(*args, **kwargs)

    monkeypatch.setattr(os, "open", open_once_out_of_descriptors)
    busy = open_log(tmp_path / "busy", open_files=files)
    monkeypatch.undo()
    append_batch(busy, payload=b"x")
    assert payloads(busy) == [b"x"] and len(files) == 3, "half of the idle files were closed"
    for log in idle:
        append_batch(log, payload=b"y")
        assert payloads(log) == [b"y"]
    with pytest.raises(OSError) as other:  # any other error is not hidden
        open_with_room(files, tmp_path / "missing" / "file", os.O_RDONLY)
    assert other.value.errno == errno.ENOENT


def test_the_bound_comes_from_the_descriptor_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    available = hard if hard != resource.RLIM_INFINITY else soft
    assert log_file_bound(0) == max(available // 2, 1)
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard, "the soft limit is raised to the hard one"
    assert log_file_bound(100) == 100
    with pytest.raises(ValueError, match=r"log.open.files.max=\d+ leaves fewer than 1024 .*ulimit -n"):
        log_file_bound(available)
    with pytest.raises(ValueError):
        OpenFiles(0)
