"""ListOffsets (earliest, latest, by timestamp) through every client, and Fetch long polling."""

from __future__ import annotations

import threading
import time

import pytest

from .clients import (LIST_OFFSETS, RawConnection, api_versions, build_batch, create_topic,
                      decode_records, pick_version, raw_fetch, raw_produce, unique_topic)

pytestmark = pytest.mark.integration

# Three batches of five records each, timestamps increasing by 10 ms inside a batch.
BASE_TS = 1_700_000_000_000
BATCH_TS = [[BASE_TS + b * 1000 + i * 10 for i in range(5)] for b in range(3)]
PARKED_MAX_WAIT_S = 60.0  # a parked fetch's max_wait_ms: far beyond any wait bound below
WAKE_BOUND_S = 15.0  # a produce must wake the parked fetch well within PARKED_MAX_WAIT_S


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
    BASE_TS - 1: (0, BASE_TS),                    # before everything: first record
    BASE_TS: (0, BASE_TS),                        # exact match on the first record
    BASE_TS + 25: (3, BASE_TS + 30),              # inside the first batch: a record, not the batch
    BASE_TS + 40: (4, BASE_TS + 40),              # last record of a batch
    BASE_TS + 41: (5, BASE_TS + 1000),            # between batches: first record of the next one
    BASE_TS + 2035: (14, BASE_TS + 2040),         # inside the last batch
    BASE_TS + 2041: None,                         # after everything: -1 on the wire
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
            if actual[1] is not None:                 # librdkafka does not expose it
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


def test_fetch_on_empty_partition_returns_empty_at_max_wait(module_broker):
    """Nothing arrives: the parked fetch is answered (empty, no error) when max_wait_ms
    passes. That it really parks is shown by test_fetch_parks_and_wakes_on_produce."""
    bs = module_broker.bootstrap
    topic = unique_topic("wait")
    create_topic(bs, topic, partitions=1)
    versions = api_versions(bs)
    with RawConnection(bs) as conn:
        part = raw_fetch(conn, versions, topic, 0, 0, max_wait_ms=1000, min_bytes=1, timeout_s=30)
    assert part.error_code == 0
    assert part.high_watermark == 0
    assert decode_records(part.records) == []


def test_fetch_parks_and_wakes_on_produce(module_broker):
    """A fetch of an empty partition with a long max_wait_ms is answered with a record that was
    produced only after the fetch was sent: it parked (an early answer would be empty) and the
    produce woke it (max_wait_ms is far beyond the wait bound, so expiry cannot explain it)."""
    bs = module_broker.bootstrap
    topic = unique_topic("wake")
    create_topic(bs, topic, partitions=1)
    versions = api_versions(bs)
    result: dict = {}
    sent = threading.Event()
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    def parked_fetch():
        with RawConnection(bs, timeout_s=PARKED_MAX_WAIT_S + 30) as conn:
            try:
                version = pick_version(versions, FetchRequest, cap=12)
                T = FetchRequest.FetchTopic
                request = FetchRequest(
                    replica_id=-1, max_wait_ms=int(PARKED_MAX_WAIT_S * 1000), min_bytes=1, max_bytes=1 << 20,
                    isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                    topics=[T(topic=topic, partitions=[T.FetchPartition(
                        partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                        partition_max_bytes=1 << 20)])])
                conn.send_request(request, version)
                sent.set()
                frame = conn.recv_frame(PARKED_MAX_WAIT_S + 30)
                assert frame is not None, "connection closed instead of a fetch answer"
                response = FetchResponse.decode(frame, version=version, header=True)
                result["part"] = response.responses[0].partitions[0]
            except Exception as exc:  # noqa: BLE001 - reported by the main thread
                result["error"] = exc

    fetcher = threading.Thread(target=parked_fetch, daemon=True)
    fetcher.start()
    assert sent.wait(15), "fetch not sent"
    time.sleep(0.5)                                   # let the fetch reach the broker and park
    assert fetcher.is_alive() and not result, f"the fetch was answered before anything was produced: {result}"
    with RawConnection(bs) as conn:
        err, base = raw_produce(conn, versions, topic, 0, build_batch([(b"k", b"wake up")]))
    assert (err, base) == (0, 0)
    fetcher.join(WAKE_BOUND_S)
    assert not fetcher.is_alive(), \
        f"the parked fetch was not woken by the produce (max_wait_ms is {PARKED_MAX_WAIT_S:.0f} s)"
    assert "error" not in result, result.get("error")
    assert result["part"].error_code == 0
    assert [r.value for r in decode_records(result["part"].records)] == [b"wake up"]


def test_fetch_out_of_range(module_broker, ts_topic):
    """Clients reset their position on OFFSET_OUT_OF_RANGE; past the log end is out of range,
    exactly at the log end is not (it parks/returns empty)."""
    versions = api_versions(module_broker.bootstrap)
    with RawConnection(module_broker.bootstrap) as conn:
        assert raw_fetch(conn, versions, ts_topic, 0, 16).error_code == 1   # OFFSET_OUT_OF_RANGE
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
