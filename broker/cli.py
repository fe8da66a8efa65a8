"""`shoal` command line. `shoal broker` runs a broker; flags override SHOAL_* env vars,
which override the TOML file given with --config. `shoal dev cluster` runs a loopback
cluster for development (broker/devcluster)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from .logformat import JsonFormatter
from .config import ConfigError, StartRefused, load_config
from .ops import cluster as cluster_cli
from .ops import configs, groups, local, topics, transactions
from .ops.connection import USAGE, UsageError, add_connection_args, read_command_config
from .ops.connection import run as run_command

_FLAG_KEYS = {
    "node_id": "node.id",
    "az": "az",
    "listen": "listen",
    "advertise": "advertise",
    "data_dir": "data.dir",
    "object_store": "object.store",
    "metadata": "metadata",
    "metrics_listen": "metrics.listen",
    "rpc_listen": "rpc.listen",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shoal", description="Shoal: a Kafka-protocol broker with diskless topics")
    commands = parser.add_subparsers(dest="command", required=True)
    broker = commands.add_parser("broker", help="run a broker (no arguments: embedded single broker on 127.0.0.1:9092)")
    broker.add_argument("--config", metavar="FILE", help="TOML config file (keys: docs/configuration.md)")
    broker.add_argument("--node-id", type=int, help="broker id (default 0)")
    broker.add_argument("--az", help="availability zone (rack) of this broker")
    broker.add_argument("--listen", metavar="HOST:PORT", help="Kafka listener (default 127.0.0.1:9092)")
    broker.add_argument("--advertise", metavar="HOST:PORT", help="address given to clients (default: --listen)")
    storage = broker.add_mutually_exclusive_group()
    storage.add_argument("--data-dir", metavar="DIR", help="partition logs and local metadata (default ./data)")
    storage.add_argument("--stateless", action="store_true", default=None, help="no data dir, never hosts replicas")
    broker.add_argument("--object-store", metavar="URL", help="file:///dir or s3://bucket/prefix?endpoint=...")
    broker.add_argument("--metadata", metavar="URL", help="local: (default) or etcd://host:port/prefix")
    broker.add_argument("--rpc-listen", metavar="HOST:PORT", help="inter-broker RPC (required with etcd metadata)")
    broker.add_argument("--metrics-listen", metavar="HOST:PORT", help="Prometheus /metrics, /healthz, /readyz")
    broker.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="any config key from docs/configuration.md (repeatable)",
    )
    broker.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    broker.add_argument("--log-format", default="text", choices=["text", "json"], help="json: one JSON object per line")
    dev = commands.add_parser("dev", help="development tools").add_subparsers(dest="dev_command", required=True)
    cluster = dev.add_parser("cluster", help="etcd, an S3 endpoint (moto) and N brokers on loopback; Ctrl-C stops all")
    cluster.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    cluster.add_argument("--azs", type=int, help="AZs az1..azM, brokers go round-robin (default: min(3, brokers))")
    cluster.add_argument(
        "--stateless-per-az",
        type=int,
        default=0,
        metavar="N",
        help="also start N stateless brokers (--stateless) in each AZ (default 0)",
    )
    cluster.add_argument(
        "--dir",
        metavar="DIR",
        help="empty work dir for data and logs, kept at exit (default: a temporary dir, removed at exit)",
    )
    cluster.add_argument(
        "--base-port",
        type=int,
        metavar="PORT",
        help="Kafka on PORT+node, RPC on PORT+100+node, metrics on PORT+200+node (default: free)",
    )
    cluster.add_argument(
        "--set",
        metavar="KEY=VALUE",
        type=_setting,
        action="append",
        default=[],
        help="config key for every broker (repeatable)",
    )
    walfiles = commands.add_parser(
        "walfiles", help="the WAL file manager: what it keeps, what it deletes"
    ).add_subparsers(dest="walfiles_command", required=True)
    for name, what in (
        ("status", "objects, bytes, referenced and dead bytes, last cycle, paused or not and why"),
        ("gc", "run a cycle now and print its decisions"),
    ):
        sub = walfiles.add_parser(name, help=what)
        add_connection_args(sub)
        if name == "gc":
            sub.add_argument("--dry-run", action="store_true", help="delete nothing; print what would go and why")
    tiering = commands.add_parser("tiering", help="tiered storage: backlog, tiered segments, jobs").add_subparsers(
        dest="tiering_command", required=True
    )
    for name, what in (
        ("status", "per led partition: tiered segments and bytes, backlog, last run and failures"),
        ("run", "run a tiering cycle now on every broker (plan, Spark job, commit)"),
    ):
        sub = tiering.add_parser(name, help=what)
        add_connection_args(sub)
        sub.add_argument("--topic", help="only this topic")
        if name == "run":
            sub.add_argument("--partition", type=int, help="only this partition (with --topic)")
            sub.add_argument("--wait", action="store_true", help="wait for each broker's cycle and print its outcome")
    topics.add_parsers(commands, add_connection_args)
    configs.add_parsers(commands, add_connection_args)
    groups.add_parsers(commands, add_connection_args)
    transactions.add_parsers(commands, add_connection_args)
    cluster_cli.add_parsers(commands, add_connection_args)
    local.add_parsers(commands)
    return parser


def _tiering(args: argparse.Namespace) -> int:
    """Exit status: 0 ok, 1 error (a broker did not answer, or --wait saw a failed range), 2 usage."""
    import json

    from .admin_client import AdminClient, AdminError, parse_bootstrap
    from .tiering.render import run_text, status_text

    try:
        client = AdminClient(parse_bootstrap(args.bootstrap_server), timeout_s=3600.0)
    except ValueError as exc:
        print(f"shoal: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "partition", None) is not None and args.topic is None:
        print("shoal: --partition needs --topic", file=sys.stderr)
        return 2
    filters = {
        k: v for k, v in (("topic", args.topic), ("partition", getattr(args, "partition", None))) if v is not None
    }
    try:
        first = client.call("tiering.status", filters)
    except AdminError as exc:
        print(f"shoal: {exc}", file=sys.stderr)
        return 1
    answers: list = []
    errors: list[str] = []
    addresses = [(b["host"], b["port"]) for b in first["brokers"]]
    if args.tiering_command == "status":
        for address in addresses:
            try:
                answers.append(client.call_at(address, "tiering.status", filters))
            except AdminError as exc:
                errors.append(str(exc))
    elif not args.wait:
        for address in addresses:  # each broker starts its cycle and answers at once
            try:
                client.call_at(address, "tiering.run", {**filters, "wait": False})
            except AdminError as exc:
                errors.append(str(exc))
        print(
            f"started a tiering cycle on {len(addresses) - len(errors)} broker(s); `shoal tiering status` shows the outcome"
        )
        for error in errors:
            print(f"shoal: {error}", file=sys.stderr)
        return 1 if errors else 0
    else:
        for address in addresses:
            print(f"broker {address[0]}:{address[1]}: running...", file=sys.stderr, flush=True)
            try:
                answers.append(client.call_at(address, "tiering.run", filters))
            except AdminError as exc:
                errors.append(str(exc))
    if args.format == "json":
        print(json.dumps({"brokers": answers, "errors": errors}, indent=2, sort_keys=True))
    else:
        print(status_text(answers) if args.tiering_command == "status" else run_text(answers))
    for error in errors:
        print(f"shoal: {error}", file=sys.stderr)
    failed = any(a["run"]["failed"] or a["run"]["job_error"] for a in answers if "run" in a)
    return 1 if errors or failed else 0


def _walfiles(args: argparse.Namespace) -> int:
    """Exit status: 0 ok, 1 error, 2 usage, 10 the manager is paused."""
    import json

    from .admin_client import AdminClient, AdminError, parse_bootstrap
    from .walfiles.render import report_text, status_text

    try:
        client = AdminClient(parse_bootstrap(args.bootstrap_server))
    except ValueError as exc:
        print(f"shoal: {exc}", file=sys.stderr)
        return 2
    try:
        if args.walfiles_command == "status":
            answer = client.call("walfiles.status")
            status = answer
        else:
            answer = client.call("walfiles.gc", {"dry_run": args.dry_run})
            status = answer["status"]
    except AdminError as exc:
        print(f"shoal: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps(answer, indent=2, sort_keys=True))
    else:
        print(status_text(answer) if args.walfiles_command == "status" else report_text(answer))
    return 10 if status["paused"] else 0


def _setting(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expects KEY=VALUE, got {item!r}")
    return key.strip(), value


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "command_config", None) is not None:
        try:
            read_command_config(args.command_config)
        except UsageError as exc:
            print(f"shoal: {exc}", file=sys.stderr)
            return USAGE
    if args.command == "walfiles":
        return _walfiles(args)
    if args.command == "tiering":
        return _tiering(args)
    if args.command == "topics":
        return run_command(args, topics.command)
    if args.command == "configs":
        return run_command(args, configs.command)
    if args.command == "groups":
        return run_command(args, groups.command)
    if args.command == "transactions":
        return run_command(args, transactions.command)
    if args.command == "cluster" and args.cluster_command == "health":
        return cluster_cli.watch_health(args)
    if args.command == "cluster":
        return run_command(args, cluster_cli.command)
    if args.command == "config":
        return run_command(args, local.validate)
    if args.command == "version":
        return run_command(args, local.version)
    if args.command == "dev":
        from .devcluster.cluster import main as dev_cluster  # late: the broker needs none of it

        return dev_cluster(args.brokers, args.azs, args.dir, args.base_port, dict(args.set), args.stateless_per_az)
    handler = logging.StreamHandler(sys.stderr)
    if args.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=args.log_level, handlers=[handler])
    overrides: dict[str, object] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"shoal: --set expects KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        overrides[key.strip()] = value
    for attribute, key in _FLAG_KEYS.items():
        value = getattr(args, attribute)
        if value is not None:
            overrides[key] = value
    if args.stateless:
        overrides["stateless"] = True
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"shoal: {exc}", file=sys.stderr)
        return 2
    from .broker import run

    runner: Callable[[Coroutine[Any, Any, None]], None]
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        runner(run(config))
    except (ConfigError, StartRefused) as exc:
        print(f"shoal: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"shoal: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
