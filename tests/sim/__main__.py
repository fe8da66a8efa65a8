"""Entry point of `python -m tests.sim` (see cli.py). Re-executes the interpreter with
PYTHONHASHSEED=0 unless the hash seed is already fixed, so str hashing, and with it the
iteration order of sets of str, is the same in every process that replays a seed."""

from __future__ import annotations

import os
import sys

from .determinism import fixed_hash_seed


def _ensure_fixed_hash_seed() -> None:
    if fixed_hash_seed() is None:
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


if __name__ == "__main__":
    _ensure_fixed_hash_seed()
    from .cli import main

    sys.exit(main())
