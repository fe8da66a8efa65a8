"""Kafka 4.x topic configs and compression.type with real admin clients, producers and
consumers against a real broker process (issue 26, item 11).

- kafka-python's and confluent-kafka's admin clients create a topic with the whole Kafka 4.0
  config set at Kafka's defaults (what mirroring tools and topic operators copy), read it back
  with DescribeConfigs, change it (AlterConfigs / IncrementalAlterConfigs), and get
  INVALID_CONFIG for bad values;
- on a topic with compression.type=zstd (classic and diskless), batches that confluent-kafka
  sends in lz4 and kafka-python in gzip are stored in zstd, and both clients' consumers read
  the same records back."""

from __future__ import annotations

import pytest

from tests.unit.test_topic_configs_kafka4 import BAD, KAFKA_40

from .clients import (
    ADMINS,
    CALL_TIMEOUT_S,
    DESCRIBE_CONFIGS,
    RawConnection,
    api_versions,
    assert_same_records,
    ck_admin,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    kp_admin,
    make_records,
    produce_confluent,
    produce_kafka_python,
    raw_fetch,
    unique_topic,
)

pytestmark = pytest.mark.integration

INVALID_CONFIG = 40
ZSTD = 4
WHOLE_SET = {name: default for name, (default, _type) in KAFKA_40.items()}


def alter_kafka_python(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """AlterConfigs (the whole set of overrides) through kafka-python's admin client."""
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = kp_admin(bootstrap)
    try:
        result = admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)], incremental=False
        )
        outcome = result["topic"][topic]
        assert not isinstance(outcome, Exception) and getattr(outcome, "errno", 0) == 0, outcome
    finally:
        admin.close()


def alter_confluent(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs (SET each key) through confluent-kafka's admin client."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = ck_admin(bootstrap)
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    futures = admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)])
    for future in futures.values():
        future.result(timeout=CALL_TIMEOUT_S)


ALTERS = {"kafka-python": alter_kafka_python, "confluent": alter_confluent}


@pytest.mark.parametrize("client", sorted(ALTERS))
def test_admin_clients_copy_a_whole_kafka_4_config_set(module_broker, client: str) -> None:
    bs = module_broker.bootstrap
    topic = unique_topic(f"copied-{client}")
    assert ADMINS[client](bs, topic, 1, {**WHOLE_SET, "diskless.enable": "false"}) == 0
    described = DESCRIBE_CONFIGS[client](bs, topic)
    assert {name: described[name] or "" for name in WHOLE_SET} == WHOLE_SET
    changed = {
        "compression.type": "lz4",
        "compression.lz4.level": "12",
        "delete.retention.ms": "1000",
        "min.cleanable.dirty.ratio": "0.25",
        "unclean.leader.election.enable": "true",
        "leader.replication.throttled.replicas": "0:0",
    }
    ALTERS[client](bs, topic, changed)
    described = DESCRIBE_CONFIGS[client](bs, topic)
    assert {name: described[name] for name in changed} == changed
    for name, (value, _message) in sorted(BAD.items()):
        assert ADMINS[client](bs, unique_topic("bad"), 1, {name: value}) == INVALID_CONFIG, name


@pytest.mark.parametrize("mode", ["classic", "diskless"])
def test_consumers_read_back_records_stored_in_the_topics_codec(module_broker, mode: str) -> None:
    bs = module_broker.bootstrap
    topic = unique_topic(f"zstd-{mode}")
    create_topic(bs, topic, 1, {"compression.type": "zstd", "diskless.enable": str(mode == "diskless").lower()})
    sent = make_records(200, 1, tag="lz4")
    produce_confluent(bs, topic, sent[:100], compression_type="lz4", linger_ms=20)
    produce_kafka_python(bs, topic, sent[100:], compression_type="gzip", linger_ms=20)
    assert_same_records(sent, consume_confluent(bs, topic, 1, len(sent)))
    assert_same_records(sent, consume_kafka_python(bs, topic, 1, len(sent)))
    with RawConnection(bs, timeout_s=30) as conn:
        part = raw_fetch(conn, api_versions(bs), topic, 0, 0)
    from kafka.record.memory_records import MemoryRecords

    records, codecs = MemoryRecords(bytes(part.records)), set()
    while (batch := records.next_batch()) is not None:
        codecs.add(batch.compression_type)
    assert codecs == {ZSTD}
