"""ListOffsets (earliest, latest, by timestamp) through every client, and Fetch at the edges of
the log. Fetch long polling is tests/unit/test_fetch_long_poll.py (in-process)."""

from __future__ import annotations

import pytest

from .clients import (
    LIST_OFFSETS,
    RawConnection,
    api_versions,
    build_batch,
    create_topic,
    decode_records,
    raw_fetch,
    raw_produce,
    unique_topic,
)

pytestmark = pytest.mark.integration

# Three batches of five records each, timestamps increasing by 10 ms inside a batch.
BASE_TS = 1_700_000_000_000
BATCH_TS = [[BASE_TS + b * 1000 + i * 10 for i in range(5)] for b in range(3)]


@pytest.fixture(scope="module")
def ts_topic(module_broker):
    """One partition with 15 records in 3 multi-record batches (offsets 0..14)."""
    bs = module_broker.bootstrap
    topic = unique_topic("ts")
    create_topic(bs, topic, partitions=1)
    versions = api_versions(bs)
    with RawConnection(bs) as conn:
        for b, stamps in enumerate(BATCH_TS):
            batch = build_batch([(f"k{b}-{i}".encode(), b"v") for i in range(5)], timestamps=stamps)
            err, base = raw_produce(conn, versions, topic, 0, batch)
            assert (err, base) == (0, b * 5)
    return topic


# target timestamp -> expected (offset, timestamp of that record) or None
TS_CASES = {
    BASE_TS - 1: (0, BASE_TS),  # before everything: first record
    BASE_TS: (0, BASE_TS),  # exact match on the first record
    BASE_TS + 25: (3, BASE_TS + 30),  # inside the first batch: a record, not the batch
    BASE_TS + 40: (4, BASE_TS + 40),  # last record of a batch
    BASE_TS + 41: (5, BASE_TS + 1000),  # between batches: first record of the next one
    BASE_TS + 2035: (14, BASE_TS + 2040),  # inside the last batch
    BASE_TS + 2041: None,  # after everything: -1 on the wire
}


@pytest.mark.parametrize("client", list(LIST_OFFSETS))
def test_list_offsets(module_broker, ts_topic, client):
    got = LIST_OFFSETS[client](module_broker.bootstrap, ts_topic, 0, list(TS_CASES))
    assert got["earliest"] == 0
    # latest = log end offset: after the last record of the last batch (not base offset + 1)
    assert got["latest"] == 15
    for ts, expected in TS_CASES.items():
        actual = got["by_ts"][ts]
        if expected is None or actual is None:
            assert actual == expected, f"ts {ts}: got {actual}, expected {expected}"
        else:
            assert actual[0] == expected[0], f"ts {ts}: offset {actual[0]}, expected {expected[0]}"
            if actual[1] is not None:  # librdkafka does not expose it
                assert actual[1] == expected[1], f"ts {ts}: timestamp {actual[1]}"


@pytest.fixture(scope="module")
def unordered_ts_topic(module_broker):
    """Timestamps out of order inside batches: [5000, 5300, 5200] then [5100, 5400]."""
    bs = module_broker.bootstrap
    topic = unique_topic("ts-unordered")
    create_topic(bs, topic, partitions=1)
    versions = api_versions(bs)
    with RawConnection(bs) as conn:
        for stamps in ([5000, 5300, 5200], [5100, 5400]):
            batch = build_batch([(None, b"%d" % t) for t in stamps], timestamps=stamps)
            assert raw_produce(conn, versions, topic, 0, batch)[0] == 0
    return topic


@pytest.mark.parametrize("client", list(LIST_OFFSETS))
def test_list_offsets_unordered_timestamps(module_broker, unordered_ts_topic, client):
    """Kafka's lookup: the first batch whose max timestamp is >= target, then the first
    record of that batch with timestamp >= target (CLIENTS.md)."""
    cases = {5150: 1, 5250: 1, 5300: 1, 5350: 4, 4000: 0, 5401: None}
    got = LIST_OFFSETS[client](module_broker.bootstrap, unordered_ts_topic, 0, list(cases))
    actual = {ts: None if v is None else v[0] for ts, v in got["by_ts"].items()}
    assert actual == cases
    assert got["latest"] == 5


@pytest.mark.parametrize("client", list(LIST_OFFSETS))
def test_list_offsets_empty_partition(module_broker, client):
    topic = unique_topic("empty")
    create_topic(module_broker.bootstrap, topic, partitions=1)
    got = LIST_OFFSETS[client](module_broker.bootstrap, topic, 0, [0, BASE_TS])
    assert (got["earliest"], got["latest"]) == (0, 0)
    assert got["by_ts"] == {0: None, BASE_TS: None}


def test_fetch_out_of_range(module_broker, ts_topic):
    """Clients reset their position on OFFSET_OUT_OF_RANGE; past the log end is out of range,
    exactly at the log end is not (it parks/returns empty)."""
    versions = api_versions(module_broker.bootstrap)
    with RawConnection(module_broker.bootstrap) as conn:
        assert raw_fetch(conn, versions, ts_topic, 0, 16).error_code == 1  # OFFSET_OUT_OF_RANGE
        at_end = raw_fetch(conn, versions, ts_topic, 0, 15, max_wait_ms=0)
    assert at_end.error_code == 0 and decode_records(at_end.records) == []


def test_fetch_from_the_middle_of_a_batch(module_broker, ts_topic):
    """A fetch at an offset inside a batch returns that batch (whole, as Kafka does); the
    client skips the records before the offset. Checked through kafka-python's decoder."""
    versions = api_versions(module_broker.bootstrap)
    with RawConnection(module_broker.bootstrap) as conn:
        part = raw_fetch(conn, versions, ts_topic, 0, 7)
    offsets = [r.offset for r in decode_records(part.records)]
    assert 7 in offsets and offsets == list(range(offsets[0], 15)) and offsets[0] <= 7
