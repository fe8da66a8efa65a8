"""`shoal groups list|describe|lag|delete`: kafka-consumer-groups' views (members and their
partitions; per partition the committed offset, the log end and the lag)."""

from __future__ import annotations

import argparse
from typing import Any

from .connection import CommandError, admin_client, table


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
    for parser in (listing, describe, lag, delete):
        add_connection_args(parser)


def command(args: argparse.Namespace) -> tuple[Any, str]:
    from kafka.errors import KafkaError

    client = admin_client(args)
    try:
        return {"list": _list, "describe": _describe, "lag": _lag, "delete": _delete}[args.groups_command](client, args)
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
