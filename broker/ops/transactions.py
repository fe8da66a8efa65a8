"""`shoal transactions list|describe|describe-producers|find-hanging|abort`: kafka-transactions'
commands, to see ongoing transactions and to end a hanging one by hand.

A transaction hangs when a partition holds an open transaction that its coordinator will
never end: the producer wrote to the partition without the coordinator knowing (a client
bug, or a batch retried after its transaction ended, which KIP-890 verification prevents),
or the coordinator gave up a marker. The partition's last stable offset then stays at the
transaction's first offset and read_committed consumers stall. `find-hanging` applies Kafka's
test (TransactionsCommand.FindHangingTransactionsCommand): an open transaction whose
producer last wrote longer ago than the largest transaction timeout, and whose producer id
no coordinator lists as that partition's ongoing transaction. `abort` then writes the ABORT
marker on that one partition (WriteTxnMarkers to its leader, as the coordinator would).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .connection import CommandError, UsageError, admin_client, table

DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15.0  # Kafka's transaction.max.timeout.ms, in minutes
NO_OFFSET = -1


def add_parsers(commands: Any, add_connection_args: Any) -> None:
    txns = commands.add_parser(
        "transactions", help="ongoing transactions: list, describe, find and abort hanging ones"
    ).add_subparsers(dest="transactions_command", required=True)
    listing = txns.add_parser("list", help="transactional ids with their coordinator, producer id and state")
    describe = txns.add_parser("describe", help="one transactional id's state, timeout, start time and partitions")
    describe.add_argument("--transactional-id", required=True)
    producers = txns.add_parser("describe-producers", help="a partition's producers and their open transactions")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    hanging = txns.add_parser("find-hanging", help="open transactions their coordinator will never end")
    hanging.add_argument("--broker-id", type=int, help="search the partitions this broker hosts")
    hanging.add_argument("--topic", help="search this topic's partitions")
    hanging.add_argument("--partition", type=int, help="only this partition (with --topic)")
    hanging.add_argument(
        "--max-transaction-timeout",
        type=float,
        default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
        metavar="MINUTES",
        help="the brokers' transaction.max.timeout.ms in minutes (default 15; fractions allowed)",
    )
    abort = txns.add_parser("abort", help="write an ABORT marker for one partition's open transaction")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, help="the transaction's first offset (from find-hanging)")
    abort.add_argument("--producer-id", type=int, help="instead of --start-offset, with the two epochs")
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int)
    for parser in (listing, describe, producers, hanging, abort):
        add_connection_args(parser)


def command(args: argparse.Namespace) -> tuple[Any, str]:
    from kafka.errors import KafkaError

    commands = {
        "list": _list,
        "describe": _describe,
        "describe-producers": _describe_producers,
        "find-hanging": _find_hanging,
        "abort": _abort,
    }
    run = commands[args.transactions_command]
    _check_usage(args)
    client = admin_client(args)
    try:
        return run(client, args)
    except KafkaError as exc:
        raise CommandError(f"transactions {args.transactions_command} failed: {_reason(exc)}") from None
    finally:
        client.close()


def _check_usage(args: argparse.Namespace) -> None:
    """Kafka's rules for the flags argparse cannot express, before connecting."""
    if args.transactions_command == "find-hanging":
        if args.topic is None and args.broker_id is None:
            raise UsageError("find-hanging needs --broker-id or --topic to limit the search")
        if args.partition is not None and args.topic is None:
            raise UsageError("--partition needs --topic")
        if args.max_transaction_timeout <= 0:
            raise UsageError(f"--max-transaction-timeout must be > 0 minutes, got {args.max_transaction_timeout}")
    if args.transactions_command == "abort":
        explicit = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
        if args.start_offset is not None and any(v is not None for v in explicit):
            raise UsageError("abort takes --start-offset, or --producer-id with the epochs, not both")
        if args.start_offset is None and any(v is None for v in explicit):
            raise UsageError(
                "abort needs --start-offset (the START-OFFSET find-hanging prints), or all of "
                "--producer-id, --producer-epoch and --coordinator-epoch"
            )


def _reason(exc: Exception) -> str:
    """kafka-python's error, without the class path it prefixes to the message."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _now_ms() -> int:
    return int(time.time() * 1000)  # noqa: TID251 - a CLI process, not the broker's loop


def _tp(args: argparse.Namespace) -> Any:
    from kafka import TopicPartition

    return TopicPartition(args.topic, args.partition)


# --- list, describe ---------------------------------------------------------------------------


def _list(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    listed = client.list_transactions()
    result = sorted(
        (
            {
                "transactional_id": t.transactional_id,
                "coordinator": broker,
                "producer_id": t.producer_id,
                "state": t.state.value,
            }
            for broker, listings in listed.items()
            for t in listings
        ),
        key=lambda row: row["transactional_id"],
    )
    rows = [(r["transactional_id"], str(r["coordinator"]), str(r["producer_id"]), r["state"]) for r in result]
    return result, table(("TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"), rows)


def _describe(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    from kafka.errors import TransactionalIdNotFoundError

    try:
        described = client.describe_transactions([args.transactional_id])[args.transactional_id]
    except TransactionalIdNotFoundError:
        raise CommandError(
            f"no transactional id {args.transactional_id!r} at its coordinator (never used, or expired)"
        ) from None
    start = described.transaction_start_time_ms
    partitions = sorted(described.topic_partitions)
    result = {
        "transactional_id": args.transactional_id,
        "coordinator": described.coordinator_id,
        "state": described.state.value,
        "producer_id": described.producer_id,
        "producer_epoch": described.producer_epoch,
        "transaction_timeout_ms": described.transaction_timeout_ms,
        "transaction_start_time_ms": start if start >= 0 else None,
        "transaction_duration_ms": _now_ms() - start if start >= 0 else None,
        "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in partitions],
    }
    row = (
        str(result["coordinator"]),
        args.transactional_id,
        str(result["producer_id"]),
        str(result["producer_epoch"]),
        result["state"],
        str(result["transaction_timeout_ms"]),
        _or_none(result["transaction_start_time_ms"]),
        _or_none(result["transaction_duration_ms"]),
        ",".join(f"{tp.topic}-{tp.partition}" for tp in partitions) or "-",
    )
    header = (
        "COORDINATOR",
        "TRANSACTIONAL-ID",
        "PRODUCER-ID",
        "EPOCH",
        "STATE",
        "TIMEOUT-MS",
        "START-TIME-MS",
        "DURATION-MS",
        "PARTITIONS",
    )
    return result, table(header, [row])


def _or_none(value: int | None) -> str:
    return "None" if value is None else str(value)


# --- producers of a partition -----------------------------------------------------------------


def _producer_json(state: Any) -> dict[str, int | None]:
    start = state.current_transaction_start_offset
    return {
        "producer_id": state.producer_id,
        "producer_epoch": state.producer_epoch,
        "coordinator_epoch": state.coordinator_epoch,
        "last_sequence": state.last_sequence,
        "last_timestamp": state.last_timestamp,
        "current_transaction_start_offset": start if start >= 0 else None,
    }


def _describe_producers(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    tp = _tp(args)
    producers = client.describe_producers([tp])[tp].active_producers
    result = [_producer_json(p) for p in producers]
    rows = [
        (
            str(p["producer_id"]),
            str(p["producer_epoch"]),
            str(p["coordinator_epoch"]),
            str(p["last_sequence"]),
            str(p["last_timestamp"]),
            _or_none(p["current_transaction_start_offset"]),
        )
        for p in result
    ]
    header = ("PRODUCER-ID", "EPOCH", "COORDINATOR-EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP", "TXN-START-OFFSET")
    return result, table(header, rows)


# --- find-hanging: Kafka's decision, pure ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A producer's open transaction on one partition (a DescribeProducers row with a start offset)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int


def candidates(
    producers: Mapping[tuple[str, int], Iterable[Any]], now_ms: int, max_timeout_ms: float
) -> list[OpenTransaction]:
    """Open transactions whose producer last wrote longer ago than `max_timeout_ms`: no live
    transaction can be that old, since its coordinator aborts it after its timeout (at most
    the brokers' transaction.max.timeout.ms). `producers`: (topic, partition) -> the
    partition's DescribeProducers rows."""
    found = []
    for (topic, partition), states in sorted(producers.items()):
        for p in states:
            if p.current_transaction_start_offset >= 0 and now_ms - p.last_timestamp > max_timeout_ms:
                found.append(
                    OpenTransaction(
                        topic,
                        partition,
                        p.producer_id,
                        p.producer_epoch,
                        p.coordinator_epoch,
                        p.current_transaction_start_offset,
                        p.last_timestamp,
                    )
                )
    return found


def hanging(
    open_txns: Sequence[OpenTransaction],
    transactional_ids: Mapping[int, str],
    ongoing: Mapping[str, Iterable[tuple[str, int]] | None],
) -> list[OpenTransaction]:
    """Kafka's filter: an open transaction hangs when no coordinator lists its producer id
    (`transactional_ids`: producer id -> id), the id's coordinator does not know it (None in
    `ongoing`), or the id's transaction does not include the partition (`ongoing`: id -> the
    partitions its coordinator still has to write markers to). Any other one is the
    coordinator's to end, and it will: at its commit, abort or timeout."""
    known = {txn_id: {(t, p) for t, p in parts} for txn_id, parts in ongoing.items() if parts is not None}
    result = []
    for txn in open_txns:
        txn_id = transactional_ids.get(txn.producer_id)
        if txn_id is None or txn_id not in known or (txn.topic, txn.partition) not in known[txn_id]:
            result.append(txn)
    return result


def _find_hanging(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    from kafka.errors import TransactionalIdNotFoundError

    partitions = _partitions_to_search(client, args)
    described = client.describe_producers(partitions) if partitions else {}
    now_ms = _now_ms()
    found = candidates(
        {(tp.topic, tp.partition): state.active_producers for tp, state in described.items()},
        now_ms,
        args.max_transaction_timeout * 60_000,
    )
    ids: dict[int, str] = {}
    ongoing: dict[str, list[tuple[str, int]] | None] = {}
    if found:
        listed = client.list_transactions(producer_id_filters=sorted({t.producer_id for t in found}))
        ids = {t.producer_id: t.transactional_id for listings in listed.values() for t in listings}
        for txn_id in sorted(set(ids.values())):
            try:
                description = client.describe_transactions([txn_id])[txn_id]
            except TransactionalIdNotFoundError:
                ongoing[txn_id] = None
                continue
            ongoing[txn_id] = [(tp.topic, tp.partition) for tp in description.topic_partitions]
    result = [
        {
            "topic": t.topic,
            "partition": t.partition,
            "producer_id": t.producer_id,
            "producer_epoch": t.producer_epoch,
            "coordinator_epoch": t.coordinator_epoch,
            "start_offset": t.start_offset,
            "last_timestamp": t.last_timestamp,
            "duration_min": round((now_ms - t.last_timestamp) / 60_000, 1),
        }
        for t in hanging(found, ids, ongoing)
    ]
    rows = [
        (
            str(r["topic"]),
            str(r["partition"]),
            str(r["producer_id"]),
            str(r["producer_epoch"]),
            str(r["coordinator_epoch"]),
            str(r["start_offset"]),
            str(r["last_timestamp"]),
            str(r["duration_min"]),
        )
        for r in result
    ]
    header = (
        "TOPIC",
        "PARTITION",
        "PRODUCER-ID",
        "EPOCH",
        "COORDINATOR-EPOCH",
        "START-OFFSET",
        "LAST-TIMESTAMP",
        "DURATION(MIN)",
    )
    if not rows:
        return result, f"No hanging transactions (searched {len(partitions)} partition(s))."
    return result, table(header, rows) + "\n(`shoal transactions abort --start-offset` ends one)"


def _partitions_to_search(client: Any, args: argparse.Namespace) -> list[Any]:
    """--topic [--partition], else every topic's; with --broker-id only the partitions that
    broker hosts (a replica, as kafka-transactions does). Each is asked of its leader."""
    from kafka import TopicPartition

    if args.topic is not None and args.partition is not None:
        return [TopicPartition(args.topic, args.partition)]
    described = client.describe_topics([args.topic] if args.topic is not None else None)
    partitions = []
    for topic in described:
        if topic["error_code"]:
            raise CommandError(f"no such topic: {topic['name']}")
        for p in topic["partitions"]:
            if args.broker_id is None or args.broker_id in p["replica_nodes"]:
                partitions.append(TopicPartition(topic["name"], p["partition_index"]))
    return sorted(partitions)


# --- abort ------------------------------------------------------------------------------------


def _abort(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    from kafka.admin import AbortTransactionSpec

    tp = _tp(args)
    if args.start_offset is not None:
        producers = client.describe_producers([tp])[tp].active_producers
        match = next((p for p in producers if p.current_transaction_start_offset == args.start_offset), None)
        if match is None:
            raise CommandError(
                f"no open transaction starts at offset {args.start_offset} on {tp.topic}-{tp.partition} "
                "(`shoal transactions describe-producers` lists the open ones)"
            )
        producer_id, producer_epoch, coordinator_epoch = (
            match.producer_id,
            match.producer_epoch,
            match.coordinator_epoch,
        )
    else:
        producer_id, producer_epoch, coordinator_epoch = args.producer_id, args.producer_epoch, args.coordinator_epoch
    # A producer whose transaction hung before any marker has coordinator epoch -1; 0 is at
    # most any real coordinator epoch, so the leader takes it (Kafka's tool does the same).
    spec = AbortTransactionSpec(tp, producer_id, producer_epoch, max(coordinator_epoch, 0))
    client.abort_transaction(spec)
    result = {
        "topic": tp.topic,
        "partition": tp.partition,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "coordinator_epoch": spec.coordinator_epoch,
    }
    text = (
        f"Aborted the open transaction of producer {producer_id} (epoch {producer_epoch}) on {tp.topic}-{tp.partition}."
    )
    return result, text
