"""Runs one tiering job: the PySpark application (spark_jobs/assemble_segments.py) as a
subprocess, in Spark local mode by default or through `spark-submit` to a Spark cluster.

`tiering.spark.submit` empty (the embedded default): this broker's Python runs the
application, which starts Spark in local mode with `tiering.spark.master` (local[2]).
Otherwise it is the submit command (split like a shell would, e.g. ``spark-submit --master
spark://spark:7077 --conf spark.executor.memory=4g``) to which the application file and its
arguments are appended. The job gets the broker's environment (object-store credentials).
A job that outlives `tiering.job.timeout.ms` is killed with its process group, and a job
whose broker dies is killed with it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import shlex
import signal
import sys
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

OUTPUT_TAIL_BYTES = 4096  # of the job's stderr, kept to explain a failure


@dataclass(frozen=True, slots=True)
class JobOutcome:
    ok: bool  # the job ran and every range succeeded
    summary: dict[str, Any] | None  # the job's JSON summary, when it printed one
    error: str  # why not ok ("" when ok)


class TieringJobs(Protocol):
    """Runs the tiering job of one plan (the object at `plan_key`) to its end."""

    async def run(self, plan_key: str) -> JobOutcome: ...


class SparkJobRunner:
    def __init__(self, object_store_url: str, master: str, submit: str, timeout_ms: int) -> None:
        self._url = object_store_url
        self._master = master
        self._submit = submit
        self._timeout_s = timeout_ms / 1000

    def command(self, plan_key: str) -> list[str]:
        args = ["--object-store", self._url, "--plan", plan_key]
        if not self._submit:
            return [sys.executable, "-m", "spark_jobs.assemble_segments", "--master", self._master, *args]
        spec = importlib.util.find_spec("spark_jobs.assemble_segments")
        assert spec is not None and spec.origin is not None, "the shoal package ships spark_jobs"
        return [*shlex.split(self._submit), spec.origin, *args]

    async def run(self, plan_key: str) -> JobOutcome:
        argv = self.command(plan_key)
        env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            return JobOutcome(False, None, f"cannot start {argv[0]}: {exc}")
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), self._timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            _kill(process)
            await process.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return JobOutcome(False, None, f"killed after tiering.job.timeout.ms ({int(self._timeout_s * 1000)})")
        summary = _summary(stdout)  # none in cluster deploy mode: the driver runs elsewhere
        if process.returncode == 0 and (summary is None or not summary.get("failed")):
            return JobOutcome(True, summary, "")
        tail = stderr[-OUTPUT_TAIL_BYTES:].decode(errors="replace").strip().splitlines()
        reason = next((line for line in reversed(tail) if "Error" in line or "error" in line), tail[-1] if tail else "")
        return JobOutcome(False, summary, f"exit status {process.returncode}: {reason}")


def _summary(stdout: bytes) -> dict[str, Any] | None:
    for line in reversed(stdout.decode(errors="replace").strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "plan_id" in value:
            return value
    return None


def _die_with_parent() -> None:
    """In the job's process, before exec: SIGKILL it when the broker dies (Linux), so a
    killed broker leaves no job writing files nobody will commit. Spark's JVM exits with
    its Python driver (it watches the driver's pipe)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: a timeout still ends the job


def _kill(process: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
