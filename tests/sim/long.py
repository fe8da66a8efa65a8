"""`make sim-long`: fresh seeds of every scenario until --hours simulated hours are covered
(issue 28 item 7: at least 1,000 in total, runnable overnight).

    python -m tests.sim.long --hours 1000 --jobs 2 [--scenarios a,b] [--first-seed N] [--budget-hours H]

Every scenario brings its own background faults (crashes, partitions, store outages, lost
answers, failing disks). Workers get chunks of fresh seeds, each sized to take about
CHUNK_TARGET_S, always for the scenario that has had the least real time so far, so a
cheap scenario does not crowd out an expensive one. Seeds are `first_seed + 1,000,000 * i +
n` for the scenario's index i, so a failure replays with `make sim`. A progress line every
few minutes gives the hours covered; the report at the end gives them per scenario, with
every failure's replay command. Exit status 1 if any seed failed, 2 if the real-time budget
ran out before the hours were covered.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from dataclasses import dataclass

from .cli import Outcome, run_chunk
from .registry import Scenario, all_scenarios, get

CHUNK_TARGET_S = 60.0  # real seconds a chunk of seeds should take
PROGRESS_S = 300.0
SEEDS_PER_SCENARIO = 1_000_000


@dataclass
class Tally:
    scenario: Scenario
    next_seed: int
    seeds: int = 0
    virtual_s: float = 0.0
    real_s: float = 0.0  # worker seconds spent on it
    in_flight: int = 0
    seconds_per_seed: float = 0.0  # measured; 0 until a chunk came back

    def chunk(self) -> list[int]:
        size = 1 if not self.seconds_per_seed else max(1, int(CHUNK_TARGET_S / self.seconds_per_seed))
        seeds = list(range(self.next_seed, self.next_seed + size))
        self.next_seed += size
        return seeds


def run(tallies: list[Tally], hours: float, jobs: int, budget_s: float) -> tuple[list[tuple[str, int, str]], bool]:
    """Run chunks until `hours` are covered or `budget_s` has passed; (failures, covered)."""
    failures: list[tuple[str, int, str]] = []
    started = last_progress = time.monotonic()
    pending: list[tuple[Tally, multiprocessing.pool.AsyncResult[Outcome]]] = []

    def covered() -> float:
        return sum(t.virtual_s for t in tallies) / 3600

    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        while True:
            done = covered() >= hours or time.monotonic() - started >= budget_s
            while not done and len(pending) < jobs:
                tally = min(tallies, key=lambda t: (t.real_s + t.in_flight * CHUNK_TARGET_S, t.scenario.name))
                tally.in_flight += 1
                task = (tally.scenario.name, tally.chunk(), 60, False, False)
                pending.append((tally, pool.apply_async(run_chunk, (task,))))
            if not pending:
                break
            time.sleep(0.5)
            for item in [p for p in pending if p[1].ready()]:
                pending.remove(item)
                tally, result = item
                outcome = result.get()
                tally.in_flight -= 1
                tally.seeds += outcome.seeds
                tally.virtual_s += outcome.virtual_s
                tally.real_s += outcome.seconds
                tally.seconds_per_seed = tally.real_s / tally.seeds
                for seed, headline, _report in outcome.failures:
                    failures.append((outcome.scenario, seed, headline))
                    print(f"FAILED {headline}\n  replay: make sim SCENARIO={outcome.scenario} SEEDS={seed}", flush=True)
            if time.monotonic() - last_progress >= PROGRESS_S:
                last_progress = time.monotonic()
                print(
                    f"[{(last_progress - started) / 3600:.2f} h] {covered():.1f} of {hours:.0f} simulated hours, "
                    f"{sum(t.seeds for t in tallies)} seeds, {len(failures)} failed",
                    flush=True,
                )
    return failures, covered() >= hours


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.long", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=1000.0, help="simulated hours to cover in total")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--scenarios", default="all", help="a comma list, or 'all' (default)")
    parser.add_argument("--first-seed", type=int, default=10_000_000)
    parser.add_argument("--budget-hours", type=float, default=12.0, help="stop after this much real time")
    args = parser.parse_args(argv)
    try:
        chosen = all_scenarios() if args.scenarios == "all" else [get(n) for n in args.scenarios.split(",") if n]
    except KeyError as exc:
        parser.error(str(exc.args[0]))
    tallies = [Tally(s, args.first_seed + SEEDS_PER_SCENARIO * i) for i, s in enumerate(chosen)]
    started = time.monotonic()
    failures, covered = run(tallies, args.hours, max(1, args.jobs), args.budget_hours * 3600)
    print(
        f"sim-long: {sum(t.virtual_s for t in tallies) / 3600:.1f} simulated hours in "
        f"{(time.monotonic() - started) / 3600:.2f} h with {args.jobs} jobs"
    )
    for t in sorted(tallies, key=lambda t: t.scenario.name):
        first = args.first_seed + SEEDS_PER_SCENARIO * chosen.index(t.scenario)
        failed = sum(1 for name, _seed, _h in failures if name == t.scenario.name)
        print(
            f"  {t.scenario.name:<24} {t.virtual_s / 3600:8.1f} h  {t.seeds:7} seeds ({first}..{t.next_seed})  "
            f"{failed} failed"
        )
    if failures:
        return 1
    return 0 if covered else 2


if __name__ == "__main__":
    from .__main__ import _ensure_fixed_hash_seed

    _ensure_fixed_hash_seed()
    sys.exit(main())
