"""Run one seed of one scenario: a fresh SimLoop, seeded sources, bounds, and a verdict.

`run(seed, main)` builds a `Sim` (loop, clock, rng, ids, trace, an empty temp dir), runs
`main(sim)` to completion under `determinism_guard`, tears down whatever is left in a fixed
order, and returns a `RunResult`. Anything that goes wrong (the scenario's assertion, a
deadlock, a time or step limit, an exception nobody retrieved) becomes a `SimFailure` that
names the seed and says how to replay it.

Cheap per seed: the temp dir is reused (wiped, not re-created elsewhere; on tmpfs when the
machine has /dev/shm), and nothing heavier than the loop is built by the runner itself.

Garbage collection is off during a run (and a full collection runs before and after):
the cyclic collector runs at allocation-count thresholds that differ between the first
and later runs of a process (caches warm up), and its finalizers (async generators'
aclose, weakref callbacks) schedule callbacks, which would make interleavings depend on
what ran before. Reference counting alone is deterministic. Everything alive before a run
starts is moved to the collector's permanent generation (`gc.freeze`), so the collections
between runs walk only the last run's objects, not every imported module (54 ms -> ~1 ms).
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import logging
import os
import shutil
import tempfile
import traceback
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from .determinism import SimIds, SimRandom, determinism_guard, fixed_hash_seed
from .loop import DEFAULT_EPOCH_MS, NS_PER_S, SimClock, SimError, SimLoop
from .trace import Trace, TraceLogHandler

T = TypeVar("T")

DEFAULT_MAX_VIRTUAL_S = 3600.0
DEFAULT_MAX_STEPS = 1_000_000
TEARDOWN_STEPS = 100_000  # loop iterations allowed for cancelled tasks to finish
TEARDOWN_VIRTUAL_S = 600.0


@dataclass
class Sim:
    """What a scenario gets: one seed's world."""

    seed: int
    scenario: str
    loop: SimLoop
    rng: SimRandom  # the root stream; components should take `fork(name)` streams
    ids: SimIds
    clock: SimClock  # the reference clock (skew 0); `clock_with_skew` for nodes that disagree
    trace: Trace
    tmp: Path  # an empty directory, wiped before each run

    def fork(self, name: str) -> SimRandom:
        return self.rng.fork(name)

    def clock_with_skew(self, skew_ms: int) -> SimClock:
        return SimClock(self.loop, epoch_ms=self.clock.epoch_ms, skew_ms=skew_ms)

    @property
    def now_s(self) -> float:
        return self.loop.time()


@dataclass
class RunResult(Generic[T]):
    seed: int
    value: T
    trace: Trace
    virtual_s: float
    steps: int


@dataclass(eq=False)
class SimFailure(Exception):
    """One seed failed. `str()` is a short report ending with the replay command."""

    scenario: str
    seed: int
    cause: BaseException | None
    reason: str
    trace: Trace
    virtual_s: float
    steps: int
    unhandled: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.headline()}\n  replay: {replay_command(self.scenario, self.seed)}"

    def headline(self) -> str:
        return (
            f"scenario {self.scenario!r} seed {self.seed} failed at virtual {self.virtual_s:.6f} s "
            f"after {self.steps} loop steps: {self.reason}"
        )

    def report(self, trace_lines: int | None = 60) -> str:
        """Headline, the cause's traceback, exceptions nobody retrieved, the trace's tail and
        the replay command."""
        parts = [self.headline()]
        if self.cause is not None and not isinstance(self.cause, SimError):
            parts.append("".join(traceback.format_exception(self.cause)).rstrip())
        elif self.cause is not None:
            parts.append(str(self.cause))
        if self.unhandled:
            parts.append("exceptions nobody retrieved:\n" + "\n".join(f"  {u}" for u in self.unhandled))
        if trace_lines != 0:
            parts.append("trace (virtual s, source, event):\n" + self.trace.format(trace_lines))
        parts.append("replay: " + replay_command(self.scenario, self.seed))
        return "\n".join(parts)


def replay_command(scenario: str, seed: int) -> str:
    hash_seed = fixed_hash_seed()
    command = (
        f"make sim SCENARIO={scenario} SEEDS={seed}   "
        f"(or: PYTHONHASHSEED={0 if hash_seed is None else hash_seed} "
        f".venv/bin/python -m tests.sim --scenario {scenario} --seeds {seed} --verbose)"
    )
    if hash_seed is None:
        command += (
            "  [this process ran with a random hash seed: a replay in another process may take "
            "another path; the CLI always runs with a fixed one]"
        )
    return command


def run(
    seed: int,
    main: Callable[[Sim], Awaitable[T]],
    *,
    scenario: str = "adhoc",
    max_virtual_s: float = DEFAULT_MAX_VIRTUAL_S,
    max_steps: int = DEFAULT_MAX_STEPS,
    epoch_ms: int = DEFAULT_EPOCH_MS,
    tmp_root: Path | None = None,
    trace: bool = True,
    capture_logs: bool = True,
    fail_on_unhandled: bool = True,
    guard: bool = True,
) -> RunResult[T]:
    """Run `main(sim)` for `seed` on a fresh SimLoop, bounded by `max_virtual_s` of virtual
    time and `max_steps` loop iterations; return its value or raise SimFailure.
    `fail_on_unhandled`: an exception raised in a task nobody awaited fails the run."""
    loop = SimLoop(max_virtual_s=max_virtual_s, max_steps=max_steps)
    events = Trace(lambda: loop.now_ns, enabled=trace)
    rng = SimRandom(seed)
    sim = Sim(
        seed=seed,
        scenario=scenario,
        loop=loop,
        rng=rng,
        ids=SimIds(rng.fork("ids")),
        clock=SimClock(loop, epoch_ms=epoch_ms),
        trace=events,
        tmp=_fresh_tmp(tmp_root),
    )
    events.redactions[str(sim.tmp)] = "<tmp>"
    unhandled: list[str] = []
    loop.set_exception_handler(lambda _loop, context: _on_unhandled(events, unhandled, context))
    value: Any = None
    error: BaseException | None = None
    gc.collect()
    gc.freeze()  # what is alive now (modules, caches) is not walked again: collections stay cheap
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with (
            determinism_guard(lambda: loop.now_ns, epoch_ms, rng.fork("guard")) if guard else _nothing(),
            _logs_into(events) if capture_logs else _nothing(),
        ):
            try:
                value = loop.run_until_complete(loop.create_task(main(sim), name="main"))
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:
                error = exc
            finally:
                virtual_s, steps = loop.time(), loop.steps
                _teardown(loop, events)
    finally:
        if gc_was_enabled:
            gc.enable()
    if error is None and fail_on_unhandled and unhandled:
        reason = f"{len(unhandled)} exception(s) raised in tasks nobody awaited; first: {unhandled[0]}"
        raise SimFailure(scenario, seed, None, reason, events, virtual_s, steps, unhandled)
    if error is not None:
        reason = f"{type(error).__name__}: {error}".splitlines()[0] if str(error) else type(error).__name__
        raise SimFailure(scenario, seed, error, reason, events, virtual_s, steps, unhandled) from error
    return RunResult(seed, value, events, virtual_s, steps)


def _teardown(loop: SimLoop, events: Trace) -> None:
    """Cancel what is left, in creation order, let it finish (bounded), close the loop.
    A task that refuses to finish is reported in the trace, not raised: the verdict is
    about the scenario, which has already ended."""
    loop.revive_all()
    loop.max_steps = loop.steps + TEARDOWN_STEPS
    loop.max_virtual_ns = loop.now_ns + int(TEARDOWN_VIRTUAL_S * NS_PER_S)
    try:
        for _round in range(10):
            pending = loop.pending_tasks()
            if not pending:
                break
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        events.record("sim", "teardown did not finish: %s: %s", type(exc).__name__, exc)
    finally:
        gc.collect()  # finalizers of this run's garbage report here, inside the run's trace
        loop.close()


def _on_unhandled(events: Trace, unhandled: list[str], context: dict[str, Any]) -> None:
    exception = context.get("exception")
    message = context.get("message", "")
    if exception is not None and not isinstance(exception, asyncio.CancelledError):
        where = context.get("task") or context.get("future") or context.get("handle")
        name = where.get_name() if isinstance(where, asyncio.Task) else type(where).__name__
        text = f"{type(exception).__name__}: {exception} ({message}; in {name})"
        unhandled.append(text)
        events.record("sim", "unhandled %s", text)
    else:
        events.record("sim", "loop: %s", message)


@contextmanager
def _logs_into(events: Trace) -> Iterator[None]:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers = [TraceLogHandler(events)]
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.handlers = saved_handlers
        root.setLevel(saved_level)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


_tmp_roots: dict[int, Path] = {}


def default_tmp_root() -> Path:
    """One directory per process, on tmpfs when there is one (partition logs fsync), removed
    at exit."""
    pid = os.getpid()
    root = _tmp_roots.get(pid)
    if root is None:
        base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())
        root = Path(tempfile.mkdtemp(prefix="shoal-sim-", dir=base))
        _tmp_roots[pid] = root
        atexit.register(shutil.rmtree, root, True)
    return root


def remove_tmp_root() -> None:
    """Remove this process's temp root now (worker processes end with os._exit, so their
    atexit hooks never run)."""
    root = _tmp_roots.pop(os.getpid(), None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


def _fresh_tmp(tmp_root: Path | None) -> Path:
    path = (tmp_root or default_tmp_root()) / "run"
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path
