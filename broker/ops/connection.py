"""What every admin command shares: `--bootstrap-server`, `--command-config`, `--format`,
the exit codes, and a kafka-python admin client built from them.

Exit codes (docs/operations.md "The shoal CLI"): 0 ok, 1 error (the cluster refused or did
not answer), 2 usage (bad flags, a bad --command-config), 10 unhealthy (`walfiles status`
paused).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

OK, ERROR, USAGE, UNHEALTHY = 0, 1, 2, 10
BOOTSTRAP_TIMEOUT_MS = 10_000
# Client properties a --command-config file may set (Kafka's names) and kafka-python's.
CLIENT_PROPERTIES = {
    "client.id": "client_id",
    "request.timeout.ms": "request_timeout_ms",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "ssl.cafile": "ssl_cafile",
    "connections.max.idle.ms": "connections_max_idle_ms",
}


class UsageError(Exception):
    """Bad flags or a bad --command-config file: exit 2 with the message."""


class CommandError(Exception):
    """The command failed at the cluster: exit 1 with the message."""


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,HOST:PORT...]", help="any broker")
    parser.add_argument(
        "--command-config", metavar="FILE", help="client properties (Kafka's names), one key=value per line"
    )
    parser.add_argument("--format", choices=["text", "json"], default="text")


def read_command_config(path: str | None) -> dict[str, Any]:
    """kafka-python keyword arguments from a Kafka client properties file."""
    if path is None:
        return {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise UsageError(f"--command-config {path}: {exc.strerror or exc}") from None
    kwargs: dict[str, Any] = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise UsageError(f"--command-config {path}:{number}: expected key=value, got {line!r}")
        if key not in CLIENT_PROPERTIES:
            raise UsageError(
                f"--command-config {path}:{number}: {key!r} is not a client property this CLI uses "
                f"(known: {', '.join(sorted(CLIENT_PROPERTIES))})"
            )
        kwargs[CLIENT_PROPERTIES[key]] = int(value) if value.isdigit() else value
    return kwargs


def bootstrap_list(value: str) -> list[str]:
    servers = [item.strip() for item in value.split(",") if item.strip()]
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"--bootstrap-server expects HOST:PORT[,HOST:PORT...], got {value!r}")
    if not servers:
        raise UsageError("--bootstrap-server expects HOST:PORT[,HOST:PORT...]")
    return servers


def admin_client(args: argparse.Namespace) -> Any:
    """kafka-python's KafkaAdminClient for the command's flags; CommandError when no
    bootstrap broker answers."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    servers = bootstrap_list(args.bootstrap_server)
    kwargs = {"client_id": "shoal-cli", **read_command_config(args.command_config)}
    try:
        return KafkaAdminClient(bootstrap_servers=servers, bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS, **kwargs)
    except KafkaError as exc:
        raise CommandError(
            f"cannot reach the cluster at {args.bootstrap_server}: {type(exc).__name__} "
            "(is a broker listening there? check the address and port)"
        ) from None


def run(args: argparse.Namespace, command: Callable[[argparse.Namespace], tuple[Any, str]]) -> int:
    """Run `command` (returning its JSON-able result and its text) and print one of them;
    map the errors to exit codes."""
    try:
        result, text = command(args)
    except UsageError as exc:
        print(f"shoal: {exc}", file=sys.stderr)
        return USAGE
    except CommandError as exc:
        print(f"shoal: {exc}", file=sys.stderr)
        return ERROR
    print(json.dumps(result, indent=2, sort_keys=True) if args.format == "json" else text)
    return OK


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows])
