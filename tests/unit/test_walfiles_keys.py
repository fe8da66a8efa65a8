"""Object keys: every format round-trips, listing order is numeric order, bad keys are refused."""

import uuid

import pytest
from hypothesis import given, strategies as st

from walfiles import keys as k

prefix_segments = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)
prefixes = st.one_of(
    st.just(""),
    st.lists(prefix_segments, min_size=1, max_size=3).map("/".join),
    st.sampled_from(["wal", "tiered", "x/wal", "wal/wal/x"]),
)
cluster_ids = st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,23}", fullmatch=True)
created = st.integers(0, k.MAX_CREATED_MS)
node_ids = st.integers(0, k.MAX_NODE_ID)
sequences = st.integers(0, k.SEQUENCE_MODULUS - 1)
uuids = st.uuids()


@given(prefixes, cluster_ids, created, node_ids, sequences)
def test_wal_key_round_trip(prefix: str, cluster: str, created_ms: int, node: int, seq: int) -> None:
    key = k.format_wal_key(prefix, cluster, created_ms, node, seq)
    parsed = k.parse_wal_key(key)
    assert parsed == k.WalKey(prefix, cluster, created_ms, node, seq)
    assert parsed.format() == key
    assert key.startswith(k.wal_prefix(prefix, cluster))
    assert k.parse_wal_id(parsed.object_id) == (created_ms, node, seq)


@given(prefixes, cluster_ids, st.lists(st.tuples(created, node_ids, sequences), min_size=2, max_size=30, unique=True))
def test_wal_keys_sort_by_time_then_node_then_sequence(prefix: str, cluster: str, parts: list) -> None:
    formatted = [k.format_wal_key(prefix, cluster, *p) for p in parts]
    assert [k.parse_wal_key(x).sort_key for x in sorted(formatted)] == sorted(parts)
    # UTF-8 byte order (S3's listing order) agrees with str order for these ASCII keys.
    assert sorted(formatted, key=lambda s: s.encode()) == sorted(formatted)


@given(prefixes, cluster_ids, st.lists(st.tuples(created, node_ids, sequences), max_size=30), created)
def test_list_start_after_skips_exactly_older_objects(prefix: str, cluster: str, parts: list, since: int) -> None:
    start_after = k.wal_list_start_after(prefix, cluster, since)
    for p in parts:
        key = k.format_wal_key(prefix, cluster, *p)
        assert (key > start_after) == (p[0] >= since)


def test_wal_key_example() -> None:
    key = k.format_wal_key("shoal", "MkU3OEVBNTcwNTJENDM2Qg", 1_700_000_000_123, 3, 42)
    assert key == "shoal/wal/MkU3OEVBNTcwNTJENDM2Qg/1700000000123-0000000003-0000000042"
    assert k.format_wal_key("", "c", 0, 0, 0) == "wal/c/0000000000000-0000000000-0000000000"
    assert k.parse_wal_key("a/b/wal/c/0000000000001-0000000002-0000000003") == k.WalKey("a/b", "c", 1, 2, 3)


@pytest.mark.parametrize(
    "key",
    [
        "",
        "wal",
        "shoal/wal/c",
        "shoal/wal/c/",
        "shoal/wal/c/1700000000123-0000000003",
        "shoal/wal/c/1700000000123-0000000003-0000000042.wal",
        "shoal/wal/c/170000000012-0000000003-0000000042",  # 12-digit time
        "shoal/wal/c/1700000000123-3-42",  # not padded
        "shoal/wal/c/1700000000123_0000000003_0000000042",
        "shoal/wal/c/+700000000123-0000000003-0000000042",
        "shoal/wal/c/1700000000123-9999999999-0000000042",  # node id beyond int32
        "shoal/WAL/c/1700000000123-0000000003-0000000042",
        "shoal/tiered/c/1700000000123-0000000003-0000000042",
        "shoal/wal/.c/1700000000123-0000000003-0000000042",
        "shoal/wal/c d/1700000000123-0000000003-0000000042",
        "/wal/c/1700000000123-0000000003-0000000042",
        "a//wal/c/1700000000123-0000000003-0000000042",
        "../wal/c/1700000000123-0000000003-0000000042",
        "shoal/wal/c/１７00000000123-0000000003-0000000042",  # non-ASCII digits
    ],
)
def test_malformed_wal_keys_are_rejected(key: str) -> None:
    with pytest.raises(ValueError, match="WAL object"):
        k.parse_wal_key(key)


@pytest.mark.parametrize(
    "args",
    [
        ("p", "c", -1, 0, 0),
        ("p", "c", 10**13, 0, 0),
        ("p", "c", 0, -1, 0),
        ("p", "c", 0, 2**31, 0),
        ("p", "c", 0, 0, -1),
        ("p", "c", 0, 0, 10**10),
        ("p/", "c", 0, 0, 0),
        ("/p", "c", 0, 0, 0),
        ("p", "", 0, 0, 0),
        ("p", "a/b", 0, 0, 0),
        ("p", ".", 0, 0, 0),
    ],
)
def test_format_wal_key_rejects_bad_parts(args: tuple) -> None:
    with pytest.raises(ValueError):
        k.format_wal_key(*args)


def test_format_wal_key_rejects_non_int() -> None:
    with pytest.raises(TypeError):
        k.format_wal_key("p", "c", 1.5, 0, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        k.format_wal_key("p", "c", True, 0, 0)


def test_allocator_keys_are_unique_increasing_and_never_go_back_in_time() -> None:
    times = iter([100, 100, 100, 99, 50, 101, 101])
    alloc = k.WalKeyAllocator("p", "c", 7, lambda: next(times), first_sequence=k.SEQUENCE_MODULUS - 2)
    got = [alloc.next() for _ in range(7)]
    assert [g.created_ms for g in got] == [100, 100, 100, 100, 100, 101, 101]
    assert [g.sequence for g in got] == [k.SEQUENCE_MODULUS - 2, k.SEQUENCE_MODULUS - 1, 0, 1, 2, 3, 4]
    assert len({g.format() for g in got}) == 7
    assert all(g.node_id == 7 and g.prefix == "p" and g.cluster_id == "c" for g in got)


@given(
    prefixes,
    cluster_ids,
    uuids,
    st.integers(0, k.MAX_PARTITION),
    st.integers(0, k.MAX_OFFSET),
    uuids,
    st.sampled_from(list(k.SegmentFile)),
)
def test_tiered_key_round_trip(
    prefix: str, cluster: str, topic: uuid.UUID, partition: int, base: int, segment: uuid.UUID, file: k.SegmentFile
) -> None:
    key = k.format_tiered_segment_key(prefix, cluster, topic, partition, base, segment, file)
    parsed = k.parse_tiered_segment_key(key)
    assert parsed == k.TieredSegmentKey(prefix, cluster, topic, partition, base, segment, file)
    assert parsed.format() == key
    assert key.startswith(k.tiered_partition_prefix(prefix, cluster, topic, partition))
    assert key.endswith(file.value)


@given(
    st.lists(
        st.tuples(st.integers(0, k.MAX_OFFSET), uuids, st.sampled_from(list(k.SegmentFile))),
        min_size=2,
        max_size=20,
        unique=True,
    )
)
def test_tiered_keys_list_in_offset_order(parts: list) -> None:
    topic = uuid.UUID(int=1)
    formatted = [k.format_tiered_segment_key("p", "c", topic, 3, *p) for p in parts]
    offsets = [k.parse_tiered_segment_key(x).base_offset for x in sorted(formatted)]
    assert offsets == sorted(offsets)


def test_tiered_key_example() -> None:
    topic = uuid.UUID("0b6a2f59-6f4c-4a40-9d3e-0c1f8a8f3c11")
    segment = uuid.UUID("5f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9")
    key = k.format_tiered_segment_key("shoal", "c1", topic, 7, 1234, segment, k.SegmentFile.TIME_INDEX)
    assert key == (
        "shoal/tiered/c1/0b6a2f59-6f4c-4a40-9d3e-0c1f8a8f3c11/0000000007/"
        "00000000000000001234-5f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9.timeindex"
    )


@pytest.mark.parametrize(
    "key",
    [
        "shoal/tiered/c1/0b6a2f59-6f4c-4a40-9d3e-0c1f8a8f3c11/0000000007/00000000000000001234-5f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9.foo",
        "shoal/tiered/c1/0b6a2f59-6f4c-4a40-9d3e-0c1f8a8f3c11/7/00000000000000001234-5f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9.log",
        "shoal/tiered/c1/0B6A2F59-6F4C-4A40-9D3E-0C1F8A8F3C11/0000000007/00000000000000001234-5f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9.log",
        "shoal/tiered/c1/not-a-uuid/0000000007/00000000000000001234-5f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9.log",
        "shoal/tiered/c1/0b6a2f59-6f4c-4a40-9d3e-0c1f8a8f3c11/0000000007/1234-5f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9.log",
        "shoal/tiered/c1/0b6a2f59-6f4c-4a40-9d3e-0c1f8a8f3c11/0000000007/00000000000000001234.log",
        "shoal/tiered/c1/0b6a2f59-6f4c-4a40-9d3e-0c1f8a8f3c11/9999999999/00000000000000001234-5f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9.log",
        "shoal/tiered/c1/0b6a2f59-6f4c-4a40-9d3e-0c1f8a8f3c11/0000000007/99999999999999999999-5f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9.log",
        "shoal/wal/c1/0b6a2f59-6f4c-4a40-9d3e-0c1f8a8f3c11/0000000007/00000000000000001234-5f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9.log",
        "tiered/c1/0b6a2f59-6f4c-4a40-9d3e-0c1f8a8f3c11/0000000007",
        "shoal/wal/c/1700000000123-0000000003-0000000042",
    ],
)
def test_malformed_tiered_keys_are_rejected(key: str) -> None:
    with pytest.raises(ValueError, match="tiered-segment"):
        k.parse_tiered_segment_key(key)


def test_wal_and_tiered_keys_do_not_parse_as_each_other() -> None:
    wal = k.format_wal_key("p", "c", 1, 2, 3)
    tiered = k.format_tiered_segment_key("p", "c", uuid.UUID(int=1), 0, 0, uuid.UUID(int=2), k.SegmentFile.LOG)
    with pytest.raises(ValueError):
        k.parse_tiered_segment_key(wal)
    with pytest.raises(ValueError):
        k.parse_wal_key(tiered)


def test_allocators_of_two_processes_with_one_node_id_and_one_clock_do_not_share_keys() -> None:
    """A duplicate node id, or a restart after the clock stepped back, gives two processes the
    same node id and created_ms: the sequence starts at a random value in each process, so
    their keys still differ (and the uploader's conditional put catches the rest)."""
    import random

    first, second = (
        k.WalKeyAllocator("p", "c", 7, lambda: 100, first_sequence=random.randrange(k.SEQUENCE_MODULUS))
        for _ in range(2)
    )
    a = {first.next().format() for _ in range(1000)}
    b = {second.next().format() for _ in range(1000)}
    assert not a & b
    assert all(k.parse_wal_key(x).created_ms == 100 for x in a | b)


def test_allocator_starts_at_the_given_sequence_and_refuses_one_out_of_range() -> None:
    assert k.WalKeyAllocator("p", "c", 7, lambda: 100, first_sequence=5).next().sequence == 5
    with pytest.raises(ValueError):
        k.WalKeyAllocator("p", "c", 7, lambda: 100, first_sequence=k.SEQUENCE_MODULUS)
