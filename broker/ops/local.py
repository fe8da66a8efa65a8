"""`shoal config validate FILE` and `shoal version`: answered without a cluster."""

from __future__ import annotations

import argparse
import platform
from typing import Any

from .. import __version__
from ..config import BrokerConfig, ConfigError, load_config
from .connection import CommandError


def add_parsers(commands: Any) -> None:
    config = commands.add_parser("config", help="broker config files").add_subparsers(
        dest="config_command", required=True
    )
    validate = config.add_parser("validate", help="check a broker TOML config file as `shoal broker --config` would")
    validate.add_argument("file", metavar="FILE")
    validate.add_argument("--format", choices=["text", "json"], default="text")
    version = commands.add_parser("version", help="the shoal version")
    version.add_argument("--format", choices=["text", "json"], default="text")


def validate(args: argparse.Namespace) -> tuple[Any, str]:
    try:
        config = load_config(args.file, {}, environ={})
    except ConfigError as exc:
        raise CommandError(f"{args.file}: {exc}") from None
    defaults = BrokerConfig()
    changed = {
        name.replace("_", "."): getattr(config, name)
        for name in BrokerConfig.__struct_fields__
        if getattr(config, name) != getattr(defaults, name)
    }
    lines = [f"{args.file}: valid; {len(changed)} setting(s) differ from the defaults"]
    lines += [f"  {key} = {value}" for key, value in sorted(changed.items())]
    return {"file": args.file, "valid": True, "settings": changed}, "\n".join(lines)


def version(args: argparse.Namespace) -> tuple[Any, str]:
    return {"version": __version__, "python": platform.python_version()}, f"shoal {__version__}"
