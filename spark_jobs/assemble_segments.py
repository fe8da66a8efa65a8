"""PySpark application: assemble the ranges of a tiering plan into Kafka log segments.

    spark-submit [--master URL ...] spark_jobs/assemble_segments.py \\
        --object-store s3://bucket/prefix?endpoint=... --plan tiering-plans/<cluster>/<id>.plan

or, with pyspark installed (the embedded default, Spark local mode in this process):

    python -m spark_jobs.assemble_segments --master 'local[2]' --object-store URL --plan KEY

One Spark task per planned range (tiering/assemble.py does the work); the driver only reads
the plan and collects one result line per range. A range that fails does not fail the others:
its result names the error, and the exit status is 1. Object-store credentials come from the
environment (AWS_ACCESS_KEY_ID and friends, or the executors' cloud identity), never from the
plan. The last line on stdout is a JSON summary: {"plan_id", "ok", "failed": [...]}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import msgspec

from broker.clock import SystemClock
from broker.objectstore import ObjectStore, open_object_store
from broker.randomness import PROCESS_RANDOM
from tiering.assemble import assemble_range
from tiering.plan import RangePlan, decode_plan


def _open_store(store_url: str) -> ObjectStore:
    """The job's composition root: a Spark task is a process of its own, on the real clock and
    the process's random source (retry jitter, temporary file names)."""
    return open_object_store(store_url, clock=SystemClock(), rng=PROCESS_RANDOM)


def assemble_task(store_url: str, cluster_id: str, plan_id: str, encoded_range: bytes) -> dict[str, Any]:
    """One Spark task: assemble one range; never raises (the result says what went wrong)."""
    planned = msgspec.msgpack.decode(encoded_range, type=RangePlan)
    where = {"topic_id": planned.topic_id, "partition": planned.partition, "base_offset": planned.base_offset}

    async def run() -> dict[str, Any]:
        store = _open_store(store_url)
        try:
            manifest = await assemble_range(store, cluster_id, plan_id, planned)
        finally:
            await store.close()
        return {**where, "ok": True, "segment_id": manifest.segment_id, "size_bytes": manifest.size_bytes}

    try:
        return asyncio.run(run())
    except Exception as exc:  # noqa: BLE001 - reported per range, the job goes on
        return {**where, "ok": False, "error": f"{type(exc).__name__}: {exc}"}


async def _read_plan(store_url: str, plan_key: str) -> bytes:
    store = _open_store(store_url)
    try:
        return await store.get(plan_key)
    finally:
        await store.close()


def run_job(spark: Any, store_url: str, plan_key: str) -> dict[str, Any]:
    """Run every range of the plan as one task; returns the summary."""
    plan = decode_plan(asyncio.run(_read_plan(store_url, plan_key)))
    encoded = [msgspec.msgpack.encode(r) for r in plan.ranges]
    results: list[dict[str, Any]] = []
    if encoded:
        cluster_id, plan_id = plan.cluster_id, plan.plan_id
        rdd = spark.sparkContext.parallelize(encoded, numSlices=len(encoded))
        results = rdd.map(lambda e: assemble_task(store_url, cluster_id, plan_id, e)).collect()
    return {
        "plan_id": plan.plan_id,
        "ok": sum(1 for r in results if r["ok"]),
        "failed": [r for r in results if not r["ok"]],
        "results": results,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="assemble_segments", description=__doc__.split("\n\n")[0])
    parser.add_argument("--object-store", required=True, help="the cluster's object.store URL")
    parser.add_argument("--plan", required=True, help="key of the plan object in that store")
    parser.add_argument("--master", help="Spark master (default: what spark-submit or the environment says)")
    args = parser.parse_args(argv)
    from pyspark.sql import SparkSession

    if (args.master or "").startswith("local"):  # the executors are this interpreter's children
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(f"shoal-tiering {args.plan.rsplit('/', 1)[-1]}")
    if args.master:
        builder = builder.master(args.master)
    spark = builder.config("spark.ui.enabled", "false").getOrCreate()
    try:
        summary = run_job(spark, args.object_store, args.plan)
    finally:
        spark.stop()
    print(json.dumps(summary), flush=True)
    return 0 if not summary["failed"] else 1


if __name__ == "__main__":
    # Run the importable module's main, so Spark ships the task function by reference (the
    # executors import it) rather than pickling this script's globals by value.
    from spark_jobs import assemble_segments

    sys.exit(assemble_segments.main())
