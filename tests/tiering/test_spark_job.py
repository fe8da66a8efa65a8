"""The PySpark application (spark_jobs/assemble_segments.py) in Spark local mode: one task per
range, a failed range reported without failing the others, and the summary the broker reads.
One Spark session for the module: Spark takes seconds to start."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from broker.clock import SystemClock
from broker.objectstore import open_object_store
from tests.gates import require_spark
from tests.tiering.test_assemble import CLUSTER, TOPIC_ID, _scenario
from tiering.plan import PLAN_VERSION, Plan, PlannedBatch, encode_plan
from walfiles.keys import format_plan_key


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    require_spark()
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    yield session
    session.stop()


def test_job_assembles_every_range_and_reports_failures(spark: Any, tmp_path: Path) -> None:
    from spark_jobs.assemble_segments import run_job

    url = f"file://{tmp_path}"
    store = open_object_store(url, clock=SystemClock(), rng=random.Random())
    good, _ = _scenario(store)  # type: ignore[arg-type]
    broken_batches = list(good.batches)
    broken_batches[0] = PlannedBatch(good.batches[0].header, "0000000000099-0000000001-0000000000", 0, 10)
    broken = msgspec.structs.replace(good, partition=4, batches=broken_batches)
    plan = Plan(PLAN_VERSION, "p1", CLUSTER, 1, 0, [good, broken])
    key = format_plan_key("", CLUSTER, uuid.uuid4())
    asyncio.run(store.put(key, encode_plan(plan)))

    summary = run_job(spark, url, key)

    assert summary["ok"] == 1
    [failed] = summary["failed"]
    assert failed["partition"] == 4 and "NotFound" in failed["error"]
    manifests = [p.name for p in tmp_path.rglob("*.manifest")]
    assert len(manifests) == 1 and manifests[0].startswith(f"{good.base_offset:020d}-{good.segment_id}")
    assert TOPIC_ID in str(next(tmp_path.rglob("*.manifest")))
