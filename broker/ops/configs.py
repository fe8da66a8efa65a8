"""`shoal configs describe|alter`: kafka-configs' flags (`--entity-type topics|brokers
--entity-name N`, `--add-config k=v,...`, `--delete-config k,...`, `--all`), through
DescribeConfigs and IncrementalAlterConfigs, so other keys are left as they are."""

from __future__ import annotations

import argparse
from typing import Any

from .connection import CommandError, UsageError, admin_client, table

ENTITY_TYPES = ("topics", "brokers")


def add_parsers(commands: Any, add_connection_args: Any) -> None:
    configs = commands.add_parser("configs", help="describe and alter topic or broker configs").add_subparsers(
        dest="configs_command", required=True
    )
    describe = configs.add_parser("describe", help="the configs that are set (--all: every config and its source)")
    alter = configs.add_parser("alter", help="set or remove configs of one entity")
    for parser in (describe, alter):
        parser.add_argument("--entity-type", choices=ENTITY_TYPES, required=True)
        parser.add_argument("--entity-name", required=True, metavar="NAME", help="topic name or broker id")
        add_connection_args(parser)
    describe.add_argument("--all", action="store_true", help="every config, defaults included")
    alter.add_argument("--add-config", metavar="K=V[,K=V...]", help="configs to set")
    alter.add_argument("--delete-config", metavar="K[,K...]", help="configs to remove (back to the default)")


def command(args: argparse.Namespace) -> tuple[Any, str]:
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import KafkaError

    kind = ConfigResourceType.TOPIC if args.entity_type == "topics" else ConfigResourceType.BROKER
    if args.configs_command == "alter":
        changes = _changes(args)
    client = admin_client(args)
    try:
        if args.configs_command == "alter":
            outcome = client.alter_configs([ConfigResource(kind, args.entity_name, changes)], incremental=True)
            refused = [r for by_name in outcome.values() for r in by_name.values() if r != "OK"]
            if refused:  # the broker's answer, e.g. InvalidConfigurationError with Kafka's wording
                raise CommandError(f"the broker refused the change: {refused[0]}")
            what = ", ".join(f"{k}={v}" if isinstance(v, str) else f"-{k}" for k, v in changes.items())
            return {"entity": args.entity_name, "altered": sorted(changes)}, f"Altered {args.entity_name}: {what}."
        found = client.describe_configs(
            [ConfigResource(kind, args.entity_name)], config_filter="all" if args.all else "modified"
        )
    except (KafkaError, ValueError) as exc:  # ValueError: kafka-python's own check of the keys
        raise CommandError(
            f"{args.configs_command} of {args.entity_type[:-1]} {args.entity_name} failed: {exc}"
        ) from None
    finally:
        client.close()
    entries: dict[str, Any] = next(
        iter(found.get("topic" if kind == ConfigResourceType.TOPIC else "broker", {}).values()), {}
    )
    result = {
        key: {"value": e["value"], "source": str(e["config_source"]), "sensitive": e["is_sensitive"]}
        for key, e in sorted(entries.items())
    }
    rows = [(key, "(sensitive)" if e["sensitive"] else str(e["value"]), e["source"]) for key, e in result.items()]
    title = f"Configs of {args.entity_type[:-1]} {args.entity_name}" + (
        "" if args.all else " (set ones; --all: every config)"
    )
    return result, title + "\n" + table(("KEY", "VALUE", "SOURCE"), rows)


def _changes(args: argparse.Namespace) -> dict[str, Any]:
    from kafka.admin import AlterConfigOp

    changes: dict[str, Any] = {}
    for item in filter(None, (args.add_config or "").split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--add-config expects K=V[,K=V...], got {item!r}")
        changes[key.strip()] = value.strip()
    for key in filter(None, (k.strip() for k in (args.delete_config or "").split(","))):
        if key in changes:
            raise UsageError(f"{key} is both added and deleted")
        changes[key] = (AlterConfigOp.DELETE, None)
    if not changes:
        raise UsageError("nothing to alter: give --add-config K=V[,...] and/or --delete-config K[,...]")
    return changes
