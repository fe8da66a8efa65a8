"""`python -m tests.sim`: run seeds of scenarios, print failures with their replay commands.

    python -m tests.sim --scenario all --seeds 0..20000 --jobs 2    # what `make sim` runs
    python -m tests.sim --scenario diskless_write --seeds 1234 --verbose   # replay one seed
    python -m tests.sim --list

Seeds: `N`, `A..B` (A up to B-1, as Rust ranges), `A..=B` (B included), or a comma list of
those. Without --seeds each scenario runs its `test_seeds` (what `make test` runs).
--jobs J runs seeds in J forked worker processes. Exit status 1 if any seed failed. A seed
that fails the way a scenario's `known_issues` describe (an open bug, reduced to a test in
test_findings.py) is reported as a known issue, not a failure, unless --strict.

The hash seed is fixed (PYTHONHASHSEED=0; `__main__` re-executes the interpreter when it
is not), so a failure found here replays anywhere.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from .registry import Scenario, all_scenarios, get
from .runner import SimFailure, remove_tmp_root
from .trace import Trace

CHUNK_SEEDS = 25  # seeds per task handed to a worker: small enough to balance 2 workers


@dataclass
class Outcome:
    """What running some seeds of one scenario gave: plain data, so it crosses processes."""

    scenario: str
    seeds: int = 0
    seconds: float = 0.0
    virtual_s: float = 0.0
    failures: list[tuple[int, str, str]] = field(default_factory=list)  # (seed, headline, report)
    digests: list[tuple[int, str]] = field(default_factory=list)  # (seed, trace digest) with --digest
    known: list[tuple[int, str]] = field(default_factory=list)  # (seed, known issue) that failed that way


def parse_seeds(spec: str) -> list[int]:
    """`N`, `A..B` (exclusive), `A..=B` (inclusive), comma-separated; ValueError otherwise."""
    seeds: list[int] = []
    for part in spec.replace(" ", "").split(","):
        if not part:
            continue
        if "..=" in part:
            low, high = part.split("..=")
            seeds.extend(range(int(low), int(high) + 1))
        elif ".." in part:
            low, high = part.split("..")
            seeds.extend(range(int(low), int(high)))
        else:
            seeds.append(int(part))
    if not seeds:
        raise ValueError(f"no seeds in {spec!r}: use N, A..B, A..=B or a comma list")
    return seeds


def trace_digest(trace: Trace) -> str:
    """A short hash of a run's whole trace: equal digests, same story (replays compare them)."""
    digest = hashlib.sha256()
    for line in trace.lines():
        digest.update(line.encode("utf-8", "backslashreplace") + b"\n")
    return digest.hexdigest()[:16]


def run_seeds(
    scenario: Scenario,
    seeds: Sequence[int],
    trace_lines: int | None = 60,
    verbose: bool = False,
    digest: bool = False,
    strict: bool = False,
) -> Outcome:
    """Run `seeds` of `scenario` in this process. A failure matching one of the scenario's
    known issues is listed as known, not failed, unless `strict`."""
    outcome = Outcome(scenario.name)
    started = time.perf_counter()
    for seed in seeds:
        try:
            result = scenario.run(seed)
        except SimFailure as failure:
            known = None if strict else scenario.known_issue(failure.reason)
            if known is not None:
                outcome.known.append((seed, known))
            else:
                outcome.failures.append((seed, failure.headline(), failure.report(trace_lines)))
            outcome.virtual_s += failure.virtual_s
            if digest:
                outcome.digests.append((seed, trace_digest(failure.trace)))
        else:
            if digest:
                outcome.digests.append((seed, trace_digest(result.trace)))
            outcome.virtual_s += result.virtual_s
            if verbose:
                print(result.trace.format(None))
                print(
                    f"scenario {scenario.name!r} seed {seed}: ok at virtual {result.virtual_s:.6f} s after "
                    f"{result.steps} loop steps: {result.value!r}"
                )
        outcome.seeds += 1
    outcome.seconds = time.perf_counter() - started
    return outcome


def run_chunk(task: tuple[str, list[int], int | None, bool, bool]) -> Outcome:
    name, seeds, trace_lines, digest, strict = task
    try:
        return run_seeds(get(name), seeds, trace_lines, digest=digest, strict=strict)
    finally:
        remove_tmp_root()  # pool workers end with os._exit: atexit would not clean up


def _chunks(seeds: Sequence[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(seeds), size):
        yield list(seeds[start : start + size])


def sweep(
    scenarios: Sequence[Scenario],
    seeds: Sequence[int] | None,
    jobs: int = 1,
    trace_lines: int | None = 60,
    verbose: bool = False,
    digest: bool = False,
    strict: bool = False,
) -> list[Outcome]:
    """Run every scenario over `seeds` (None: each one's test_seeds), in `jobs` processes."""
    plan = [(s, list(seeds) if seeds is not None else list(range(s.test_seeds))) for s in scenarios]
    if jobs <= 1:
        return [run_seeds(s, chosen, trace_lines, verbose, digest, strict) for s, chosen in plan]
    outcomes = {s.name: Outcome(s.name) for s, _ in plan}
    tasks = [
        (s.name, chunk, trace_lines, digest, strict) for s, chosen in plan for chunk in _chunks(chosen, CHUNK_SEEDS)
    ]
    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        for part in pool.imap_unordered(run_chunk, tasks):
            total = outcomes[part.scenario]
            total.seeds += part.seeds
            total.virtual_s += part.virtual_s
            total.failures.extend(part.failures)
            total.digests.extend(part.digests)
            total.known.extend(part.known)
    elapsed = time.perf_counter() - started
    for total in outcomes.values():
        total.failures.sort()
        total.digests.sort()
        total.known.sort()
        total.seconds = elapsed  # wall time of the whole sweep (scenarios share the workers)
    return list(outcomes.values())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="all", help="a scenario name, a comma list, or 'all' (default)")
    parser.add_argument(
        "--seeds", default=None, help="N, A..B, A..=B or a comma list (default: each scenario's test_seeds)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--verbose", action="store_true", help="print every run's whole trace")
    parser.add_argument("--trace-lines", type=int, default=60, help="trace lines per failure report")
    parser.add_argument("--max-reports", type=int, default=3, help="full reports printed; the rest: one line")
    parser.add_argument(
        "--digest",
        action="store_true",
        help="print a hash of each seed's trace (to compare replays across processes and machines)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="count seeds that hit a scenario's known issue as failures"
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    args = parser.parse_args(argv)

    if args.list:
        for known in all_scenarios():
            print(f"{known.name:<24} {known.test_seeds:>6} test seeds  {known.description}")
        return 0
    try:
        chosen = all_scenarios() if args.scenario == "all" else [get(name) for name in args.scenario.split(",") if name]
        seeds = parse_seeds(args.seeds) if args.seeds else None
    except (KeyError, ValueError) as exc:
        parser.error(str(exc.args[0] if exc.args else exc))
    trace_lines = None if args.verbose else args.trace_lines
    outcomes = sweep(chosen, seeds, max(1, args.jobs), trace_lines, args.verbose, args.digest, args.strict)
    for outcome in outcomes:
        for seed, digest in outcome.digests:
            print(f"{outcome.scenario} seed {seed} trace {digest}")

    failed = 0
    reported = 0
    for outcome in outcomes:
        for seed, headline, report in outcome.failures:
            failed += 1
            if reported < args.max_reports or args.verbose:
                print(report, end="\n\n")
                reported += 1
            else:
                print(f"{headline}\n  replay: make sim SCENARIO={outcome.scenario} SEEDS={seed}")
    for outcome in outcomes:
        by_issue: dict[str, list[int]] = {}
        for seed, issue in outcome.known:
            by_issue.setdefault(issue, []).append(seed)
        for issue, hit in by_issue.items():
            shown = ",".join(str(seed) for seed in hit[:10]) + (",..." if len(hit) > 10 else "")
            print(
                f"{outcome.scenario}: KNOWN ISSUE in {len(hit)} seed(s) ({shown}): {issue}\n"
                f"  replay: make sim SCENARIO={outcome.scenario} SEEDS={hit[0]} SIMFLAGS=--strict"
            )
    for outcome in outcomes:
        rate = outcome.seeds / outcome.seconds if outcome.seconds else 0.0
        known_note = f", {len(outcome.known)} known issue(s)" if outcome.known else ""
        print(
            f"{outcome.scenario}: {outcome.seeds} seed(s), {len(outcome.failures)} failed{known_note}, "
            f"{outcome.virtual_s:.0f} virtual s in {outcome.seconds:.1f} s ({rate:.0f} seeds/s)"
        )
    if failed:
        seeds_list = ",".join(str(seed) for o in outcomes for seed, _, _ in o.failures[:20])
        print(
            f"FAILED: {failed} seed(s); replay one with `make sim SCENARIO=<name> SEEDS=<seed>` "
            f"(failing seeds: {seeds_list})",
            file=sys.stderr,
        )
        return 1
    return 0
