"""An upgrade loses no committed offset and no transaction's state: today's broker starts on
a data dir that Shoal wrote before its internal topics took Kafka's record schemas
(tests/fixtures/legacy_internal_topics: msgpack records written by commit f355774 with real
clients, and the script that made them), reads the offsets, the live group and both
transactions back, finishes the transaction left open, keeps everything through new commits,
a compaction (which rewrites the live state in Kafka's format) and a restart."""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path

import pytest

from .clients import RawConnection, consume_confluent, kp_admin
from tests.kafka_records import read_internal_topic

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "legacy_internal_topics"
# The fixture's records are as old as the fixture: nothing may expire because of that age.
ARGS = [
    "--set",
    "offsets.retention.minutes=52560000",  # 100 years
    "--set",
    "transactional.id.expiration.ms=3153600000000",
    "--set",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
    "--set",
    "offsets.topic.compaction.min.records=20",
]


def expected() -> dict:
    return json.loads((FIXTURE / "expected.json").read_text())


def start_on_fixture(broker_factory, tmp_path: Path):  # type: ignore[no-untyped-def]
    with tarfile.open(FIXTURE / "datadir-f355774.tar.gz") as tar:
        tar.extractall(tmp_path / "upgraded", filter="data")
    return broker_factory("upgraded", extra_args=ARGS)


def group_offsets(bootstrap: str, groups: list[str]) -> dict[str, dict[str, list]]:
    admin = kp_admin(bootstrap)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                found = admin.list_group_offsets(groups)
                break
            except Exception:  # the coordinator is loading
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
    finally:
        admin.close()
    return {g: {str(tp.partition): [o.offset, o.metadata] for tp, o in offsets.items()} for g, offsets in found.items()}


def describe_transactions(bootstrap: str, ids: list[str]) -> dict[str, tuple[str, int, int, int]]:
    from kafka.protocol.admin.transactions import DescribeTransactionsRequest

    with RawConnection(bootstrap) as conn:
        states = conn.request(DescribeTransactionsRequest(transactional_ids=ids), 0, timeout_s=10).transaction_states
    return {
        s.transactional_id: (s.transaction_state, s.producer_id, s.producer_epoch, s.transaction_timeout_ms)
        for s in states
    }


def last_stable_offset(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """(read_committed latest, read_uncommitted latest) of one partition."""
    from kafka.protocol.consumer import ListOffsetsRequest

    T = ListOffsetsRequest.ListOffsetsTopic
    found = []
    with RawConnection(bootstrap) as conn:
        for isolation in (1, 0):
            request = ListOffsetsRequest(
                replica_id=-1,
                isolation_level=isolation,
                topics=[
                    T(
                        name=topic,
                        partitions=[
                            T.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=-1)
                        ],
                    )
                ],
            )
            found.append(conn.request(request, 7, timeout_s=10).topics[0].partitions[0].offset)
    return found[0], found[1]


def test_upgrade_keeps_offsets_groups_and_transactions(broker_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    want = expected()
    broker = start_on_fixture(broker_factory, tmp_path)
    bs = broker.bootstrap
    groups = sorted([*want["offsets"], "legacy-eos-open"])

    # every committed offset (metadata included) and the deletions are as they were
    assert group_offsets(bs, groups) == {**want["offsets"], "legacy-eos-open": {}}
    # the group that had a member when the old broker stopped comes back with it
    admin = kp_admin(bs)
    try:
        described = admin.describe_groups(["legacy-ck"])["legacy-ck"]
    finally:
        admin.close()
    assert described["group_state"] == want["groups"]["legacy-ck"]["state"]
    assert described["protocol_data"] == want["groups"]["legacy-ck"]["protocol"]
    assert sorted(m["client_id"] for m in described["members"]) == want["groups"]["legacy-ck"]["members"]
    assignment = sorted(
        [a["topic"], p]
        for m in described["members"]
        for a in m["member_assignment"]["assigned_partitions"]
        for p in a["partitions"]
    )
    assert assignment == want["groups"]["legacy-ck"]["assignment"]

    # the committed transaction is as it was; the open one is aborted by its timeout with
    # the producer id it had and the epoch bumped, its offsets dropped, its records aborted
    done, open_ = want["transactions"]["legacy-txn-done"], want["transactions"]["legacy-txn-open"]
    assert describe_transactions(bs, ["legacy-txn-done"])["legacy-txn-done"] == (
        done["state"],
        done["producer_id"],
        done["producer_epoch"],
        done["timeout_ms"],
    )
    deadline = time.monotonic() + 30
    while describe_transactions(bs, ["legacy-txn-open"])["legacy-txn-open"][0] != "CompleteAbort":
        assert time.monotonic() < deadline, describe_transactions(bs, ["legacy-txn-open"])
        time.sleep(0.3)
    assert describe_transactions(bs, ["legacy-txn-open"])["legacy-txn-open"] == (
        "CompleteAbort",
        open_["producer_id"],
        open_["producer_epoch"] + 1,
        open_["timeout_ms"],
    )
    topic = want["topic"]
    committed, everything = last_stable_offset(bs, topic, 1)
    assert committed == everything  # the ABORT marker reached the partition
    got = consume_confluent(bs, topic, 3, len(want["committed_values"]), isolation_level="read_committed")
    assert sorted(r.value.decode() for r in got) == want["committed_values"]
    assert group_offsets(bs, ["legacy-eos-open"]) == {"legacy-eos-open": {}}

    # new commits next to the old records, enough of them for a compaction; then a restart
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    admin = kp_admin(bs)
    try:
        for i in range(30):
            admin.alter_group_offsets("legacy-new", {TopicPartition(topic, 0): OffsetAndMetadata(i, "new", -1)})
    finally:
        admin.close()
    broker.restart()
    after = group_offsets(broker.bootstrap, [*groups, "legacy-new"])
    assert after == {**want["offsets"], "legacy-eos-open": {}, "legacy-new": {"0": [29, "new"]}}
    # the loads rewrote the old records: what is left is all in Kafka's schemas (the reader
    # raises on anything else) and says the same
    offsets: dict[str, dict[str, list]] = {}
    for r in sorted(read_internal_topic(broker.bootstrap, "__consumer_offsets"), key=lambda r: (r.partition, r.offset)):
        if r.record_type == 1:
            found = offsets.setdefault(r.key["group"], {})
            if r.value is None:
                found.pop(str(r.key["partition"]), None)
            else:
                found[str(r.key["partition"])] = [r.value["offset"], r.value["metadata"]]
    assert {g: o for g, o in offsets.items() if o} == {g: o for g, o in after.items() if o}
    states = {}
    for r in read_internal_topic(broker.bootstrap, "__transaction_state"):
        if r.value is not None:
            states[r.key["TransactionalId"]] = (
                r.value["TransactionStatus"],
                r.value["ProducerId"],
                r.value["ProducerEpoch"],
            )
    assert states == {
        "legacy-txn-done": (4, done["producer_id"], done["producer_epoch"]),  # CompleteCommit
        "legacy-txn-open": (5, open_["producer_id"], open_["producer_epoch"] + 1),  # CompleteAbort
    }
