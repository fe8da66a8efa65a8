"""CI runs every test: `.ci/run` sets CI=true, and under it a missing etcd, moto or node fails
the tests that need it instead of skipping them (tests/gates.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import gates

REPO = Path(__file__).resolve().parents[2]


def test_ci_entry_point_exports_ci_true() -> None:
    script = (REPO / ".ci" / "run").read_text()
    shown = subprocess.run(
        ["bash", "-c", script.replace("make test", 'echo "CI=$CI"')],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO / ".ci",
        env={"PATH": "/usr/bin:/bin"},
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip().splitlines()[-1] == "CI=true"


@pytest.mark.parametrize("value", ["true", "1", "TRUE", "yes"])
def test_missing_piece_fails_under_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="required under CI=true: etcd"):
        gates.missing("etcd is not installed")


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_missing_piece_skips_outside_ci(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match="etcd is not installed"):
        gates.missing("etcd is not installed")


def test_a_broken_module_is_missing_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no_such_module_for_gates"):
        gates.require_module("no_such_module_for_gates.server", "needed")
    gates.require_module("json", "the standard library is there")  # present: no effect
