"""`shoal cluster describe`: the cluster id, the controller and every broker (Kafka's
DescribeCluster), with what only Shoal knows (AZ, stateless or not, version) from the Shoal
admin API's `cluster.brokers` when the cluster is Shoal. `shoal cluster health`: every broker
that hosts replicas registered, a controller, every partition led, fully replicated and at
or above min.insync.replicas, and every broker reaching the object store."""

from __future__ import annotations

import argparse
from typing import Any

from ..admin_client import AdminClient, AdminError, parse_bootstrap
from .connection import ERROR, OK, UNHEALTHY, USAGE, CommandError, UsageError, admin_client, table


STATE_ATTEMPTS = 5


def add_parsers(commands: Any, add_connection_args: Any) -> None:
    cluster = commands.add_parser("cluster", help="the cluster and its brokers").add_subparsers(
        dest="cluster_command", required=True
    )
    add_connection_args(cluster.add_parser("describe", help="cluster id, controller, brokers with AZ and version"))
    add_health_parser(cluster, add_connection_args)


def command(args: argparse.Namespace) -> tuple[Any, str]:
    if args.cluster_command == "health":
        return health(args)
    from kafka.errors import KafkaError

    client = admin_client(args)
    try:
        described = client.describe_cluster()
    except KafkaError as exc:
        raise CommandError(f"cannot describe the cluster: {exc}") from None
    finally:
        client.close()
    try:
        shoal = {b["node_id"]: b for b in AdminClient(parse_bootstrap(args.bootstrap_server)).call("cluster.brokers")}
    except (AdminError, ValueError, OSError):
        shoal = {}  # not a Shoal cluster, or an older one: Kafka's view only
    brokers = []
    for b in sorted(described["brokers"], key=lambda b: b["broker_id"]):
        extra = shoal.get(b["broker_id"], {})
        brokers.append(
            {
                "node_id": b["broker_id"],
                "host": b["host"],
                "port": b["port"],
                "az": extra.get("az", b["rack"]),
                "stateless": extra.get("stateless"),
                "version": extra.get("version"),
                "controller": b["broker_id"] == described["controller_id"],
            }
        )
    result = {"cluster_id": described["cluster_id"], "controller_id": described["controller_id"], "brokers": brokers}
    rows = [
        (
            str(b["node_id"]) + ("*" if b["controller"] else ""),
            f"{b['host']}:{b['port']}",
            b["az"] or "-",
            "-" if b["stateless"] is None else ("stateless" if b["stateless"] else "data"),
            b["version"] or "-",
        )
        for b in brokers
    ]
    text = f"Cluster {described['cluster_id']}, controller {described['controller_id']} (*)\n" + table(
        ("BROKER", "ADDRESS", "AZ", "STORAGE", "VERSION"), rows
    )
    return result, text


def add_health_parser(cluster: Any, add_connection_args: Any) -> None:
    health = cluster.add_parser(
        "health", help="brokers, controller, leaders, ISR and the object store: exit 0 healthy, 10 not"
    )
    add_connection_args(health)
    health.add_argument("--watch", action="store_true", help="check again every --interval seconds")
    health.add_argument("--interval", type=float, default=5.0, metavar="S", help="seconds between checks (5)")
    health.add_argument(
        "--exit-when-healthy", action="store_true", help="with --watch: stop at the first healthy check"
    )
    health.add_argument(
        "--max-checks", type=int, default=0, metavar="N", help="with --watch: stop after N checks (0: never)"
    )


# Partition problems listed in the text output; a broker down makes every partition it
# hosts under-replicated, and the line naming the broker is what an operator needs first.
TEXT_PARTITION_LINES = 10


def health(args: argparse.Namespace) -> tuple[Any, str]:
    """One check: a list of problems (empty: healthy)."""

    problems: list[str] = []  # cluster-wide problems first: they usually explain the rest
    partition_problems: list[str] = []
    described, topics, configs = _cluster_state(args)
    live = {b["broker_id"] for b in described["brokers"]}
    if described["controller_id"] < 0:
        problems.append("no controller (is the metadata store up? docs/operations.md 'etcd is down')")
    hosting: set[int] = set()
    counts = {"leaderless": 0, "under_replicated": 0, "under_min_isr": 0}
    for topic in topics:
        min_isr = int(configs.get(topic["name"], {}).get("min.insync.replicas", {}).get("value", "1"))
        for p in topic["partitions"]:
            hosting.update(p["replica_nodes"])
            where = f"{topic['name']}-{p['partition_index']}"
            if p["leader_id"] < 0:
                counts["leaderless"] += 1
                partition_problems.append(f"{where} has no leader")
            elif len(p["isr_nodes"]) < len(p["replica_nodes"]):
                counts["under_replicated"] += 1
                partition_problems.append(
                    f"{where} is under-replicated: ISR {p['isr_nodes']} of replicas {p['replica_nodes']}"
                )
            if p["leader_id"] >= 0 and len(p["isr_nodes"]) < min_isr:
                counts["under_min_isr"] += 1
                partition_problems.append(f"{where} is under min.insync.replicas={min_isr}: ISR {p['isr_nodes']}")
    for missing in sorted(hosting - live):
        problems.append(f"broker {missing} hosts replicas but is not registered (down?)")
    problems += _store_check(args, described)
    shown = problems + partition_problems[:TEXT_PARTITION_LINES]
    if len(partition_problems) > TEXT_PARTITION_LINES:
        hidden = len(partition_problems) - TEXT_PARTITION_LINES
        shown.append(f"... and {hidden} more partition problems (--format json lists them all)")
    problems += partition_problems
    result = {
        "healthy": not problems,
        "problems": problems,
        "brokers": sorted(live),
        "controller_id": described["controller_id"],
        **counts,
    }
    text = "healthy" if not problems else "UNHEALTHY\n" + "\n".join(f"  - {p}" for p in shown)
    return result, text


def _cluster_state(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """DescribeCluster, the topics and their configs. A request that went to a dead broker
    (the metadata still lists it until its session ends) is tried again: a health check
    must say "unhealthy", not fail, when a broker is down."""
    import time

    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import KafkaError

    for attempt in range(1, STATE_ATTEMPTS + 1):
        client = admin_client(args)
        try:
            described = client.describe_cluster()
            topics = client.describe_topics()
            names = [t["name"] for t in topics if not t["error_code"]]
            resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
            configs = client.describe_configs(resources, config_filter="all").get("topic", {}) if names else {}
            return described, topics, configs
        except KafkaError as exc:
            if attempt == STATE_ATTEMPTS:
                raise CommandError(f"cannot read the cluster's state: {exc}") from None
        finally:
            client.close()
        time.sleep(0.5)  # noqa: TID251 - a CLI process, not the broker's loop
    raise AssertionError("unreachable")


def _store_check(args: argparse.Namespace, described: dict[str, Any]) -> list[str]:
    """Problems from each broker's own answer to `objects.check` (the Shoal admin API); a
    broker that is not Shoal does not know the command and is not asked again."""
    client = AdminClient(parse_bootstrap(args.bootstrap_server), timeout_s=15.0)
    problems = []
    for b in described["brokers"]:
        where = f"broker {b['broker_id']} ({b['host']}:{b['port']})"
        try:
            answer = client.call_at((b["host"], b["port"]), "objects.check")
        except AdminError as exc:
            if "unknown command" not in str(exc):
                problems.append(f"{where} does not answer: {exc}")
            continue
        if not answer["reachable"]:
            problems.append(f"{where} cannot reach the object store: {answer['error']}")
    return problems


def watch_health(args: argparse.Namespace) -> int:
    """Exit 0 healthy, 10 unhealthy (the last check), 1 when the cluster does not answer,
    2 for bad flags. With --watch, check every --interval seconds (a line per check)."""
    import json
    import sys
    import time

    checks = 0
    while True:
        try:
            result, text = health(args)
        except UsageError as exc:
            print(f"shoal: {exc}", file=sys.stderr)
            return USAGE
        except CommandError as exc:
            if not args.watch:
                print(f"shoal: {exc}", file=sys.stderr)
                return ERROR
            result, text = {"healthy": False, "problems": [str(exc)]}, f"UNHEALTHY\n  - {exc}"
        checks += 1
        if args.format == "json":
            print(json.dumps(result, sort_keys=True), flush=True)
        else:
            stamp = time.strftime("%H:%M:%S") + " " if args.watch else ""
            print(stamp + text, flush=True)
        done = not args.watch or (args.exit_when_healthy and result["healthy"])
        if done or (args.max_checks and checks >= args.max_checks):
            return OK if result["healthy"] else UNHEALTHY
        time.sleep(args.interval)  # noqa: TID251 - a CLI process, not the broker's loop
