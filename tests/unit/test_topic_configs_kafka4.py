"""Every Kafka 4.0 topic config, through a whole in-process broker (tests/inprocess.py):
CreateTopics with the whole set at Kafka's defaults (what mirroring tools, Terraform providers
and topic operators send), DescribeConfigs answering each with Kafka's default, type and
source, IncrementalAlterConfigs of each, and bad values refused with INVALID_CONFIG and
Kafka's message.

Regression (issue 26, item 11): 16 of these 33 names were unknown (compression.type even as
`producer`), so such tools failed on the first one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

from broker.protocol.errors import ErrorCode
from tests.inprocess import InProcessBroker, InProcessClient

LONG_MAX = str(2**63 - 1)
# Kafka 4.0's LogConfig (storage/.../LogConfig.java, TopicConfig, ServerLogConfigs, QuotaConfig):
# name -> (default as DescribeConfigs prints it, DescribeConfigs config_type)
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
KAFKA_40 = {
    "cleanup.policy": ("delete", LIST),
    "compression.gzip.level": ("-1", INT),
    "compression.lz4.level": ("9", INT),
    "compression.type": ("producer", STRING),
    "compression.zstd.level": ("3", INT),
    "delete.retention.ms": ("86400000", LONG),
    "file.delete.delay.ms": ("60000", LONG),
    "flush.messages": (LONG_MAX, LONG),
    "flush.ms": (LONG_MAX, LONG),
    "follower.replication.throttled.replicas": ("", LIST),
    "index.interval.bytes": ("4096", INT),
    "leader.replication.throttled.replicas": ("", LIST),
    "local.retention.bytes": ("-2", LONG),
    "local.retention.ms": ("-2", LONG),
    "max.compaction.lag.ms": (LONG_MAX, LONG),
    "max.message.bytes": ("1048588", INT),
    "message.timestamp.after.max.ms": ("3600000", LONG),
    "message.timestamp.before.max.ms": (LONG_MAX, LONG),
    "message.timestamp.type": ("CreateTime", STRING),
    "min.cleanable.dirty.ratio": ("0.5", DOUBLE),
    "min.compaction.lag.ms": ("0", LONG),
    "min.insync.replicas": ("1", INT),
    "preallocate": ("false", BOOLEAN),
    "remote.log.copy.disable": ("false", BOOLEAN),
    "remote.log.delete.on.disable": ("false", BOOLEAN),
    "remote.storage.enable": ("false", BOOLEAN),
    "retention.bytes": ("-1", LONG),
    "retention.ms": ("604800000", LONG),
    "segment.bytes": ("1073741824", INT),
    "segment.index.bytes": ("10485760", INT),
    "segment.jitter.ms": ("0", LONG),
    "segment.ms": ("604800000", LONG),
    "unclean.leader.election.enable": ("false", BOOLEAN),
}
# A value Kafka refuses for each key that has a validator, and the end of Kafka's message.
BAD = {
    "cleanup.policy": ("forever", "String must be one of: delete"),
    "compression.gzip.level": ("0", "Value must be between 1 and 9 or equal to -1"),
    "compression.lz4.level": ("18", "Value must be no more than 17"),
    "compression.type": ("brotli", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    "compression.zstd.level": ("-131073", "Value must be at least -131072"),
    "delete.retention.ms": ("-1", "Value must be at least 0"),
    "file.delete.delay.ms": ("soon", "Not a number of type LONG"),
    "follower.replication.throttled.replicas": ("all", "must be the literal '*' or a list of replicas"),
    "max.compaction.lag.ms": ("0", "Value must be at least 1"),
    "max.message.bytes": ("2147483648", "Not a number of type INT"),
    "min.cleanable.dirty.ratio": ("1.5", "Value must be no more than 1"),
    "min.compaction.lag.ms": ("-1", "Value must be at least 0"),
    "preallocate": ("maybe", "Expected value to be either true or false"),
    "segment.jitter.ms": ("-1", "Value must be at least 0"),
    "unclean.leader.election.enable": ("1", "Expected value to be either true or false"),
}
TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5


async def describe(client: InProcessClient, topic: str) -> dict[str, tuple[str, int, int]]:
    """name -> (value, source, type)."""
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=2, resource_name=topic, configuration_keys=None
            )
        ],
        include_synonyms=True,
        include_documentation=True,
    )
    response = await client.request(request, await client.version(DescribeConfigsRequest, cap=4))
    [result] = response.results
    assert result.error_code == 0, result.error_message
    return {c.name: (c.value, c.config_source, c.config_type) for c in result.configs}


async def alter(client: InProcessClient, topic: str, name: str, value: str) -> tuple[int, str | None]:
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    request = IncrementalAlterConfigsRequest(
        resources=[
            resource(
                resource_type=2,
                resource_name=topic,
                configs=[resource.AlterableConfig(name=name, config_operation=0, value=value)],
            )
        ],
        validate_only=False,
    )
    response = await client.request(request, await client.version(IncrementalAlterConfigsRequest, cap=1))
    [answer] = response.responses
    return answer.error_code, answer.error_message


def test_every_kafka_40_topic_config_with_kafkas_defaults(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            assert await client.create_topic("plain", 1, {"diskless.enable": "false"}) == 0
            described = await describe(client, "plain")
            for name, (default, kind) in KAFKA_40.items():
                assert described[name] == (default, DEFAULT_CONFIG, kind), name
            copied = {name: default for name, (default, _kind) in KAFKA_40.items()}
            assert await client.create_topic("copied", 1, {**copied, "diskless.enable": "false"}) == 0
            described = await describe(client, "copied")
            for name, (default, kind) in KAFKA_40.items():
                assert described[name] == (default, TOPIC_CONFIG, kind), name

    asyncio.run(scenario())


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_is_refused_with_kafkas_message(tmp_path: Path, name: str) -> None:
    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            value, message = BAD[name]
            assert await client.create_topic("t", 1, {name: value}) == ErrorCode.INVALID_CONFIG
            assert await client.create_topic("t", 1) == 0
            code, text = await alter(client, "t", name, value)
            assert code == ErrorCode.INVALID_CONFIG and text is not None
            assert text.startswith(f"Invalid value {value} for configuration {name}: ") and message in text
            default = KAFKA_40[name][0]
            good = {"compression.type": "zstd", "cleanup.policy": "delete", "min.cleanable.dirty.ratio": "0.25"}
            assert await alter(client, "t", name, good.get(name, default)) == (0, None)

    asyncio.run(scenario())
