"""The tiering job runner (broker/tiering/runner.py): the command it builds for the embedded
default and for spark-submit, the summary it reads, a job that cannot start, fails or runs
past tiering.job.timeout.ms (killed with its process group)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from broker.tiering.runner import SparkJobRunner


def test_embedded_default_runs_the_module_with_this_python_in_local_mode() -> None:
    runner = SparkJobRunner("s3://b/p?endpoint=http://x", "local[2]", "", 1000)
    assert runner.command("plans/k.plan") == [
        sys.executable,
        "-m",
        "spark_jobs.assemble_segments",
        "--master",
        "local[2]",
        "--object-store",
        "s3://b/p?endpoint=http://x",
        "--plan",
        "plans/k.plan",
    ]


def test_submit_command_gets_the_application_file_and_its_arguments() -> None:
    runner = SparkJobRunner("file:///d", "local[2]", "spark-submit --master spark://m:7077 --conf a=b", 1000)
    argv = runner.command("k")
    assert argv[:5] == ["spark-submit", "--master", "spark://m:7077", "--conf", "a=b"]
    assert argv[5].endswith("spark_jobs/assemble_segments.py")
    assert argv[6:] == ["--object-store", "file:///d", "--plan", "k"]


def test_summary_line_makes_a_successful_job(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text('print("noise")\nprint(\'{"plan_id": "p", "ok": 1, "failed": []}\')\n')
    outcome = asyncio.run(SparkJobRunner("file:///d", "", f"{sys.executable} {script}", 5000).run("k"))
    assert outcome.ok and outcome.summary == {"plan_id": "p", "ok": 1, "failed": []}


def test_missing_spark_is_a_failed_job_not_a_crash() -> None:
    outcome = asyncio.run(SparkJobRunner("file:///d", "", "/nonexistent/spark-submit", 5000).run("k"))
    assert not outcome.ok and "cannot start /nonexistent/spark-submit" in outcome.error


def test_failing_job_reports_its_last_error_line() -> None:
    script = "echo 'RuntimeError: no executors' >&2; exit 3"
    outcome = asyncio.run(SparkJobRunner("file:///d", "", f"sh -c {script!r} --", 5000).run("k"))
    assert not outcome.ok and outcome.error == "exit status 3: RuntimeError: no executors"


def test_job_past_the_timeout_is_killed_with_its_children() -> None:
    script = "sleep 30 & sleep 30"
    started = asyncio.run(_timed(SparkJobRunner("file:///d", "", f"sh -c {script!r} --", 300)))
    outcome, seconds = started
    assert not outcome.ok and "killed after tiering.job.timeout.ms (300)" in outcome.error
    assert seconds < 10


async def _timed(runner: SparkJobRunner):  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    start = loop.time()
    outcome = await runner.run("k")
    return outcome, loop.time() - start
