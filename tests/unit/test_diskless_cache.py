"""Object cache: LRU eviction within `cache.max.bytes`, lookups by containment, zero copy."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from broker.wal.cache import ObjectCache

OBJECTS = {name: bytes((i * 7 + j) % 251 for j in range(300)) for i, name in enumerate(["a", "b", "c"])}


def test_least_recently_used_range_is_evicted_first() -> None:
    cache = ObjectCache(100)
    cache.put_range("a", 0, b"a" * 40)
    cache.put_range("b", 0, b"b" * 40)
    assert cache.get("a", 0, 10) is not None  # "a" is now the most recently used
    cache.put_range("c", 0, b"c" * 40)
    assert cache.get("b", 0, 1) is None
    assert bytes(cache.get("a", 0, 40)) == b"a" * 40
    assert bytes(cache.get("c", 0, 40)) == b"c" * 40
    assert (cache.entries, cache.size_bytes) == (2, 80)


def test_eviction_frees_as_many_ranges_as_needed() -> None:
    cache = ObjectCache(100)
    for name in "abcde":
        cache.put_range(name, 0, name.encode() * 20)
    cache.put_object("f", b"f" * 70)
    assert [name for name in "abcdef" if cache.get(name, 0, 1) is not None] == ["e", "f"]
    assert cache.size_bytes == 90


def test_object_larger_than_the_bound_is_not_cached_and_evicts_nothing() -> None:
    cache = ObjectCache(100)
    cache.put_object("a", b"a" * 60)
    cache.put_object("b", b"b" * 101)
    assert cache.get("b", 0, 1) is None
    assert cache.get("a", 0, 60) is not None
    cache.put_object("c", b"c" * 100)  # exactly the bound fits, alone
    assert (cache.entries, cache.size_bytes) == (1, 100)


def test_zero_max_bytes_disables_the_cache() -> None:
    cache = ObjectCache(0)
    cache.put_object("a", b"abc")
    assert cache.get("a", 0, 1) is None
    assert (cache.entries, cache.size_bytes) == (0, 0)


def test_lookup_is_by_containment_and_zero_copy() -> None:
    data = bytes(range(50))
    cache = ObjectCache(1000)
    cache.put_range("a", 100, data)
    view = cache.get("a", 110, 140)
    assert view is not None and bytes(view) == data[10:40]
    assert view.obj is data
    assert bytes(cache.get("a", 100, 150)) == data
    assert bytes(cache.get("a", 120, 120)) == b""
    for start, end in [(90, 110), (140, 151), (0, 10), (150, 160)]:
        assert cache.get("a", start, end) is None
    assert cache.get("other", 110, 120) is None


def test_contained_ranges_are_not_kept_twice() -> None:
    cache = ObjectCache(1000)
    whole = OBJECTS["a"]
    cache.put_range("a", 10, whole[10:20])
    cache.put_range("a", 50, whole[50:150])
    cache.put_range("a", 60, whole[60:70])  # inside [50, 150): ignored
    assert (cache.entries, cache.size_bytes) == (2, 110)
    cache.put_range("a", 0, whole[:200])  # holds both: they are dropped
    assert (cache.entries, cache.size_bytes) == (1, 200)
    assert bytes(cache.get("a", 5, 195)) == whole[5:195]


def test_partially_overlapping_ranges_each_serve_what_they_contain() -> None:
    whole = OBJECTS["a"]
    cache = ObjectCache(1000)
    cache.put_range("a", 0, whole[:100])
    cache.put_range("a", 50, whole[50:150])
    assert cache.entries == 2
    assert bytes(cache.get("a", 10, 90)) == whole[10:90]
    assert bytes(cache.get("a", 60, 150)) == whole[60:150]
    assert cache.get("a", 10, 140) is None  # no single range holds it


def test_observers_count_hits_and_misses_in_bytes() -> None:
    hits: list[int] = []
    misses: list[int] = []
    cache = ObjectCache(1000, on_hit=hits.append, on_miss=misses.append)
    cache.put_object("a", b"x" * 100)
    cache.get("a", 0, 30)
    cache.get("a", 90, 110)
    cache.get("b", 0, 5)
    assert (hits, misses) == ([30], [20, 5])


def test_argument_errors() -> None:
    with pytest.raises(ValueError, match="cache.max.bytes"):
        ObjectCache(-1)
    cache = ObjectCache(10)
    with pytest.raises(ValueError):
        cache.put_range("a", -1, b"x")
    with pytest.raises(ValueError):
        cache.get("a", 5, 4)


operations = st.lists(
    st.tuples(st.booleans(), st.sampled_from(sorted(OBJECTS)), st.integers(0, 300), st.integers(0, 150)),
    max_size=60,
)


@given(max_bytes=st.integers(0, 400), ops=operations)
def test_bound_holds_and_every_hit_returns_the_bytes_put(max_bytes: int, ops: list) -> None:
    cache = ObjectCache(max_bytes)
    for is_put, name, start, length in ops:
        end = min(start + length, 300)
        if is_put:
            cache.put_range(name, start, OBJECTS[name][start:end])
            if 0 < end - start <= max_bytes:  # just put: must be a hit
                assert bytes(cache.get(name, start, end)) == OBJECTS[name][start:end]
        else:
            view = cache.get(name, start, end)
            assert view is None or bytes(view) == OBJECTS[name][start:end]
        assert 0 <= cache.size_bytes <= max_bytes
        assert cache.entries <= cache.size_bytes  # no empty ranges
