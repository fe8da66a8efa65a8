"""The story of one run: what every fault seam did, and what the broker logged, in order.

Why: a failing seed is only useful if one can read what happened. Each seam records its
decisions here ("put wal/... lost answer", "rpc 1->2 request dropped"), the runner captures
log records of the broker's loggers, and on failure the tail of it is printed with the
replay line. Two runs of one seed must produce identical traces: that is what the
determinism tests compare.

Cheap when nobody reads it: an event is a tuple with its arguments, formatted only when
the trace is printed or compared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .loop import NS_PER_S

Event = tuple[int, str, str, tuple[Any, ...]]  # (virtual ns, source, message format, args)


class Trace:
    """An append-only list of events stamped with virtual time. `limit` bounds memory in long
    runs: beyond it the oldest events are dropped (the tail is what explains a failure)."""

    def __init__(self, now_ns: Callable[[], int], *, enabled: bool = True, limit: int = 200_000) -> None:
        self._now_ns = now_ns
        self.enabled = enabled
        self.limit = limit
        self.events: list[Event] = []
        self.dropped = 0
        # Replaced when formatting: the run's temp dir differs per process (two workers run
        # at once), and a story must read the same wherever it was told.
        self.redactions: dict[str, str] = {}

    def record(self, source: str, message: str, *args: Any) -> None:
        """`message % args` happened at the current virtual time, seen by `source`."""
        if not self.enabled:
            return
        self.events.append((self._now_ns(), source, message, args))
        if len(self.events) > self.limit:
            cut = len(self.events) // 4
            del self.events[:cut]
            self.dropped += cut

    def lines(self, last: int | None = None) -> list[str]:
        events = self.events if last is None else self.events[-last:]
        lines = [format_event(event) for event in events]
        for original, replacement in self.redactions.items():
            lines = [line.replace(original, replacement) for line in lines]
        return lines

    def count(self, source_prefix: str = "", contains: str = "") -> int:
        """How many events came from a source starting with `source_prefix` and, formatted,
        contain `contains` (tests and auditors use it to check a fault really happened)."""
        n = 0
        for event in self.events:
            if event[1].startswith(source_prefix) and (not contains or contains in self._redact(_message(event))):
                n += 1
        return n

    def _redact(self, text: str) -> str:
        for original, replacement in self.redactions.items():
            text = text.replace(original, replacement)
        return text

    def format(self, last: int | None = 200) -> str:
        shown = self.lines(last)
        skipped = len(self.events) - len(shown) + self.dropped
        head = [f"... {skipped} earlier event(s) not shown"] if skipped else []
        return "\n".join(head + shown)


def format_event(event: Event) -> str:
    ns, source, _message_format, _args = event
    return f"{ns / NS_PER_S:14.6f}  {source:<18} {_message(event)}"


def _message(event: Event) -> str:
    _ns, _source, message, args = event
    if not args:
        return message
    try:
        return message % args
    except (TypeError, ValueError):
        return f"{message} {args!r}"


class TraceLogHandler(logging.Handler):
    """Puts log records into the trace (source "log:<logger>"), formatted lazily. Installed
    as the root logger's only handler during a run, so thousands of seeds do not print
    thousands of warnings, and the ones of a failing seed are in its story."""

    def __init__(self, trace: Trace, level: int = logging.INFO) -> None:
        super().__init__(level)
        self._trace = trace

    def emit(self, record: logging.LogRecord) -> None:
        # Formatted now: log arguments are often live objects that change later.
        try:
            message = record.getMessage()
        except Exception as exc:  # a bad format string must not break the run
            message = f"{record.msg!r} % {record.args!r} ({exc})"
        if record.exc_info and record.exc_info[1] is not None:
            message = f"{message} [{type(record.exc_info[1]).__name__}: {record.exc_info[1]}]"
        self._trace.record(f"log:{record.name}", "%s %s", record.levelname, message)
