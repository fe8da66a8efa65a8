"""Every registered scenario over its `test_seeds`, as `make test` runs the tier: through the
CLI in child processes with PYTHONHASHSEED=0 (so a failure's replay command reproduces it
exactly), each scenario's seeds split into chunks that xdist's workers run side by side. A
failure shows the CLI's reports: the broken invariant, the trace's tail and
`make sim SCENARIO=... SEEDS=...`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sim.registry import all_scenarios

ROOT = Path(__file__).resolve().parents[2]


def sim_cli(*args: str, hash_seed: str | None = "0") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTHONHASHSEED", None)
    if hash_seed is not None:
        env["PYTHONHASHSEED"] = hash_seed
    return subprocess.run(
        [sys.executable, "-m", "tests.sim", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )


CHUNKS_PER_SCENARIO = 4  # each scenario's test seeds in this many tests, so xdist spreads them


def seed_chunks() -> list[tuple[str, int, int]]:
    """(scenario, first seed, end seed) covering every scenario's `test_seeds` exactly once."""
    chunks = []
    for scenario in all_scenarios():
        size = -(-scenario.test_seeds // CHUNKS_PER_SCENARIO)
        for low in range(0, scenario.test_seeds, size):
            chunks.append((scenario.name, low, min(low + size, scenario.test_seeds)))
    return chunks


@pytest.mark.spread
@pytest.mark.parametrize(("scenario", "low", "high"), seed_chunks(), ids=lambda v: str(v))
def test_every_scenario_passes_its_test_seeds(scenario: str, low: int, high: int) -> None:
    """One child process per chunk with one job: under `make test` the chunks run in xdist's
    workers side by side (SHOAL_SIM_JOBS gives a chunk more worker processes)."""
    jobs = os.environ.get("SHOAL_SIM_JOBS", "1")
    result = sim_cli("--scenario", scenario, "--seeds", f"{low}..{high}", "--jobs", jobs)
    assert result.returncode == 0, f"simulation failures:\n{result.stdout}\n{result.stderr}"
    assert " 0 failed" in result.stdout, result.stdout


def test_a_seed_tells_the_same_story_in_every_process() -> None:
    """Digests of whole traces: one process with 2 workers vs one started without a hash seed
    (the CLI re-executes itself with PYTHONHASHSEED=0)."""
    forked = sim_cli("--scenario", "diskless_write", "--seeds", "0..6", "--jobs", "2", "--digest")
    fresh = sim_cli("--scenario", "diskless_write", "--seeds", "0..6", "--digest", hash_seed=None)
    digests = [line for line in forked.stdout.splitlines() if " trace " in line]
    assert len(digests) == 6 and forked.returncode == 0, forked.stdout + forked.stderr
    assert digests == [line for line in fresh.stdout.splitlines() if " trace " in line]


# Fresh seeds that found defects after their scenario's make-test seeds passed: each one is
# replayed here, so the defect cannot come back unnoticed (docs/testing.md, "Regression seeds").
REGRESSION_SEEDS = [
    ("cluster", 301749),  # a restarted broker took roles from a view that lagged the store
    ("cluster", 301147),  # the same, on a diskless partition
    ("tiered_delete_records", 410194),  # a broker without a lease rejoined the ISR
    ("transactions", 740000),  # a view counted a transaction's revision applied after its first change
    ("tiering", 850031),  # the scenario's final cycles ended 10 s after a preferred-leader move
]


@pytest.mark.spread
@pytest.mark.parametrize(("scenario", "seed"), REGRESSION_SEEDS)
def test_regression_seeds_pass(scenario: str, seed: int) -> None:
    result = sim_cli("--scenario", scenario, "--seeds", f"{seed}..{seed + 1}", "--jobs", "1")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]


def test_sim_long_runs_fresh_seeds_until_the_hours_are_covered() -> None:
    """`make sim-long` at a size CI affords: half a simulated hour of one cheap scenario."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    result = subprocess.run(
        [sys.executable, "-m", "tests.sim.long", "--hours", "0.5", "--jobs", "1", "--scenarios", "diskless_write"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = next(line for line in result.stdout.splitlines() if line.strip().startswith("diskless_write"))
    hours, seeds, failed = report.split()[1], report.split()[3], report.split()[-2]
    assert float(hours) >= 0.5 and int(seeds) > 0 and failed == "0", report
