"""One real broker inside the test's own event loop: API behaviour without processes.

`InProcessBroker` builds the real `broker.broker.Broker` with only its `Environment`
swapped, as the simulation does (tests/sim/cluster.py), but for ordinary pytest tests on
the real asyncio loop: a `ManualClock`, the local metadata store in the test's directory,
the in-memory object store, and no peers (one broker, so nothing listens). Every handler,
the partition logs, the WAL writer and the group coordinator are the real ones.

An `InProcessClient` encodes kafka-python request objects into the frames a socket would
carry and hands them to the broker's request dispatch; what comes back is decoded with
kafka-python's response classes. The listener itself (framing, pipelining, memory bounds,
idle connections) is not on this path: that is the integration tier's, and
tests/unit/test_server_bounds.py's.

Time: record timestamps, retention ages, lease deadlines and group deadlines read the
manual clock (`clock.advance`); waits inside the broker (Fetch max_wait_ms, the WAL linger,
background task intervals) run on the event loop's real time, so a group deadline that an
`advance` makes due fires when the coordinator's timer loop next wakes (within a second).
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.producer import ProduceRequest

from broker.broker import Broker
from broker.clock import ManualClock
from broker.config import load_config
from broker.dispatch import dispatch
from broker.environment import Environment, TcpPeers
from broker.metadata.local import LocalMetadataStore
from broker.objectstore import MemoryObjectStore
from broker.peer_service import PeerRequest, PeerResponse
from broker.protocol.messages import RESPONSE_CLASSES

PEER = "127.0.0.1:50000"  # where dispatch is told the request came from (logs, client racks)

# What differs from a process's defaults, and why:
HARNESS_SETTINGS: dict[str, str | None] = {
    "metrics.listen": None,  # no metrics listener: no sockets at all
    # The broker's registration lease expires on the manual clock but is renewed on real
    # time (every third of its TTL): a day lets a test advance the clock freely.
    "broker.session.timeout.ms": str(24 * 3600 * 1000),
    # The offsets topic is created at start: fifty partitions' files and fsyncs cost a
    # second per test; one partition serves every group (tests that need more set it).
    "offsets.topic.num.partitions": "1",
    # A test that waits for each answer would wait out the whole linger (250 ms) on every
    # diskless produce; a WAL object per request is what such a producer gets anyway.
    "wal.linger.ms": "5",
}


async def dispatch_frame(broker: Broker, frame: bytes) -> list[bytes | bytearray] | None:
    """The one place the harness hands a request frame to the broker, as the server does:
    the encoded response parts, or None for a request that gets no answer (acks=0)."""
    return await dispatch(broker, frame, PEER)


class InProcessBroker:
    """`async with InProcessBroker(tmp_path) as harness:` a started single broker whose
    data directory (logs, metadata store file) is `data_dir`. `settings` are broker
    configuration keys, over the harness's own (HARNESS_SETTINGS). The clock starts at
    `start_ms`, by default the wall clock's now: clients stamp records with the wall clock,
    and the broker refuses timestamps too far from its own. `seed` seeds the broker's random
    source (cluster and topic ids, placement). `objects`: the object store of an earlier
    harness on the same `data_dir` (a restart keeps its tiered segments and WAL objects)."""

    def __init__(
        self,
        data_dir: Path,
        settings: Mapping[str, str | None] | None = None,
        *,
        seed: int = 0,
        start_ms: int | None = None,
        objects: MemoryObjectStore | None = None,
    ) -> None:
        self.clock = ManualClock(time.time_ns() // 1_000_000 if start_ms is None else start_ms)
        self.objects = MemoryObjectStore(clock=self.clock) if objects is None else objects
        config = load_config(environ={}, overrides={**HARNESS_SETTINGS, "data.dir": str(data_dir), **(settings or {})})
        env = Environment(
            clock=self.clock,
            random=random.Random(seed),
            metadata=LocalMetadataStore(config.data_path / "metadata" / "store.json", self.clock),
            objects=self.objects,
            peers=TcpPeers(None, PeerRequest, PeerResponse),
        )
        self.broker = Broker(config, env=env)

    async def __aenter__(self) -> "InProcessBroker":
        await self.broker.start(serve_clients=False)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.broker.stop()

    def client(self, client_id: str = "inprocess") -> "InProcessClient":
        """A new client (its own correlation ids), as if on its own connection."""
        return InProcessClient(self.broker, client_id)


class InProcessClient:
    """One client, as if on its own connection: its correlation ids, and the versions the
    broker advertised to it."""

    def __init__(self, broker: Broker, client_id: str) -> None:
        self._broker = broker
        self._client_id = client_id
        self._correlation_ids = itertools.count(1)
        self._versions: dict[int, tuple[int, int]] | None = None

    async def send_frame(self, frame: bytes) -> bytes | None:
        """One unframed request (header and body, no length prefix), for requests no client
        would send: the unframed response, or None if the API sends none. Raises
        ConnectionFault where the server would close the connection."""
        parts = await dispatch_frame(self._broker, frame)
        return None if parts is None else b"".join(parts)

    async def request(self, request: Any, version: int) -> Any:
        """Send a kafka-python request object; its decoded response."""
        correlation_id = next(self._correlation_ids)
        request.with_header(correlation_id=correlation_id, client_id=self._client_id)
        answer = await self.send_frame(bytes(request.encode(version=version, header=True, framed=False)))
        if answer is None:
            raise AssertionError(f"no response to {type(request).__name__} v{version}")
        response = RESPONSE_CLASSES[request.API_KEY].decode(answer, version=version, header=True)
        assert response.header.correlation_id == correlation_id, "response to another request"
        return response

    async def api_versions(self) -> dict[int, tuple[int, int]]:
        """What the broker advertises: {api_key: (min_version, max_version)}."""
        if self._versions is None:
            response = await self.request(
                ApiVersionsRequest(client_software_name="inprocess", client_software_version="1"), 3
            )
            assert response.error_code == 0, response.error_code
            self._versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        return self._versions

    async def version(self, request_class: Any, cap: int) -> int:
        """The highest version both the broker and kafka-python know, at most `cap`."""
        low, high = (await self.api_versions())[request_class.API_KEY]
        version = min(high, request_class.max_version, cap)
        assert version >= low, f"{request_class.__name__}: broker range {low}..{high}, cap {cap}"
        return version

    # -- the requests most tests start with --------------------------------------------------

    async def create_topic(self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None) -> int:
        """CreateTopics of one topic (replication factor 1); its error code."""
        topic = CreateTopicsRequest.CreatableTopic
        request = CreateTopicsRequest(
            topics=[
                topic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=1,
                    assignments=[],
                    configs=[topic.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
                )
            ],
            timeout_ms=10_000,
            validate_only=False,
        )
        response = await self.request(request, await self.version(CreateTopicsRequest, cap=5))
        return int(response.topics[0].error_code)

    async def produce(self, topic: str, partition: int, records: bytes, acks: int = -1) -> tuple[int, int]:
        """One Produce of `records` to a partition, by name; its (error_code, base_offset)."""
        data = ProduceRequest.TopicProduceData
        request = ProduceRequest(
            transactional_id=None,
            acks=acks,
            timeout_ms=10_000,
            topic_data=[data(name=topic, partition_data=[data.PartitionProduceData(index=partition, records=records)])],
        )
        response = await self.request(request, await self.version(ProduceRequest, cap=12))  # v13+: by id
        answer = response.responses[0].partition_responses[0]
        return answer.error_code, answer.base_offset

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        max_bytes: int = 50 << 20,
    ) -> Any:
        """One Fetch of a partition, by name; the partition's response data."""
        request = fetch_request(
            topic, {partition: offset}, max_bytes=max_bytes, max_wait_ms=max_wait_ms, min_bytes=min_bytes
        )
        response = await self.request(request, await self.version(FetchRequest, cap=12))  # v13+: by id
        assert response.error_code == 0, f"Fetch top-level error {response.error_code}"
        return response.responses[0].partitions[0]


def fetch_request(
    topic: str,
    offsets: dict[int, int],
    *,
    max_bytes: int = 50 << 20,
    partition_max_bytes: int | None = None,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
) -> FetchRequest:
    """A Fetch (v12 and below: by topic name) of `offsets` (partition -> fetch offset, in
    request order); each partition's limit defaults to the request's."""
    wanted = FetchRequest.FetchTopic
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        rack_id="",
        topics=[
            wanted(
                topic=topic,
                partitions=[
                    wanted.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=max_bytes if partition_max_bytes is None else partition_max_bytes,
                    )
                    for partition, offset in offsets.items()
                ],
            )
        ],
    )
