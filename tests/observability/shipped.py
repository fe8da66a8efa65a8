"""What the chart ships for monitoring (alert rules, dashboard) and the metric names they use,
for the tests that hold those files to the broker's documented metrics and runbooks."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "shoal" / "files" / "alerts.yaml"
DASHBOARD = ROOT / "charts" / "shoal" / "files" / "dashboard.json"
METRICS_DOC = ROOT / "docs" / "metrics.md"
OPERATIONS_DOC = ROOT / "docs" / "operations.md"

# Series Prometheus or Kubernetes provide, not the broker.
EXTERNAL = {"up"}
_NAME = re.compile(r"\b((?:shoal|process|python)_[a-z0-9_]+)")
_HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"]]


def recorded_names() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and templating queries."""
    exprs = [t["expr"] for panel in dashboard()["panels"] for t in panel.get("targets", [])]
    for variable in dashboard().get("templating", {}).get("list", []):
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if variable.get("type") == "query" and isinstance(query, str):
            exprs.append(query)
    return exprs


def metric_names(expr: str) -> set[str]:
    """The broker metric families an expression reads (histogram parts map to the family)."""
    names = set()
    for name in _NAME.findall(expr):
        for part in _HISTOGRAM_PARTS:
            if name.endswith(part):
                name = name[: -len(part)]
                break
        names.add(name)
    return names


def documented(name: str) -> bool:
    """docs/metrics.md names counters with their `_total` suffix, like the exposition."""
    return f"`{name}`" in METRICS_DOC.read_text()


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings."""
    anchors = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", heading).replace(" ", "-"))
    return anchors
