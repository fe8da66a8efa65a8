"""What Kafka's tools read: `__consumer_offsets` and `__transaction_state` hold Kafka's own
records, checked with an independent decoder of Kafka's schemas (tests/kafka_records.py, the
field lists transcribed from Kafka's JSON definitions, not the broker's codec) reading the
topics as any consumer would, after offset commits from two client libraries and a
rebalance, a group deletion, and a transactional producer's commit."""

from __future__ import annotations

import time

import pytest

from tests.kafka_records import DecodedRecord, read_internal_topic

from .clients import create_topic, kp_admin, make_records, produce_kafka_python, unique_topic
from .groups_support import MemberFactory, wait_exact_cover, wait_records

pytestmark = pytest.mark.integration

PARTITIONS = 4
FIRST_JOIN_S = 30
OFFSET_COMMIT_TYPE, GROUP_METADATA_TYPE = 1, 2  # the key's record type Kafka writes
EMPTY, ONGOING, PREPARE_COMMIT, COMPLETE_COMMIT = 0, 1, 2, 4  # TransactionState ids


@pytest.fixture
def members(tmp_path):  # type: ignore[no-untyped-def]
    factory = MemberFactory(tmp_path / "members")
    yield factory
    factory.close_all()


def produce(bootstrap: str, topic: str, n: int, tag: str) -> None:
    produce_kafka_python(bootstrap, topic, make_records(n, PARTITIONS, tag=tag))


def of_group(records: list[DecodedRecord], group: str, record_type: int) -> list[DecodedRecord]:
    return [r for r in records if r.record_type == record_type and r.key["group"] == group]


def latest_offsets(records: list[DecodedRecord], group: str) -> dict[int, int]:
    """partition -> offset, as a reader of the topic ends up with (in log order per partition;
    tombstones delete)."""
    found: dict[int, int] = {}
    for r in sorted(of_group(records, group, OFFSET_COMMIT_TYPE), key=lambda r: (r.partition, r.offset)):
        if r.value is None:
            found.pop(r.key["partition"], None)
        else:
            found[r.key["partition"]] = r.value["offset"]
    return found


def committed(bootstrap: str, group: str) -> dict[int, int]:
    admin = kp_admin(bootstrap)
    try:
        return {tp.partition: o.offset for tp, o in admin.list_group_offsets([group])[group].items()}
    finally:
        admin.close()


def test_consumer_offsets_hold_kafkas_records(module_broker, members) -> None:  # type: ignore[no-untyped-def]
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

    bs = module_broker.bootstrap
    topic, group = unique_topic("fmt"), unique_topic("fmt-group")
    create_topic(bs, topic, partitions=PARTITIONS)
    started_ms = int(time.time() * 1000)
    first = members("kafka-python", bs, topic, group, commit=True, name="kp")
    wait_exact_cover([first], PARTITIONS, FIRST_JOIN_S, "the first member", each=PARTITIONS)
    produce(bs, topic, 20, "one")
    wait_records([first], 20, 30)
    second = members("confluent", bs, topic, group, commit=True, name="ck")  # a rebalance
    wait_exact_cover([first, second], PARTITIONS, FIRST_JOIN_S, "after the rebalance", each=2)
    produce(bs, topic, 40, "two")
    wait_records([first, second], 60, 30)
    deadline = time.monotonic() + 20
    while not (second.committed() and len(committed(bs, group)) == PARTITIONS):
        assert time.monotonic() < deadline, (first.committed(), second.committed())
        time.sleep(0.2)
    time.sleep(1)  # the last commits of both members

    records = read_internal_topic(bs, "__consumer_offsets")  # raises on any record Kafka would not read
    offsets = of_group(records, group, OFFSET_COMMIT_TYPE)
    assert offsets and {r.value_version for r in offsets} == {3}
    for r in offsets:
        assert r.key["topic"] == topic and 0 <= r.key["partition"] < PARTITIONS
        assert r.value is not None and r.value["metadata"] == "" and r.value["leaderEpoch"] >= -1
        assert started_ms - 5000 <= r.value["commitTimestamp"] <= int(time.time() * 1000) + 5000
    assert latest_offsets(records, group) == committed(bs, group)
    assert sum(committed(bs, group).values()) == 60

    groups = of_group(records, group, GROUP_METADATA_TYPE)
    assert groups and {r.value_version for r in groups} == {3}
    alone, both = groups[0].value, groups[-1].value
    assert alone is not None and both is not None
    assert len(alone["members"]) == 1 and len(both["members"]) == 2
    assert both["generation"] > alone["generation"]
    assert (both["protocolType"], both["protocol"]) == ("consumer", "range")
    assert both["leader"] in {m["memberId"] for m in both["members"]}
    assert sorted(m["clientId"] for m in both["members"]) == ["it-ck", "it-kp"]  # one of each client
    owned = [ConsumerProtocolAssignment.decode(m["assignment"]).partitions() for m in both["members"]]
    assert sorted(len(o) for o in owned) == [2, 2]
    assert sorted(tp.partition for o in owned for tp in o) == list(range(PARTITIONS))
    for m in both["members"]:
        assert m["sessionTimeout"] > 0 and m["rebalanceTimeout"] > 0 and m["subscription"]

    # both leave: an Empty group's record; DeleteGroups: tombstones for the group and its offsets
    first.close()
    second.close()
    admin = kp_admin(bs)
    try:
        deadline = time.monotonic() + 30
        while admin.describe_groups([group])[group]["group_state"] != "Empty":
            assert time.monotonic() < deadline
            time.sleep(0.3)
        admin.delete_groups([group])
    finally:
        admin.close()
    records = read_internal_topic(bs, "__consumer_offsets")
    groups = of_group(records, group, GROUP_METADATA_TYPE)
    assert groups[-1].value is None  # the tombstone
    empty = groups[-2].value
    assert empty is not None and empty["members"] == []
    assert latest_offsets(records, group) == {}
    assert [r for r in of_group(records, group, OFFSET_COMMIT_TYPE) if r.value is None]


def test_transaction_state_holds_kafkas_records(module_broker) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import Consumer, Producer, TopicPartition
    from kafka.protocol.admin.transactions import DescribeTransactionsRequest

    from .clients import RawConnection

    bs = module_broker.bootstrap
    topic, group, txn_id = unique_topic("fmt-tx"), unique_topic("fmt-eos"), unique_topic("fmt-txn")
    create_topic(bs, topic, partitions=2)
    producer = Producer({"bootstrap.servers": bs, "transactional.id": txn_id, "transaction.timeout.ms": 45_000})
    producer.init_transactions(20)
    eos = Consumer({"bootstrap.servers": bs, "group.id": group})
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, value=b"v%d" % i, partition=1)
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 5)], eos.consumer_group_metadata(), 20)
    producer.commit_transaction(20)
    eos.close()
    deadline = time.monotonic() + 20
    while True:  # the markers are written after EndTxn is answered
        with RawConnection(bs) as conn:
            [described] = conn.request(
                DescribeTransactionsRequest(transactional_ids=[txn_id]), 0, timeout_s=10
            ).transaction_states
        if described.transaction_state == "CompleteCommit":
            break
        assert time.monotonic() < deadline, described
        time.sleep(0.2)

    records = [r for r in read_internal_topic(bs, "__transaction_state") if r.key["TransactionalId"] == txn_id]
    assert records and {r.record_type for r in records} == {0} and {r.value_version for r in records} == {1}
    values = [r.value for r in records if r.value is not None]
    statuses = [v["TransactionStatus"] for v in values]
    assert statuses[0] == EMPTY and statuses[-2:] == [PREPARE_COMMIT, COMPLETE_COMMIT]
    assert ONGOING in statuses and statuses.index(ONGOING) < statuses.index(PREPARE_COMMIT)
    for v in values:
        assert (v["ProducerId"], v["ProducerEpoch"]) == (described.producer_id, described.producer_epoch)
        assert v["TransactionTimeoutMs"] == 45_000
        assert v["TransactionLastUpdateTimestampMs"] > 0
        if v["TransactionStatus"] == EMPTY:
            assert v["TransactionPartitions"] is None  # as Kafka writes an Empty state
    prepare = values[statuses.index(PREPARE_COMMIT)]
    listed = {(p["Topic"], i) for p in prepare["TransactionPartitions"] for i in p["PartitionIds"]}
    assert (topic, 1) in listed and any(t == "__consumer_offsets" for t, _ in listed)
    assert prepare["TransactionStartTimestampMs"] > 0

    # the transaction's offsets: an ordinary OffsetCommit record (in the transaction's batch)
    offsets = of_group(read_internal_topic(bs, "__consumer_offsets"), group, OFFSET_COMMIT_TYPE)
    assert [(r.key["topic"], r.key["partition"], r.value_version) for r in offsets] == [(topic, 0, 3)]
    assert offsets[0].value is not None and offsets[0].value["offset"] == 5
