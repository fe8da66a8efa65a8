"""A transaction's offsets never roll back an offset written after them (review 3 F5).

TxnOffsetCommit's offsets wait in `__consumer_offsets` for their transaction's COMMIT marker;
Kafka applies each then only if no offset of its partition was written later in the log
(`OffsetMetadataManager.replayEndTransactionMarker`: record offsets compared). A plain
OffsetCommit made meanwhile (an operator's reset, a consumer of the same group) must win, live,
when a coordinator loads the partition again, and across the partition's compaction (which
re-appends live offsets, and so must not make an older one look newer)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import AddOffsetsToTxnRequest, EndTxnRequest, InitProducerIdRequest, TxnOffsetCommitRequest

from broker.groups import offsets_records as o
from broker.groups.offsets import OffsetValue
from broker.groups.shard import GroupShard
from broker.protocol.errors import ErrorCode
from broker.transactions.metadata import TxnState
from tests.inprocess import InProcessBroker, InProcessClient

TXN_ID, GROUP = "eos-app", "g"
RETRIED = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}


def _record(topic: str, partition: int, offset: int | None) -> tuple[bytes, bytes | None]:
    key = o.offset_key(GROUP, topic, partition)
    return key, None if offset is None else o.offset_value(OffsetValue(offset, -1, "", 0))


def test_the_commit_marker_applies_only_offsets_nothing_newer_replaced() -> None:
    """The group shard's replay, in log order: an offset written before the transaction's is
    replaced at the COMMIT marker; one written after it, or a deletion after it, stays."""
    shard = GroupShard(0, cast(Any, None))  # replay needs no context
    shard.replay(1, [_record("t", 0, 50), _record("t", 1, 50)])  # offset 0: plain commits
    shard.replay_transactional(1, 4, 7, [_record("t", 0, 100), _record("t", 1, 100), _record("t", 2, 100)])
    shard.replay(5, [_record("t", 0, 150)])  # offset 4: a plain commit after the transaction's
    shard.replay(6, [_record("t", 2, None)])  # offset 5: t-2's offset deleted (OffsetDelete)
    assert not shard.has_pending_txn_offset(GROUP, "t", 2)  # the deletion dropped the pending offset
    shard.replay_marker(7, 7, True)
    committed = {p: shard.offsets.latest.get(GROUP, "t", p) for p in range(3)}
    assert {p: v.offset if v else None for p, v in committed.items()} == {0: 150, 1: 100, 2: None}
    shard.on_replicated(7)
    assert shard.offsets.committed.get(GROUP, "t", 0) == committed[0]  # what OffsetFetch answers


# -- through a real broker ---------------------------------------------------------------------


async def _retry(call: Any, code_of: Any) -> Any:
    for _ in range(300):
        response = await call()
        if code_of(response) not in RETRIED | {ErrorCode.CONCURRENT_TRANSACTIONS}:
            return response
        await asyncio.sleep(0.02)
    raise AssertionError(f"still {code_of(response)}")


async def _committed(client: InProcessClient, partition: int) -> int:
    group = OffsetFetchRequest.OffsetFetchRequestGroup
    request = OffsetFetchRequest(
        groups=[
            group(
                group_id=GROUP,
                member_id=None,
                member_epoch=-1,
                topics=[group.OffsetFetchRequestTopics(name="in", partition_indexes=[partition])],
            )
        ],
        require_stable=True,
    )
    response = await _retry(lambda: client.request(request, 8), lambda r: r.groups[0].error_code)
    [answer] = response.groups[0].topics[0].partitions
    assert answer.error_code == ErrorCode.NONE, answer.error_code
    return int(answer.committed_offset)


async def _commit(client: InProcessClient, offsets: dict[int, int]) -> None:
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    request = OffsetCommitRequest(
        group_id=GROUP,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        retention_time_ms=-1,
        topics=[
            topic(
                name="in",
                partitions=[
                    topic.OffsetCommitRequestPartition(
                        partition_index=p,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        commit_timestamp=-1,
                        committed_metadata="",
                    )
                    for p, offset in offsets.items()
                ],
            )
        ],
    )
    response = await _retry(lambda: client.request(request, 7), lambda r: r.topics[0].partitions[0].error_code)
    assert {p.error_code for p in response.topics[0].partitions} == {ErrorCode.NONE}


async def _transaction(client: InProcessClient, timeout_ms: int = 60_000) -> tuple[int, int]:
    """FindCoordinator for both keys, InitProducerId, AddOffsetsToTxn: (producer id, epoch)."""
    for key, key_type in ((TXN_ID, 1), (GROUP, 0)):
        await _retry(
            lambda: client.request(FindCoordinatorRequest(key=key, key_type=key_type), 2), lambda r: r.error_code
        )
    init = InitProducerIdRequest(
        transactional_id=TXN_ID, transaction_timeout_ms=timeout_ms, producer_id=-1, producer_epoch=-1
    )
    response = await _retry(lambda: client.request(init, 4), lambda r: r.error_code)
    pid, epoch = response.producer_id, response.producer_epoch
    add = AddOffsetsToTxnRequest(transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, group_id=GROUP)
    assert (await _retry(lambda: client.request(add, 3), lambda r: r.error_code)).error_code == ErrorCode.NONE
    return pid, epoch


async def _txn_commit(client: InProcessClient, pid: int, epoch: int, partition: int, offset: int) -> None:
    topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    request = TxnOffsetCommitRequest(
        transactional_id=TXN_ID,
        group_id=GROUP,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            topic(
                name="in",
                partitions=[
                    topic.TxnOffsetCommitRequestPartition(
                        partition_index=partition,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    )
                ],
            )
        ],
    )
    response = await _retry(lambda: client.request(request, 2), lambda r: r.topics[0].partitions[0].error_code)
    assert response.topics[0].partitions[0].error_code == ErrorCode.NONE


async def _end(harness: InProcessBroker, client: InProcessClient, pid: int, epoch: int) -> None:
    request = EndTxnRequest(transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, committed=True)
    assert (await _retry(lambda: client.request(request, 3), lambda r: r.error_code)).error_code == ErrorCode.NONE
    for _ in range(300):
        if harness.broker.transactions.describe(TXN_ID).state is TxnState.COMPLETE_COMMIT:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the COMMIT markers were not written")


SETTINGS = {"transaction.state.log.num.partitions": "1"}


def test_a_plain_commit_after_the_transactions_offset_wins_live_and_after_a_reload(tmp_path: Path) -> None:
    """The review's sequence: TxnOffsetCommit(in-0 -> 100), OffsetCommit(in-0 -> 150),
    EndTxn(commit). The COMMIT marker rolled the group back to 100; Kafka keeps 150. A new
    coordinator replaying the log (a restart here) must agree."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path, SETTINGS) as harness:
            client = harness.client("app")
            assert await client.create_topic("in", 2, {"diskless.enable": "false"}) == ErrorCode.NONE
            pid, epoch = await _transaction(client)
            await _txn_commit(client, pid, epoch, 0, 100)
            await _txn_commit(client, pid, epoch, 1, 100)
            await _commit(client, {0: 150})  # while the transaction is open
            await _end(harness, client, pid, epoch)
            assert (await _committed(client, 0), await _committed(client, 1)) == (150, 100)
        async with InProcessBroker(tmp_path, SETTINGS) as harness:  # replayed from the log
            client = harness.client("app")
            assert (await _committed(client, 0), await _committed(client, 1)) == (150, 100)

    asyncio.run(scenario())


def test_compaction_while_a_transaction_is_open_keeps_the_order_of_the_log(tmp_path: Path) -> None:
    """Compaction re-appends the live offsets: had it re-appended in-0's offset 50 (written
    before the transaction's 100) after the transaction's record, a coordinator loading the
    log would take 50 for the newer one and skip the committed 100. It leaves such an offset
    where it is (the log start stays below it) until the transaction ends."""

    async def scenario() -> None:
        settings = {**SETTINGS, "offsets.topic.compaction.min.records": "3"}
        async with InProcessBroker(tmp_path, settings) as harness:
            client = harness.client("app")
            assert await client.create_topic("in", 2, {"diskless.enable": "false"}) == ErrorCode.NONE
            log = harness.broker.replica_manager.get(o.OFFSETS_TOPIC, 0).log
            for offset in range(5):
                await _commit(client, {1: offset})
            written_at = log.log_end_offset
            await _commit(client, {0: 50})
            pid, epoch = await _transaction(client)
            await _txn_commit(client, pid, epoch, 0, 100)
            for offset in range(5, 10):  # compactions of the partition while the transaction is open
                await _commit(client, {1: offset})
            assert log.log_start_offset == written_at  # compacted up to in-0's offset 50, not past it
            await _end(harness, client, pid, epoch)
            assert await _committed(client, 0) == 100
        async with InProcessBroker(tmp_path, settings) as harness:
            assert await _committed(harness.client("app"), 0) == 100

    asyncio.run(scenario())


def test_an_offset_a_transaction_holds_one_for_does_not_expire(tmp_path: Path) -> None:
    """As Kafka's cleanupExpiredOffsets: expiry would delete in-0's offset, and the deletion
    would drop the transaction's pending offset for it (a deletion after it wins)."""

    async def scenario() -> None:
        settings = {**SETTINGS, "offsets.retention.minutes": "1"}
        async with InProcessBroker(tmp_path, settings) as harness:
            client = harness.client("app")
            assert await client.create_topic("in", 2, {"diskless.enable": "false"}) == ErrorCode.NONE
            await _commit(client, {0: 50, 1: 50})  # a group without members: expires by commit time
            pid, epoch = await _transaction(client, timeout_ms=900_000)
            await _txn_commit(client, pid, epoch, 0, 100)
            harness.clock.advance(61_000)
            assert harness.broker.groups.expire_offsets() == 1  # in-1's only
            await _end(harness, client, pid, epoch)
            assert await _committed(client, 0) == 100

    asyncio.run(scenario())
