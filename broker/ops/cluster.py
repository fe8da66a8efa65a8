"""`shoal cluster describe`: the cluster id, the controller and every broker (Kafka's
DescribeCluster), with what only Shoal knows (AZ, stateless or not, version) from the Shoal
admin API's `cluster.brokers` when the cluster is Shoal."""

from __future__ import annotations

import argparse
from typing import Any

from ..admin_client import AdminClient, AdminError, parse_bootstrap
from .connection import CommandError, admin_client, table


def add_parsers(commands: Any, add_connection_args: Any) -> None:
    cluster = commands.add_parser("cluster", help="the cluster and its brokers").add_subparsers(
        dest="cluster_command", required=True
    )
    add_connection_args(cluster.add_parser("describe", help="cluster id, controller, brokers with AZ and version"))


def command(args: argparse.Namespace) -> tuple[Any, str]:
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
