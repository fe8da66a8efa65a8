"""Leader-epoch cache: Kafka's assign / endOffsetFor / truncate rules, and its checkpoint file."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.epochs import (
    CHECKPOINT_FILE,
    EpochCheckpointError,
    EpochEntry,
    LeaderEpochCache,
)

E = EpochEntry


def cache_of(*entries: tuple[int, int], path: Path | None = None) -> LeaderEpochCache:
    return LeaderEpochCache(path, [E(*e) for e in entries])


# ---- assign ------------------------------------------------------------------------------


def test_empty_cache() -> None:
    cache = LeaderEpochCache()
    assert cache.entries() == [] and cache.latest_epoch == -1 and cache.epoch_start(0) is None


def test_assign_appends_new_epochs() -> None:
    cache = LeaderEpochCache()
    cache.assign(0, 0)
    cache.assign(2, 10)
    assert cache.entries() == [E(0, 0), E(2, 10)] and cache.latest_epoch == 2
    assert cache.epoch_start(2) == 10 and cache.epoch_start(1) is None


@pytest.mark.parametrize("start", [10, 15])
def test_assign_same_epoch_at_same_or_later_offset_is_ignored(start: int) -> None:
    cache = cache_of((0, 0), (2, 10))
    cache.assign(2, start)
    assert cache.entries() == [E(0, 0), E(2, 10)]


def test_assign_same_epoch_at_earlier_offset_moves_its_start() -> None:
    cache = cache_of((0, 0), (2, 10))
    cache.assign(2, 5)
    assert cache.entries() == [E(0, 0), E(2, 5)]


def test_assign_drops_entries_starting_at_or_after_the_new_start() -> None:
    cache = cache_of((0, 0), (1, 10), (2, 20))
    cache.assign(3, 10)
    assert cache.entries() == [E(0, 0), E(3, 10)]


def test_assign_lower_epoch_replaces_later_entries() -> None:
    """Modern Kafka (maybeTruncateNonMonotonicEntries), not 1.x's warn-and-ignore: the cache
    must describe the log, and the log now holds `epoch` from `start_offset` on."""
    cache = cache_of((0, 0), (2, 10), (4, 20))
    cache.assign(3, 30)
    assert cache.entries() == [E(0, 0), E(2, 10), E(3, 30)]


@pytest.mark.parametrize("epoch, start", [(-1, 0), (0, -1)])
def test_assign_rejects_negative_values(epoch: int, start: int) -> None:
    with pytest.raises(ValueError):
        LeaderEpochCache().assign(epoch, start)


# ---- end_offset_for ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "requested, expected",
    [
        (5, (5, 30)),  # latest epoch: still being written, ends at the log end
        (3, (3, 20)),  # ends where the next epoch starts
        (4, (3, 20)),  # unknown epoch between two known: largest epoch below it
        (2, (1, 10)),
        (0, (0, 5)),  # below every known epoch: the requested one, ending at the first start
        (6, (-1, -1)),  # above the latest epoch
        (-1, (-1, -1)),  # UNDEFINED_EPOCH
    ],
)
def test_end_offset_for(requested: int, expected: tuple[int, int]) -> None:
    assert cache_of((1, 5), (3, 10), (5, 20)).end_offset_for(requested, 30) == expected


def test_end_offset_for_on_an_empty_cache_is_undefined() -> None:
    assert LeaderEpochCache().end_offset_for(0, 10) == (-1, -1)


# ---- truncation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "end_offset, expected",
    [
        (25, [(1, 5), (3, 10), (5, 20)]),
        (20, [(1, 5), (3, 10)]),
        (11, [(1, 5), (3, 10)]),
        (10, [(1, 5)]),
        (0, []),
    ],
)
def test_truncate_from_end(end_offset: int, expected: list[tuple[int, int]]) -> None:
    cache = cache_of((1, 5), (3, 10), (5, 20))
    cache.truncate_from_end(end_offset)
    assert cache.entries() == [E(*e) for e in expected]


@pytest.mark.parametrize(
    "start_offset, expected",
    [
        (4, [(1, 5), (3, 10), (5, 20)]),
        (5, [(1, 5), (3, 10), (5, 20)]),
        (10, [(3, 10), (5, 20)]),
        (12, [(3, 12), (5, 20)]),
        (25, [(5, 25)]),
    ],
)
def test_truncate_from_start(start_offset: int, expected: list[tuple[int, int]]) -> None:
    cache = cache_of((1, 5), (3, 10), (5, 20))
    cache.truncate_from_start(start_offset)
    assert cache.entries() == [E(*e) for e in expected]


@pytest.mark.parametrize("method", ["truncate_from_end", "truncate_from_start"])
def test_truncation_rejects_negative_offsets(method: str) -> None:
    with pytest.raises(ValueError):
        getattr(cache_of((0, 0)), method)(-1)


# ---- the cache mirrors a log ---------------------------------------------------------------


def model_end_offset_for(epochs: list[int], log_start: int, requested: int) -> tuple[int, int]:
    """endOffsetFor stated over the records themselves (epoch per offset, from log_start)."""
    retained = list(enumerate(epochs))[log_start:]
    if requested < 0 or not retained:
        return -1, -1
    if retained[-1][1] == requested:
        return requested, len(epochs)
    higher = next((o for o, e in retained if e > requested), None)
    if higher is None:
        return -1, -1
    floor = max((e for _, e in retained if e <= requested), default=requested)
    return floor, higher


log_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 2), st.integers(1, 4)),  # epoch bump, count
        st.tuples(st.just("truncate_end"), st.integers(0, 100)),
        st.tuples(st.just("truncate_start"), st.integers(0, 100)),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(log_ops)
def test_cache_describes_the_log_it_follows(ops: list[tuple]) -> None:
    """Appends assign (epoch, offset) per batch as a follower does; truncations follow the log.
    After every step, each lookup agrees with the records and the entries stay monotonic."""
    cache, epochs, log_start, top = LeaderEpochCache(), [], 0, 0
    for op in ops:
        if op[0] == "append":
            top = (epochs[-1] if len(epochs) > log_start else top) + op[1]
            cache.assign(top, len(epochs))
            epochs += [top] * op[2]
        elif op[0] == "truncate_end":
            end = log_start + op[1] % (len(epochs) - log_start + 1)
            del epochs[end:]
            cache.truncate_from_end(end)
        elif len(epochs) > log_start:  # the log start moves but keeps at least one record
            log_start += op[1] % (len(epochs) - log_start)
            cache.truncate_from_start(log_start)
        entries = cache.entries()
        assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in zip(entries, entries[1:]))
        for requested in range(-1, top + 3):
            assert cache.end_offset_for(requested, len(epochs)) == model_end_offset_for(epochs, log_start, requested)


# ---- checkpoint file -----------------------------------------------------------------------


def test_open_without_a_file_is_empty(tmp_path: Path) -> None:
    cache = LeaderEpochCache.open(tmp_path)
    assert cache.entries() == [] and cache.path == tmp_path / CHECKPOINT_FILE
    assert not (tmp_path / CHECKPOINT_FILE).exists()


def test_file_layout_and_reopen(tmp_path: Path) -> None:
    cache = LeaderEpochCache.open(tmp_path)
    cache.assign(0, 0)
    cache.assign(3, 1200)
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "1\n2\n0 0\n3 1200\n"
    assert LeaderEpochCache.open(tmp_path).entries() == [E(0, 0), E(3, 1200)]
    assert [p.name for p in tmp_path.iterdir()] == [CHECKPOINT_FILE]  # no stray tmp file


def test_every_change_is_persisted_and_no_op_changes_are_not(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    cache = LeaderEpochCache.open(tmp_path)
    cache.assign(0, 0)
    cache.assign(1, 10)
    cache.assign(2, 20)
    cache.truncate_from_end(20)
    assert LeaderEpochCache.open(tmp_path).entries() == [E(0, 0), E(1, 10)]
    cache.truncate_from_start(5)
    assert LeaderEpochCache.open(tmp_path).entries() == [E(0, 5), E(1, 10)]
    path.unlink()
    cache.assign(1, 15)  # ignored: same epoch, later offset
    cache.truncate_from_end(30)
    cache.truncate_from_start(5)
    assert not path.exists()


def test_empty_cache_round_trips(tmp_path: Path) -> None:
    cache = LeaderEpochCache.open(tmp_path)
    cache.assign(0, 0)
    cache.truncate_from_end(0)
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "1\n0\n"
    assert LeaderEpochCache.open(tmp_path).entries() == []


def test_kafka_version_zero_file_is_rejected_by_name(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_FILE).write_text("0\n1\n0 0\n")
    with pytest.raises(EpochCheckpointError, match=rf"{CHECKPOINT_FILE}.*version 0 is not supported"):
        LeaderEpochCache.open(tmp_path)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"1\n",
        b"1\n2\n0 0\n",  # torn: fewer entries than counted
        b"1\n1\n0 0",  # torn: no final newline
        b"1\n1\n0 0\n3 5\n",  # more entries than counted
        b"1\nx\n",
        b"v1\n0\n",
        b"1\n1\n0\n",
        b"1\n1\n-1 0\n",
        b"1\n1\n0  0\n",
        b"1\n2\n3 10\n1 20\n",  # epochs out of order
        b"1\n2\n1 10\n3 10\n",  # start offsets not increasing
        b"\xff\xfe\x00garbage",
        "1\n1\n\u0661 0\n".encode(),  # a non-ASCII digit
    ],
)
def test_malformed_files_raise_naming_the_file(tmp_path: Path, content: bytes) -> None:
    (tmp_path / CHECKPOINT_FILE).write_bytes(content)
    with pytest.raises(EpochCheckpointError, match=CHECKPOINT_FILE):
        LeaderEpochCache.open(tmp_path)


valid_entries = st.lists(st.tuples(st.integers(0, 50), st.integers(1, 2**40)), max_size=8).map(
    lambda steps: [
        E(sum(s[0] + 1 for s in steps[: i + 1]) - 1, sum(s[1] for s in steps[:i])) for i in range(len(steps))
    ]
)


@settings(max_examples=50, deadline=None)
@given(valid_entries)
def test_checkpoint_round_trip_and_every_torn_prefix_is_rejected(entries: list[EpochEntry]) -> None:
    with tempfile.TemporaryDirectory() as d:
        cache = LeaderEpochCache.open(Path(d))
        cache.assign(0, 0)
        cache.truncate_from_end(0)  # written even when `entries` is empty
        for entry in entries:
            cache.assign(*entry)
        assert LeaderEpochCache.open(Path(d)).entries() == entries
        raw = (Path(d) / CHECKPOINT_FILE).read_bytes()
        for cut in range(len(raw)):
            (Path(d) / CHECKPOINT_FILE).write_bytes(raw[:cut])
            with pytest.raises(EpochCheckpointError):
                LeaderEpochCache.open(Path(d))


@settings(max_examples=300)
@given(st.binary(max_size=40) | st.text("0123456789 \n-x", max_size=30).map(str.encode))
def test_arbitrary_bytes_parse_or_raise_the_format_error(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / CHECKPOINT_FILE).write_bytes(raw)
        try:
            entries = LeaderEpochCache.open(Path(d)).entries()
        except EpochCheckpointError:
            return
    assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in zip(entries, entries[1:]))


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=5))
def test_well_formed_files_open_only_with_strictly_increasing_entries(entries: list[tuple[int, int]]) -> None:
    text = "".join(f"{e} {s}\n" for e, s in entries)
    monotonic = all(a[0] < b[0] and a[1] < b[1] for a, b in zip(entries, entries[1:]))
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / CHECKPOINT_FILE).write_text(f"1\n{len(entries)}\n{text}")
        if monotonic:
            assert LeaderEpochCache.open(Path(d)).entries() == entries
        else:
            with pytest.raises(EpochCheckpointError, match="does not follow"):
                LeaderEpochCache.open(Path(d))
