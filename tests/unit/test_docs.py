"""A metric that is not documented does not exist: every registered metric is in docs/metrics.md."""

from pathlib import Path

from broker.metrics import BrokerMetrics

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_metric_is_documented() -> None:
    text = (DOCS / "metrics.md").read_text()
    names = {metric.name for metric in BrokerMetrics().registry.collect()}
    missing = [n for n in names if f"`{n}" not in text]
    assert not missing, f"undocumented metrics: {missing}"
