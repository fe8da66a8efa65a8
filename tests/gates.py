"""What a test needs from the machine (etcd, moto's server, node with kafkajs): outside CI a
missing piece skips the test with the reason and the fix; under CI=true it fails the test,
because CI must run every test (`.ci/run` exports CI=true; `make test` installs everything)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

CI_VALUES = ("1", "true", "yes")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in CI_VALUES


def missing(reason: str) -> NoReturn:
    """Skip with `reason`, or fail with it under CI=true."""
    if in_ci():
        pytest.fail(f"required under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def require_module(name: str, reason: str) -> None:
    """Import `name` (e.g. "moto.server"); when that fails, `missing(reason: the error)`."""
    try:
        __import__(name)
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install raising anything
        missing(f"{reason}: {type(exc).__name__}: {exc}")


def require_spark() -> None:
    """pyspark (installed by `make test`) and a Java runtime (Debian's openjdk-17-jre-headless,
    installed by `.ci/install-java`) for the tiering jobs' tests."""
    import shutil

    require_module("pyspark", "pyspark is not installed (make test installs it)")
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        missing("no java on PATH and no JAVA_HOME: Spark needs Java 17 (.ci/install-java installs it)")


def require_promtool() -> str:
    """promtool (Debian's prometheus package, installed by `.ci/install-promtool`) for the
    alert-rule tests; returns its path."""
    import shutil

    path = shutil.which("promtool")
    if path is None:
        missing("promtool is not on PATH (.ci/install-promtool installs Debian's prometheus package)")
    return path
