"""Idempotent producers through a proxy that cuts every connection several times
mid-stream: every record lands exactly once, in order."""

from __future__ import annotations

import pytest

from .clients import PRODUCERS, Rec, check_sequences, create_topic, read_all, unique_topic
from .harness import free_port

pytestmark = pytest.mark.integration

N = 100_000
PARTITIONS = 2
MAX_DROPS = 6
# ~2 MB of produce requests and a few tens of KB of responses in total: several cuts
# mid-stream either way. "up" cuts requests (the broker sees half a request); "down" cuts
# responses to requests the broker already appended, so the retries are true duplicates.
DROP_EVERY_BYTES = {"up": 250_000, "down": 1_500}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("direction", ["up", "down"])
@pytest.mark.parametrize(
    "client,idempotence",
    [
        (
            "confluent",
            {
                "enable.idempotence": True,
                # ~16 KiB requests, like kafka-python:
                # enough responses to cut
                "batch.size": 16384,
            },
        ),
        ("kafka-python", {"enable_idempotence": True}),
    ],
)
def test_idempotent_produce_through_connection_drops(broker_factory, proxy_factory, client, idempotence, direction):
    proxy_port = free_port()
    broker = broker_factory(start=False, advertise_port=proxy_port)  # Metadata names the proxy
    proxy = proxy_factory(broker.port, listen_port=proxy_port)
    broker.start()
    bs = proxy.address
    topic = unique_topic("idem")
    create_topic(bs, topic, partitions=PARTITIONS)

    recs = [Rec(i % PARTITIONS, None, b"%08d" % i, (), 1_700_000_000_000 + i) for i in range(N)]
    proxy.arm(DROP_EVERY_BYTES[direction], MAX_DROPS, direction)
    offsets = PRODUCERS[client](bs, topic, recs, timeout_s=180, **idempotence)
    proxy.arm(None)
    assert proxy.drops >= 3, f"only {proxy.drops} drops ({proxy.bytes_up} bytes up, {proxy.bytes_down} down)"

    acked = {p: [(i, off) for i, off in enumerate(offsets) if i % PARTITIONS == p] for p in range(PARTITIONS)}
    got = read_all(broker.direct_bootstrap, topic, PARTITIONS, timeout_s=120)
    check_sequences(got, acked)
    for p in range(PARTITIONS):
        assert [int(r.value) for r in got[p]] == list(range(p, N, PARTITIONS)), f"partition {p}: not exactly once"
