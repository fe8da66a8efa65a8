"""`shoal topics list|describe|create|alter|delete|set-mode`: kafka-topics' commands and
columns, plus each topic's and partition's mode (classic or diskless: the `diskless.enable`
topic config, and where each partition's log switched, from the admin API's `topics.modes`)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..admin_client import AdminClient, AdminError, parse_bootstrap
from .connection import CommandError, UsageError, admin_client

POLL_S = 0.5  # set-mode --wait: between looks at the partitions' modes

MODES = {"classic": "false", "diskless": "true"}


def add_parsers(commands: Any, add_connection_args: Any) -> None:
    topics = commands.add_parser("topics", help="list, describe, create and delete topics").add_subparsers(
        dest="topics_command", required=True
    )
    listing = topics.add_parser("list", help="topic names")
    listing.add_argument("--exclude-internal", action="store_true", help="leave out __consumer_offsets and the like")
    describe = topics.add_parser("describe", help="partitions, leaders, replicas, ISR, mode and configs")
    describe.add_argument("topics", nargs="*", metavar="TOPIC", help="topics to describe (default: all)")
    describe.add_argument(
        "--under-replicated-partitions", action="store_true", help="only partitions with ISR < replicas"
    )
    describe.add_argument("--unavailable-partitions", action="store_true", help="only partitions without a leader")
    describe.add_argument(
        "--under-min-isr-partitions", action="store_true", help="only partitions with ISR < min.insync.replicas"
    )
    create = topics.add_parser("create", help="create a topic")
    create.add_argument("topic", metavar="TOPIC")
    create.add_argument("--partitions", type=int, default=-1, help="default: the broker's num.partitions")
    create.add_argument("--replication-factor", type=int, default=-1, help="default: default.replication.factor")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="topic config (repeatable)")
    create.add_argument("--mode", choices=sorted(MODES), help="classic or diskless (default: diskless.default)")
    create.add_argument("--if-not-exists", action="store_true", help="succeed if the topic exists already")
    alter = topics.add_parser("alter", help="add partitions to a topic")
    alter.add_argument("topic", metavar="TOPIC")
    alter.add_argument("--partitions", type=int, required=True, help="the new (larger) partition count")
    delete = topics.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("topic", metavar="TOPIC")
    delete.add_argument("--if-exists", action="store_true", help="succeed if there is no such topic")
    set_mode = topics.add_parser("set-mode", help="switch a topic between classic and diskless, online")
    set_mode.add_argument("topic", metavar="TOPIC")
    set_mode.add_argument("mode", choices=sorted(MODES), metavar="classic|diskless")
    set_mode.add_argument("--wait", action="store_true", help="return once every partition has switched")
    set_mode.add_argument(
        "--timeout-ms", type=int, default=300_000, help="with --wait: give up after this long (default 5 min)"
    )
    for parser in (listing, describe, create, alter, delete, set_mode):
        add_connection_args(parser)


def command(args: argparse.Namespace) -> tuple[Any, str]:
    client = admin_client(args)
    try:
        commands = {
            "list": _list,
            "describe": _describe,
            "create": _create,
            "alter": _alter,
            "delete": _delete,
            "set-mode": _set_mode,
        }
        return commands[args.topics_command](client, args)
    finally:
        client.close()


def _list(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    names = sorted(client.list_topics())
    if args.exclude_internal:
        names = [n for n in names if not n.startswith("__")]
    return names, "\n".join(names)


def _configs(client: Any, names: list[str]) -> dict[str, dict[str, str]]:
    from kafka.admin import ConfigResource, ConfigResourceType

    if not names:
        return {}
    found = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names], config_filter="all")
    return {name: {k: v["value"] for k, v in cfg.items()} for name, cfg in found.get("topic", {}).items()}


def _describe(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    from kafka.errors import KafkaError

    try:
        described = client.describe_topics(args.topics or None)
    except KafkaError as exc:
        raise CommandError(f"cannot describe {args.topics or 'the topics'}: {exc}") from None
    missing = [t["name"] for t in described if t["error_code"]]
    if missing:
        raise CommandError(f"no such topic: {', '.join(missing)} (`shoal topics list` shows what exists)")
    configs = _configs(client, [t["name"] for t in described])
    modes = _modes(args, [t["name"] for t in described])
    result, lines = [], []
    for topic in sorted(described, key=lambda t: t["name"]):
        name, cfg = topic["name"], configs.get(topic["name"], {})
        min_isr = int(cfg.get("min.insync.replicas", "1"))
        by_index = {m["partition"]: m for m in modes.get(name, {}).get("partitions", [])}
        partitions = [
            {
                "partition": p["partition_index"],
                "leader": p["leader_id"],
                "replicas": p["replica_nodes"],
                "isr": p["isr_nodes"],
                "mode": by_index.get(p["partition_index"], {}).get("mode"),
                "mode_since": by_index.get(p["partition_index"], {}).get("since", -1),
            }
            for p in sorted(topic["partitions"], key=lambda p: p["partition_index"])
        ]
        shown = [p for p in partitions if _wanted(p, args, min_isr)]
        filtered = args.under_replicated_partitions or args.unavailable_partitions or args.under_min_isr_partitions
        if filtered and not shown:
            continue
        mode = modes.get(name, {}).get("status") or ("diskless" if cfg.get("diskless.enable") == "true" else "classic")
        replication = len(partitions[0]["replicas"]) if partitions else 0
        result.append(
            {
                "name": name,
                "topic_id": str(topic["topic_id"]),
                "internal": topic["is_internal"],
                "mode": mode,
                "partition_count": len(partitions),
                "replication_factor": replication,
                "configs": cfg,
                "partitions": shown,
            }
        )
        lines.append(
            f"Topic: {name}\tTopicId: {topic['topic_id']}\tPartitionCount: {len(partitions)}\t"
            f"ReplicationFactor: {replication}\tMode: {mode}\tMinIsr: {min_isr}"
        )
        lines += [
            f"\tTopic: {name}\tPartition: {p['partition']}\tLeader: {p['leader'] if p['leader'] >= 0 else 'none'}\t"
            f"Replicas: {','.join(map(str, p['replicas']))}\tIsr: {','.join(map(str, p['isr']))}"
            + (f"\tMode: {p['mode']}" if p["mode"] else "")
            + (f" (since offset {p['mode_since']})" if p["mode_since"] >= 0 else "")
            for p in shown
        ]
    return result, "\n".join(lines)


def _modes(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    """Each topic's switch status and partition modes ({} from a broker without the command)."""
    try:
        found: dict[str, Any] = AdminClient(parse_bootstrap(args.bootstrap_server)).call(
            "topics.modes", {"topics": names}
        )
    except (AdminError, ValueError, OSError):
        return {}
    return found


def _set_mode(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    """IncrementalAlterConfigs of diskless.enable (what kafka-configs would send), then with
    --wait the partitions' progress until each is in the new mode."""
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import KafkaError

    resource = ConfigResource(ConfigResourceType.TOPIC, args.topic, {"diskless.enable": MODES[args.mode]})
    try:
        outcome = client.alter_configs([resource], incremental=True)
    except KafkaError as exc:
        raise CommandError(f"cannot switch {args.topic} to {args.mode}: {exc}") from None
    except ValueError as exc:  # kafka-python checks the key against the topic's DescribeConfigs first
        raise CommandError(
            f"cannot switch {args.topic}: {exc}; does the topic exist? (`shoal topics list` shows what exists)"
        ) from None
    refused = [r for by_name in outcome.values() for r in by_name.values() if r != "OK"]
    if refused:
        raise CommandError(f"the broker refused to switch {args.topic}: {refused[0]}")
    if not args.wait:
        return (
            {"topic": args.topic, "mode": args.mode, "switched": None},
            f"Switching {args.topic} to {args.mode}; `shoal topics describe {args.topic}` shows the progress.",
        )
    deadline = time.monotonic() + args.timeout_ms / 1000  # noqa: TID251 - a CLI process, not the broker's loop
    shown = ""
    while True:
        status = _modes(args, [args.topic]).get(args.topic, {})
        line = status.get("status", "no answer from the cluster")
        if line == args.mode:
            return {"topic": args.topic, "mode": args.mode, "switched": True, "partitions": status["partitions"]}, (
                f"{args.topic} is {args.mode}: every partition has switched."
            )
        if line != shown:
            print(line, file=sys.stderr, flush=True)
            shown = line
        if time.monotonic() >= deadline:  # noqa: TID251
            raise CommandError(
                f"{args.topic} has not finished switching to {args.mode} after {args.timeout_ms} ms: {line}. "
                "It resumes by itself once the waiting partitions have leaders; see the runbook "
                "'A mode switch does not finish' in docs/operations.md"
            )
        time.sleep(POLL_S)  # noqa: TID251


def _wanted(partition: dict[str, Any], args: argparse.Namespace, min_isr: int) -> bool:
    if not (args.under_replicated_partitions or args.unavailable_partitions or args.under_min_isr_partitions):
        return True
    return (
        (args.under_replicated_partitions and len(partition["isr"]) < len(partition["replicas"]))
        or (args.unavailable_partitions and partition["leader"] < 0)
        or (args.under_min_isr_partitions and len(partition["isr"]) < min_isr)
    )


def _create(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    configs: dict[str, str] = {}
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--config expects KEY=VALUE, got {item!r}")
        configs[key.strip()] = value.strip()
    if args.mode is not None:
        if "diskless.enable" in configs and configs["diskless.enable"] != MODES[args.mode]:
            raise UsageError(f"--mode {args.mode} contradicts --config diskless.enable={configs['diskless.enable']}")
        configs["diskless.enable"] = MODES[args.mode]
    topic = NewTopic(args.topic, args.partitions, args.replication_factor, topic_configs=configs)
    try:
        client.create_topics([topic])
    except TopicAlreadyExistsError:
        if args.if_not_exists:
            return {"topic": args.topic, "created": False}, f"Topic {args.topic} exists already."
        raise CommandError(f"topic {args.topic} exists already (--if-not-exists accepts that)") from None
    except KafkaError as exc:
        raise CommandError(f"cannot create {args.topic}: {exc}") from None
    return {"topic": args.topic, "created": True}, f"Created topic {args.topic}."


def _delete(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    from kafka.errors import KafkaError, UnknownTopicOrPartitionError

    try:
        client.delete_topics([args.topic])
    except UnknownTopicOrPartitionError:
        if args.if_exists:
            return {"topic": args.topic, "deleted": False}, f"There is no topic {args.topic}."
        raise CommandError(f"there is no topic {args.topic} (--if-exists accepts that)") from None
    except KafkaError as exc:
        raise CommandError(f"cannot delete {args.topic}: {exc}") from None
    return {"topic": args.topic, "deleted": True}, f"Deleted topic {args.topic}."


def _alter(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    from kafka.errors import KafkaError

    try:
        client.create_partitions({args.topic: args.partitions})
    except KafkaError as exc:
        raise CommandError(f"cannot give {args.topic} {args.partitions} partitions: {exc}") from None
    return {"topic": args.topic, "partitions": args.partitions}, f"{args.topic} has {args.partitions} partitions."
