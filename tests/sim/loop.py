"""A deterministic asyncio event loop on virtual time, and the Clock bound to it.

Why: the simulation runs the broker's real components (which use asyncio.sleep, call_later,
asyncio.timeout, wait_for, loop.time() and an injected Clock) in one thread, so that a seed
fixes everything that happens. Real waiting would make thousands of seeds impossible and
real time would make a run unrepeatable.

How: `SimLoop` is a BaseEventLoop whose "selector" never blocks. asyncio asks the selector
to wait `timeout` seconds when nothing is ready; here that moves virtual time straight to
the earliest timer instead. So time only passes when every task is waiting, and a run costs
the CPU time of its callbacks, not the virtual time it covers.

Idle: `timeout=None` means nothing is ready and no timer is scheduled. Nothing outside the
loop can wake it (no sockets, no threads), so the run can never make progress: `SimDeadlock`
is raised, naming where every pending task is suspended. (A run whose tasks only wait on
periodic timers does not deadlock; it runs into `max_virtual_s` instead: `SimTimeLimit`.)

Virtual time is an integer count of nanoseconds (`now_ns`); `time()` returns it in seconds
as asyncio expects. Keeping it integral avoids float drift: `SimClock.monotonic_ms()` after
`sleep(4.35)` is 4350, not 4349.

Nodes: a task or callback belongs to the `SimNode` (one incarnation of a broker) that is
`CURRENT_NODE` in its context; tasks inherit it from whoever created them. `kill(node)` is a
kill -9: the node's ready callbacks and timers are cancelled and nothing of it is scheduled
again, so its tasks stay suspended where they were (no finally blocks run, no timer fires,
no answer wakes them), while every other node goes on. See nodes.py for the API.

No I/O: every socket, server, pipe, subprocess, signal and DNS method raises `SimForbidden`.
`run_in_executor` runs the function inline (there are no threads in a simulation) and
returns a completed future; `executor_latency` can make that future resolve after a virtual
delay instead (to model an fsync's duration, for example).
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import contextvars
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
# Wall-clock base of every SimClock unless a scenario picks another: 2027-01-15T08:00:00Z,
# a fixed instant so record timestamps and WAL keys repeat from run to run.
DEFAULT_EPOCH_MS = 1_800_000_000_000


class SimError(Exception):
    """The simulation kernel itself stopped the run (not an assertion of a scenario)."""


class SimDeadlock(SimError):
    """Nothing is ready and no timer is scheduled: the run can never make progress."""


class SimTimeLimit(SimError):
    """The run reached its bound of virtual time (`max_virtual_s`)."""


class SimStepLimit(SimError):
    """The run reached its bound of loop iterations (`max_steps`): probably a busy loop."""


class SimForbidden(SimError):
    """Real I/O, threads or blocking waits were attempted inside a simulation."""


@dataclass(eq=False)
class SimNode:
    """One incarnation of a node: a restarted broker is a new SimNode with the same id, so
    the killed incarnation's tasks can never wake up in the new one."""

    node_id: int
    incarnation: int
    alive: bool = True

    def __str__(self) -> str:
        return f"n{self.node_id}.{self.incarnation}"


CURRENT_NODE: contextvars.ContextVar[SimNode | None] = contextvars.ContextVar("sim_node", default=None)


class _VirtualSelector:
    """Stands in for the selector that BaseEventLoop._run_once polls: it never blocks and
    never reports I/O; a positive timeout moves virtual time to the earliest timer."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        loop = self._loop
        if timeout is None:
            raise SimDeadlock(loop.describe_deadlock())
        scheduled = loop._scheduled  # type: ignore[attr-defined]  # asyncio's timer heap
        if timeout > 0 and scheduled:
            loop._advance_to(scheduled[0]._when)
        return []

    def close(self) -> None:
        return None


class SimLoop(asyncio.base_events.BaseEventLoop):
    """An event loop on virtual time, bounded in virtual time and in loop iterations."""

    def __init__(self, *, max_virtual_s: float = math.inf, max_steps: int | None = None) -> None:
        super().__init__()
        self._selector = _VirtualSelector(self)
        self._clock_resolution = 1e-9
        self.now_ns = 0
        self.steps = 0  # loop iterations so far (each runs every callback ready at its start)
        self.max_virtual_ns = math.inf if math.isinf(max_virtual_s) else int(max_virtual_s * NS_PER_S)
        self.max_steps = max_steps
        self.executor_latency: Callable[[], float] | None = None
        self.killed = 0  # incarnations killed so far; while 0, scheduling costs nothing extra
        self.incarnations: dict[int, int] = {}  # node id -> last incarnation (nodes.new_node)
        self._task_seq = 0
        self._tasks_in_order: list[weakref.ref[asyncio.Task[Any]]] = []
        self.task_nodes: weakref.WeakKeyDictionary[asyncio.Task[Any], SimNode] = weakref.WeakKeyDictionary()

    # -- time ---------------------------------------------------------------------------------
    def time(self) -> float:
        return self.now_ns / NS_PER_S

    def _advance_to(self, when_s: float) -> None:
        target = max(self.now_ns, math.ceil(when_s * NS_PER_S))
        if target > self.max_virtual_ns:
            self.now_ns = int(self.max_virtual_ns)
            raise SimTimeLimit(
                f"virtual time limit of {self.max_virtual_ns / NS_PER_S:g} s reached "
                f"(next timer at {when_s:.6f} s); {self._pending_summary()}"
            )
        self.now_ns = target

    def _run_once(self) -> None:
        self.steps += 1
        if self.max_steps is not None and self.steps > self.max_steps:
            raise SimStepLimit(
                f"step limit of {self.max_steps} loop iterations reached at virtual "
                f"{self.time():.6f} s (a busy loop?); {self._pending_summary()}"
            )
        if not self._ready and self._scheduled:  # type: ignore[attr-defined]
            # asyncio runs timers due within the clock's resolution without waiting; real time
            # then moves on, but virtual time would not, and a caller that loops until its
            # deadline (remaining > 0: wait a sub-nanosecond) would spin forever. Move to it.
            first = self._scheduled[0]  # type: ignore[attr-defined]
            if first._when >= self.time():  # (a deadline one float ulp away rounds to now: +1 ns)
                self._advance_to(max(first._when, (self.now_ns + 1) / NS_PER_S))
        super()._run_once()  # type: ignore[misc]  # asyncio's private loop iteration

    # -- nodes: a killed incarnation never runs again ------------------------------------------
    def call_soon(
        self,
        callback: Any,
        *args: Any,  # type: ignore[override]
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        if self.killed and _is_dead(context):
            handle = asyncio.Handle(callback, args, self, context)
            handle.cancel()
            return handle
        return super().call_soon(callback, *args, context=context)

    def call_at(
        self,
        when: float,
        callback: Any,
        *args: Any,  # type: ignore[override]
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        if self.killed and _is_dead(context):
            handle = asyncio.TimerHandle(when, callback, args, self, context)
            handle.cancel()
            return handle
        return super().call_at(when, callback, *args, context=context)

    def kill(self, node: SimNode) -> None:
        """kill -9 `node`: cancel its ready callbacks and timers; from now on anything
        scheduled in its context (a timer, a task step, a future's wakeup) is dropped."""
        if not node.alive:
            return
        node.alive = False
        self.killed += 1
        for handle in [*self._ready, *self._scheduled]:  # type: ignore[attr-defined]
            if handle._context.get(CURRENT_NODE) is node:
                handle.cancel()

    def revive_all(self) -> None:
        """Stop dropping killed nodes' callbacks (teardown: their tasks must be able to
        finish being cancelled)."""
        self.killed = 0

    # -- tasks: deterministic names and a creation order ---------------------------------------
    def create_task(
        self,
        coro: Any,
        *,
        name: str | None = None,  # type: ignore[override]
        context: Any = None,
    ) -> asyncio.Task[Any]:
        """As asyncio's, but unnamed tasks are numbered per loop (asyncio's own "Task-N"
        counter is global, so names would differ between two runs in one process), and the
        creation order is kept for teardown and deadlock reports."""
        self._task_seq += 1
        task = super().create_task(coro, name=name or f"sim-task-{self._task_seq}", context=context)
        self._tasks_in_order.append(weakref.ref(task))
        node = context.get(CURRENT_NODE) if context is not None else CURRENT_NODE.get()
        if node is not None:
            self.task_nodes[task] = node
        if len(self._tasks_in_order) > 4096 and self._task_seq % 4096 == 0:
            self._tasks_in_order = [r for r in self._tasks_in_order if (t := r()) is not None and not t.done()]
        return task

    def pending_tasks(self) -> list[asyncio.Task[Any]]:
        """Tasks not done yet, in creation order (asyncio.all_tasks is a set: its order
        follows object addresses, which differ between runs)."""
        return [t for r in self._tasks_in_order if (t := r()) is not None and not t.done()]

    def describe_deadlock(self) -> str:
        tasks = self.pending_tasks()
        lines = [
            f"deadlock at virtual {self.time():.6f} s: nothing is ready and no timer is scheduled; "
            f"{len(tasks)} task(s) wait forever:"
        ]
        lines += [f"  {describe_task(t)}" for t in tasks[:50]]
        return "\n".join(lines)

    def _pending_summary(self) -> str:
        tasks = self.pending_tasks()
        shown = ", ".join(describe_task(t) for t in tasks[:10])
        return f"{len(tasks)} pending task(s): {shown}" + (" ..." if len(tasks) > 10 else "")

    # -- executors: inline ---------------------------------------------------------------------
    def run_in_executor(
        self,
        executor: Any,
        func: Callable[..., Any],  # type: ignore[override]
        *args: Any,
    ) -> asyncio.Future[Any]:
        """Run `func(*args)` now, in this thread; the returned future is already done,
        unless `executor_latency` is set, in which case it resolves that many virtual
        seconds later (the function has still run at once)."""
        self._check_closed()  # type: ignore[attr-defined]
        future = self.create_future()
        try:
            result = func(*args)
        except BaseException as exc:  # the future carries it, as an executor's would
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            outcome: tuple[bool, Any] = (False, exc)
        else:
            outcome = (True, result)
        delay = self.executor_latency() if self.executor_latency is not None else 0.0
        if delay > 0:
            self.call_later(delay, _settle, future, outcome)
        else:
            _settle(future, outcome)
        return future

    def set_default_executor(self, executor: Any) -> NoReturn:
        _forbidden("set_default_executor (a simulation runs executor work inline)")

    # -- BaseEventLoop hooks -------------------------------------------------------------------
    def _process_events(self, event_list: list[Any]) -> None:
        return None

    def _write_to_self(self) -> None:
        return None  # call_soon_threadsafe: there is no other thread to wake us

    def close(self) -> None:
        if not self.is_running():
            self._tasks_in_order.clear()
        super().close()

    # -- no I/O --------------------------------------------------------------------------------
    def create_connection(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("create_connection (use tests.sim.network.SimRpcPool)")

    def create_server(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("create_server (register a handler with tests.sim.network.SimNetwork)")

    def create_unix_connection(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("create_unix_connection")

    def create_unix_server(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("create_unix_server")

    def create_datagram_endpoint(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("create_datagram_endpoint")

    def connect_accepted_socket(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("connect_accepted_socket")

    def connect_read_pipe(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("connect_read_pipe")

    def connect_write_pipe(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("connect_write_pipe")

    def subprocess_exec(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("subprocess_exec")

    def subprocess_shell(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("subprocess_shell")

    def getaddrinfo(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("getaddrinfo (DNS)")

    def getnameinfo(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("getnameinfo (DNS)")

    def sendfile(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("sendfile")

    def start_tls(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("start_tls")

    def sock_recv(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("sock_recv")

    def sock_recv_into(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("sock_recv_into")

    def sock_recvfrom(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("sock_recvfrom")

    def sock_recvfrom_into(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("sock_recvfrom_into")

    def sock_sendall(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("sock_sendall")

    def sock_sendto(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("sock_sendto")

    def sock_connect(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("sock_connect")

    def sock_accept(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("sock_accept")

    def sock_sendfile(self, *args: Any, **kwargs: Any) -> NoReturn:
        _forbidden("sock_sendfile")

    def add_reader(self, *args: Any, **kwargs: Any) -> NoReturn:  # type: ignore[override]
        _forbidden("add_reader")

    def add_writer(self, *args: Any, **kwargs: Any) -> NoReturn:  # type: ignore[override]
        _forbidden("add_writer")

    def remove_reader(self, *args: Any, **kwargs: Any) -> bool:
        return False

    def remove_writer(self, *args: Any, **kwargs: Any) -> bool:
        return False

    def add_signal_handler(self, *args: Any, **kwargs: Any) -> NoReturn:  # type: ignore[override]
        _forbidden("add_signal_handler")

    def remove_signal_handler(self, *args: Any, **kwargs: Any) -> bool:
        return False


class SimClock:
    """broker.clock.Clock on a SimLoop's virtual time. `monotonic_ms` is virtual ms since the
    loop started (`monotonic` the same in seconds: the loop's `time()`); `now_ms` is
    `epoch_ms` + virtual ms + `skew_ms`, so nodes can disagree on the wall clock (WAL keys and
    commit deadlines compare wall clocks of different brokers) and a skew change is a
    wall-clock jump, while monotonic time never jumps."""

    def __init__(self, loop: SimLoop, *, epoch_ms: int = DEFAULT_EPOCH_MS, skew_ms: int = 0) -> None:
        self._loop = loop
        self.epoch_ms = epoch_ms
        self.skew_ms = skew_ms

    def now_ms(self) -> int:
        return self.epoch_ms + self.skew_ms + self._loop.now_ns // NS_PER_MS

    def monotonic_ms(self) -> int:
        return self._loop.now_ns // NS_PER_MS

    def monotonic(self) -> float:
        return self._loop.now_ns / NS_PER_S

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)  # virtual: the SimLoop runs the timer


def _is_dead(context: contextvars.Context | None) -> bool:
    node = context.get(CURRENT_NODE) if context is not None else CURRENT_NODE.get()
    return node is not None and not node.alive


def describe_task(task: asyncio.Task[Any]) -> str:
    """`name at file:line in function > ...` down to where a pending task is suspended (the
    last three coroutine frames), for deadlock and limit reports."""
    coro: Any = task.get_coro()
    frames: list[str] = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            frames.append(f"{_short_path(frame.f_code.co_filename)}:{frame.f_lineno} in {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    loop = task.get_loop()
    node = loop.task_nodes.get(task) if isinstance(loop, SimLoop) else None
    owner = "" if node is None else f" [{node}{'' if node.alive else ', killed'}]"
    return f"{task.get_name()}{owner} at {' > '.join(frames[-3:]) or '?'}"


def _short_path(path: str) -> str:
    for marker in ("/broker/", "/tests/", "/walfiles/", "/tiering/", "/asyncio/"):
        index = path.rfind(marker)
        if index >= 0:
            return path[index + 1 :]
    return path


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _forbidden(what: str) -> NoReturn:
    raise SimForbidden(f"{what} is not available in a simulation: it would do real I/O or block")
