"""The alert rules the chart ships: promtool accepts them and their unit tests pass, every
alert is tested firing, names a runbook that exists, and reads only documented metrics."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.gates import require_promtool

from .shipped import (
    EXTERNAL,
    OPERATIONS_DOC,
    RULES,
    documented,
    github_anchors,
    metric_names,
    recorded_names,
    rules,
)

RULE_TESTS = Path(__file__).with_name("alerts_test.yaml")


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_promtool(), *args], capture_output=True, text=True, timeout=60)


def test_promtool_accepts_the_rules() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_rule_unit_tests_pass() -> None:
    result = _promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_test() -> None:
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    fired = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert alerts - fired == set(), "alerts no test sees firing"


def test_every_alert_names_an_existing_runbook() -> None:
    anchors = github_anchors(OPERATIONS_DOC.read_text())
    for rule in rules():
        if "alert" not in rule:
            continue
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        page, _, anchor = rule["annotations"]["runbook"].partition("#")
        assert page == "docs/operations.md", rule["alert"]
        assert anchor in anchors, f"{rule['alert']}: no heading for #{anchor} in docs/operations.md"


def test_rules_read_only_documented_metrics() -> None:
    for rule in rules():
        used = metric_names(rule["expr"]) - EXTERNAL - recorded_names()
        undocumented = [name for name in used if not documented(name)]
        assert not undocumented, f"{rule.get('alert') or rule.get('record')}: {undocumented}"


def test_metric_names_reads_families() -> None:
    expr = 'rate(shoal_wal_upload_seconds_bucket[5m]) / shoal_requests_total{api="Produce"} + up'
    assert metric_names(expr) == {"shoal_wal_upload_seconds", "shoal_requests_total"}
