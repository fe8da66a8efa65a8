"""The Grafana dashboard the chart ships: valid JSON Grafana can lay out, every query valid
PromQL (promtool parses them as recording rules) over documented metrics only."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.gates import require_promtool

from .shipped import EXTERNAL, dashboard, dashboard_exprs, documented, metric_names, recorded_names

# Grafana's variables, replaced by what they stand for so promtool can parse the queries.
_VARIABLES = {"$__rate_interval": "5m", "$instance": ".*"}
_LABEL_VALUES = re.compile(r"^label_values\((\w+), *\w+\)$")


def _promql(expr: str) -> str:
    for variable, value in _VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"unknown dashboard variable in {expr}"
    return expr


def test_panels_are_laid_out_and_use_the_datasource_variable() -> None:
    panels = dashboard()["panels"]
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in panels:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and panel["description"], panel["title"]
    variables = {v["name"] for v in dashboard()["templating"]["list"]}
    assert variables == {"datasource", "instance"}


def test_queries_read_only_documented_metrics() -> None:
    for expr in dashboard_exprs():
        label_values = _LABEL_VALUES.match(expr)
        used = {label_values.group(1)} if label_values else metric_names(expr)
        undocumented = [n for n in used - EXTERNAL - recorded_names() if not documented(n)]
        assert not undocumented, f"{expr}: {undocumented}"


def test_queries_are_valid_promql(tmp_path: Path) -> None:
    queries = [_promql(e) for e in dashboard_exprs() if not _LABEL_VALUES.match(e)]
    rules = {
        "groups": [{"name": "dashboard", "rules": [{"record": f"q{i}", "expr": q} for i, q in enumerate(queries)]}]
    }
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        [require_promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
