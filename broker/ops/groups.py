"""`shoal groups list|describe|lag|delete`: kafka-consumer-groups' views (members and their
partitions; per partition the committed offset, the log end and the lag)."""

from __future__ import annotations

import argparse
from typing import Any

from .connection import CommandError, UsageError, admin_client, table


def add_parsers(commands: Any, add_connection_args: Any) -> None:
    groups = commands.add_parser("groups", help="consumer groups: members, offsets, lag").add_subparsers(
        dest="groups_command", required=True
    )
    listing = groups.add_parser("list", help="group ids with their state")
    describe = groups.add_parser("describe", help="state, protocol and members with their partitions")
    lag = groups.add_parser("lag", help="per partition: committed offset, log end offset, lag")
    delete = groups.add_parser("delete", help="delete groups without members (their committed offsets go)")
    for parser in (describe, lag, delete):
        parser.add_argument("groups", nargs="+", metavar="GROUP")
    reset = groups.add_parser("reset-offsets", help="move a group's committed offsets (dry run unless --execute)")
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument("--topic", required=True, metavar="TOPIC[:P,P...]", help="a topic, or some of its partitions")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int, metavar="N", help="clamped to each partition's range")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets (the group must have no members)")
    for parser in (listing, describe, lag, delete, reset):
        add_connection_args(parser)


def command(args: argparse.Namespace) -> tuple[Any, str]:
    from kafka.errors import KafkaError

    client = admin_client(args)
    try:
        commands = {"list": _list, "describe": _describe, "lag": _lag, "delete": _delete, "reset-offsets": _reset}
        return commands[args.groups_command](client, args)
    except KafkaError as exc:
        raise CommandError(f"groups {args.groups_command} failed: {exc}") from None
    finally:
        client.close()


def _list(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    groups = sorted(client.list_groups(), key=lambda g: g["group_id"])
    result = [{"group": g["group_id"], "state": g["group_state"], "protocol": g["protocol_type"]} for g in groups]
    return result, table(("GROUP", "STATE", "PROTOCOL"), [(g["group"], g["state"], g["protocol"]) for g in result])


def _describe(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    described = client.describe_groups(args.groups)
    result, lines = [], []
    for group_id in args.groups:
        group = described.get(group_id)
        if group is None or group.get("error"):
            raise CommandError(f"cannot describe group {group_id}: {group.get('error') if group else 'no answer'}")
        members = [
            {
                "member_id": m["member_id"],
                "client_id": m["client_id"],
                "host": m["client_host"],
                "partitions": {
                    a["topic"]: a["partitions"]
                    for a in (m.get("member_assignment") or {}).get("assigned_partitions", [])
                },
            }
            for m in group["members"]
        ]
        result.append(
            {"group": group_id, "state": group["group_state"], "protocol": group["protocol_data"], "members": members}
        )
        lines.append(
            f"Group {group_id}: {group['group_state']}, {len(members)} member(s), protocol {group['protocol_data'] or '-'}"
        )
        rows = [
            (
                m["member_id"],
                m["client_id"],
                m["host"],
                " ".join(f"{t}:{','.join(map(str, p))}" for t, p in m["partitions"].items()),
            )
            for m in members
        ]
        if rows:
            lines.append(table(("MEMBER", "CLIENT", "HOST", "PARTITIONS"), rows))
    return result, "\n".join(lines)


def _lag(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    from kafka.admin import OffsetSpec

    committed = client.list_group_offsets({g: None for g in args.groups})
    partitions = {tp for offsets in committed.values() for tp in offsets}
    ends = client.list_partition_offsets({tp: OffsetSpec.LATEST for tp in partitions}) if partitions else {}
    result, rows = [], []
    for group_id in args.groups:
        for tp, meta in sorted(committed.get(group_id, {}).items(), key=lambda i: (i[0].topic, i[0].partition)):
            end = ends[tp].offset if tp in ends else -1
            lag = max(end - meta.offset, 0) if end >= 0 and meta.offset >= 0 else None
            result.append(
                {
                    "group": group_id,
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "committed": meta.offset,
                    "end": end,
                    "lag": lag,
                }
            )
            rows.append(
                (group_id, tp.topic, str(tp.partition), str(meta.offset), str(end), "-" if lag is None else str(lag))
            )
    text = (
        table(("GROUP", "TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG"), rows)
        if rows
        else "(no committed offsets)"
    )
    return result, text


def _delete(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    outcome = client.delete_groups(args.groups)
    failed = {g: str(e) for g, e in outcome.items() if e not in (None, "OK") and not _ok(e)}
    if failed:
        raise CommandError("; ".join(f"cannot delete group {g}: {e}" for g, e in failed.items()))
    return {"deleted": list(args.groups)}, "\n".join(f"Deleted group {g}." for g in args.groups)


def _ok(outcome: Any) -> bool:
    return getattr(outcome, "errno", None) == 0 or outcome in ("NoError", "OK")


def _reset(client: Any, args: argparse.Namespace) -> tuple[Any, str]:
    """Kafka's kafka-consumer-groups --reset-offsets: prints the plan; --execute commits it."""
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec

    topic, _, listed = args.topic.partition(":")
    try:
        wanted = [int(p) for p in listed.split(",")] if listed else None
    except ValueError:
        raise UsageError(f"--topic expects TOPIC or TOPIC:P,P..., got {args.topic!r}") from None
    [described] = client.describe_topics([topic])
    if described["error_code"]:
        raise CommandError(f"no such topic: {topic}")
    indexes = sorted(p["partition_index"] for p in described["partitions"])
    if wanted is not None:
        unknown = sorted(set(wanted) - set(indexes))
        if unknown:
            raise UsageError(f"{topic} has no partition {unknown} (it has {indexes})")
        indexes = sorted(set(wanted))
    partitions = [TopicPartition(topic, i) for i in indexes]
    earliest = client.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in partitions})
    latest = client.list_partition_offsets({tp: OffsetSpec.LATEST for tp in partitions})
    plan = {}
    for tp in partitions:
        low, high = earliest[tp].offset, latest[tp].offset
        plan[tp] = low if args.to_earliest else high if args.to_latest else min(max(args.to_offset, low), high)
    if args.execute:
        outcome = client.reset_group_offsets(args.group, dict(plan))
        failed = {
            tp: r["error"] for tp, r in outcome.items() if r.get("error") not in (None,) and r["error"].errno != 0
        }
        if failed:
            tp, error = next(iter(failed.items()))
            raise CommandError(
                f"cannot reset {args.group} on {tp.topic}-{tp.partition}: {error.__name__} "
                "(a group with members keeps its offsets: stop its consumers first)"
            )
    result = [
        {"group": args.group, "topic": tp.topic, "partition": tp.partition, "new_offset": o} for tp, o in plan.items()
    ]
    rows = [(args.group, tp.topic, str(tp.partition), str(o)) for tp, o in plan.items()]
    note = "" if args.execute else "\n(dry run: --execute commits these offsets)"
    return result, table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), rows) + note
