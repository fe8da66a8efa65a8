"""A handler context with real topics over a real ClusterView, for the Metadata and
DescribeTopicPartitions handler tests and the Metadata benchmark: brokers in AZs, topics of
given sizes, every partition led by the first of its replicas."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from collections.abc import Collection

from broker.clock import Clock, ManualClock
from broker.cluster.view import ClusterView
from broker.config import load_config
from broker.metadata import KeyValue, records
from broker.routing.router import AzRouter
from broker.topic_config import effective
from broker.topics import Topic


class _NoCatalog:
    async def apply_record(self, record: object) -> None: ...

    async def apply_delete(self, name: str) -> None: ...


async def topic_view_context(
    sizes: dict[str, int],
    brokers: dict[int, str] | None = None,
    classic: Collection[str] = (),
    clock: Clock | None = None,
    config: dict[str, str] | None = None,
) -> SimpleNamespace:
    """`sizes`: topic name -> partitions; `brokers`: node id -> AZ (default: node 0 in az-a);
    `classic`: the topics that are not diskless; `config`: broker config keys.
    Partition p of the t-th topic has replicas [t+p, t+p+1, ...] (mod the brokers), epoch 3."""
    clock = clock or ManualClock()
    view = ClusterView(None, _NoCatalog(), clock)  # type: ignore[arg-type]
    revision = 0
    for node, az in (brokers or {0: "az-a"}).items():
        revision += 1
        broker = records.BrokerRecord(1, node, az, "localhost", 9092 + node, None, 0, False, "test", "x")
        await view.apply_put(KeyValue(records.broker_key(node), records.encode(broker), revision))
    nodes = sorted(view.brokers)
    broker_config = load_config(environ={}, overrides=config or {})
    diskless = effective({"diskless.enable": "true"}, broker_config)
    classic_settings = effective({"diskless.enable": "false"}, broker_config)
    topics = [
        Topic(name, uuid.UUID(int=t + 1), n, {}, classic_settings if name in classic else diskless)
        for t, (name, n) in enumerate(sizes.items())
    ]
    for t, topic in enumerate(topics):
        for index in range(topic.partitions):
            replicas = [nodes[(t + index + k) % len(nodes)] for k in range(min(3, len(nodes)))]
            state = records.PartitionStateRecord(records.RECORD_VERSION, replicas, replicas[0], 3, replicas)
            revision += 1
            key = records.partition_key(str(topic.topic_id), index)
            await view.apply_put(KeyValue(key, records.encode(state), revision))
    by_name = {t.name: t for t in topics}
    catalog = SimpleNamespace(all=lambda: list(topics), get=by_name.get, by_id=lambda topic_id: None)
    return SimpleNamespace(
        clock=clock, view=view, catalog=catalog, router=AzRouter(view, "az-a"), cluster_id="c", config=broker_config
    )
