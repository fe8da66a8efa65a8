"""What the transaction coordinator writes to `__transaction_state`: Kafka's own records (the
version Kafka 4.x writes), one per state change of a transactional id, inside ordinary record
batches (`coordinator.record_batches`), so Kafka's tools (`kafka-console-consumer --formatter`
with Kafka's transaction-log formatter) read them.

Key: record type 0, TransactionLogKey (the transactional id). Value: TransactionLogValue
version 1, the flexible one Kafka 4.x writes (with `transaction.version` 1 or more): producer
id and epoch, timeout, state (Kafka's ids, `TXN_STATE_IDS`), partitions (null when Empty, as
Kafka writes it), last update and start timestamps; tagged field 0 the previous producer id.
A null value is a tombstone (the id expired). Version 0 is read too.

One piece of Shoal's state has no field in Kafka's schema: the epoch a producer had before it
bumped its own (KIP-360's `lastProducerEpoch`, which Kafka keeps in memory only, so a retried
bump after a coordinator failover is fenced there). Shoal keeps it in tagged field
`SHOAL_LAST_PRODUCER_EPOCH_TAG`, far above Kafka's own tags: Kafka's readers skip tags they do
not know, as flexible versions require. Records Shoal wrote before it used Kafka's schemas
(msgpack) are still read (`legacy_records`) until compaction rewrites them.

The schemas are transcribed from Apache Kafka's definitions,
transaction-coordinator/src/main/resources/common/message/TransactionLog{Key,Value}.json; the
version written follows Kafka's TransactionLog (`TransactionVersion.transactionLogValueVersion`).
"""

from __future__ import annotations

from ..coordinator.record_schemas import CorruptRecord, RecordSchema, field, message, read_version
from ..groups.offsets_records import partition_for
from . import legacy_records
from .metadata import TransactionMetadata, TxnState

TRANSACTION_TOPIC = "__transaction_state"
TRANSACTION_LOG_TYPE = 0
VALUE_VERSION = 1
SHOAL_LAST_PRODUCER_EPOCH_TAG = 10_000

__all__ = [
    "TRANSACTION_TOPIC",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "partition_for",
]

# Kafka's TransactionState ids (TransactionState.fromId)
TXN_STATE_IDS: dict[TxnState, int] = {
    TxnState.EMPTY: 0,
    TxnState.ONGOING: 1,
    TxnState.PREPARE_COMMIT: 2,
    TxnState.PREPARE_ABORT: 3,
    TxnState.COMPLETE_COMMIT: 4,
    TxnState.COMPLETE_ABORT: 5,
    TxnState.DEAD: 6,
    TxnState.PREPARE_EPOCH_FENCE: 7,
}
_STATES_BY_ID = {v: k for k, v in TXN_STATE_IDS.items()}

TRANSACTION_LOG_KEY = RecordSchema(message("TransactionLogKey", "0", "none", [field("TransactionalId", "string", "0")]))
TRANSACTION_LOG_VALUE = RecordSchema(
    message(
        "TransactionLogValue",
        "0-1",
        "1+",
        [
            field("ProducerId", "int64", "0+"),
            field("PreviousProducerId", "int64", "1+", tag=0, default=-1),
            field("NextProducerId", "int64", "1+", tag=1, default=-1),
            field("ProducerEpoch", "int16", "0+"),
            field("TransactionTimeoutMs", "int32", "0+"),
            field("TransactionStatus", "int8", "0+"),
            field(
                "TransactionPartitions",
                "[]PartitionsSchema",
                "0+",
                nullable="0+",
                fields=[field("Topic", "string", "0+"), field("PartitionIds", "[]int32", "0+")],
            ),
            field("TransactionLastUpdateTimestampMs", "int64", "0+"),
            field("TransactionStartTimestampMs", "int64", "0+"),
            field("ClientTransactionVersion", "int16", "1+", tag=2, default=0),
            field("ShoalLastProducerEpoch", "int16", "1+", tag=SHOAL_LAST_PRODUCER_EPOCH_TAG, default=-1),
        ],
    )
)
_Partitions = TRANSACTION_LOG_VALUE.struct("PartitionsSchema")


def encode_key(transactional_id: str) -> bytes:
    return TRANSACTION_LOG_KEY.encode(TRANSACTION_LOG_TYPE, transactional_id=transactional_id)


def decode_key(data: bytes) -> str:
    if legacy_records.is_legacy(data):
        return legacy_records.decode_key(data)
    record_type = read_version(data, "__transaction_state key")
    if record_type != TRANSACTION_LOG_TYPE:
        raise CorruptRecord(f"__transaction_state key of record type {record_type}")
    _, key = TRANSACTION_LOG_KEY.decode(data)
    transactional_id: str = key.transactional_id
    return transactional_id


def encode_value(txn: TransactionMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions):
        by_topic.setdefault(topic, []).append(partition)
    partitions = (
        None if txn.state is TxnState.EMPTY else [_Partitions(topic=t, partition_ids=ps) for t, ps in by_topic.items()]
    )
    return TRANSACTION_LOG_VALUE.encode(
        VALUE_VERSION,
        producer_id=txn.producer_id,
        previous_producer_id=txn.previous_producer_id,
        producer_epoch=txn.producer_epoch,
        transaction_timeout_ms=txn.timeout_ms,
        transaction_status=TXN_STATE_IDS[txn.state],
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=txn.last_update_ms,
        transaction_start_timestamp_ms=txn.txn_start_ms,
        shoal_last_producer_epoch=txn.last_producer_epoch,
    )


def decode_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    """The id's state; as Kafka's TransactionLog.readTxnRecordValue, an Empty one has no
    partitions whatever the record lists."""
    if legacy_records.is_legacy(data):
        return legacy_records.decode_value(transactional_id, data)
    _, value = TRANSACTION_LOG_VALUE.decode(data)
    state = _STATES_BY_ID.get(value.transaction_status)
    if state is None:
        raise CorruptRecord(f"{transactional_id}: unknown transaction state id {value.transaction_status}")
    partitions = frozenset((tp.topic, p) for tp in (value.transaction_partitions or ()) for p in tp.partition_ids)
    return TransactionMetadata(
        transactional_id,
        producer_id=value.producer_id,
        previous_producer_id=value.previous_producer_id,
        producer_epoch=value.producer_epoch,
        last_producer_epoch=value.shoal_last_producer_epoch,
        timeout_ms=value.transaction_timeout_ms,
        state=state,
        partitions=frozenset() if state is TxnState.EMPTY else partitions,
        txn_start_ms=value.transaction_start_timestamp_ms,
        last_update_ms=value.transaction_last_update_timestamp_ms,
    )
