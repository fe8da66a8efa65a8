"""Scenarios by name, so the CLI, `make sim` and the pytest sweep find them all.

A scenario is an `async def main(sim: Sim)` that builds its world from the Sim (seams, real
components), drives it, and checks its invariants: it raises (an AssertionError from its
auditor) when a seed breaks one. Register it with `@scenario(...)` in a module under
tests/sim/scenarios/ and import that module in scenarios/__init__.py.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .runner import DEFAULT_MAX_STEPS, RunResult, Sim, run

Main = Callable[[Sim], Awaitable[Any]]


@dataclass(frozen=True)
class Scenario:
    name: str
    main: Main
    description: str
    max_virtual_s: float = 600.0  # a seed that runs longer than this fails (SimTimeLimit)
    max_steps: int = DEFAULT_MAX_STEPS  # a seed that iterates the loop more fails (SimStepLimit)
    test_seeds: int = 100  # seeds 0..test_seeds-1 run in `make test`; `make sim` runs many more
    run_options: dict[str, Any] = field(default_factory=dict)  # more keyword arguments for runner.run
    # Open bugs this scenario finds: a regex on the failure's reason -> what the bug is and
    # where it is reduced to a test. Such seeds are reported as known, not failed, unless
    # the CLI runs with --strict. Remove an entry when its bug is fixed.
    known_issues: dict[str, str] = field(default_factory=dict)

    def known_issue(self, reason: str) -> str | None:
        for pattern, description in self.known_issues.items():
            if re.search(pattern, reason):
                return description
        return None

    def run(self, seed: int, **overrides: Any) -> RunResult[Any]:
        options: dict[str, Any] = {
            "max_virtual_s": self.max_virtual_s,
            "max_steps": self.max_steps,
            **self.run_options,
            **overrides,
        }
        return run(seed, self.main, scenario=self.name, **options)


_SCENARIOS: dict[str, Scenario] = {}


def scenario(
    name: str,
    *,
    max_virtual_s: float = 600.0,
    max_steps: int = DEFAULT_MAX_STEPS,
    test_seeds: int = 100,
    known_issues: dict[str, str] | None = None,
    **run_options: Any,
) -> Callable[[Main], Main]:
    """Register the decorated `main` under `name` (the docstring's first line describes it)."""

    def register(main: Main) -> Main:
        if name in _SCENARIOS and _SCENARIOS[name].main is not main:
            raise ValueError(f"scenario {name!r} is registered twice")
        description = (main.__doc__ or "").strip().splitlines()[0] if main.__doc__ else ""
        _SCENARIOS[name] = Scenario(
            name, main, description, max_virtual_s, max_steps, test_seeds, run_options, dict(known_issues or {})
        )
        return main

    return register


def all_scenarios() -> list[Scenario]:
    """Every registered scenario, in name order (loads tests/sim/scenarios first)."""
    importlib.import_module("tests.sim.scenarios")
    return [_SCENARIOS[name] for name in sorted(_SCENARIOS)]


def get(name: str) -> Scenario:
    importlib.import_module("tests.sim.scenarios")
    try:
        return _SCENARIOS[name]
    except KeyError:
        raise KeyError(f"no scenario {name!r}; known: {', '.join(sorted(_SCENARIOS)) or 'none'}") from None
