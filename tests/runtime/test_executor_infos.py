"""The executors of the session, read from Spark's status store in one JSON call."""

from __future__ import annotations

import pytest

from sluice.runtime.executor_pool import _executor_infos_by_call, executor_infos, held_executors

pytestmark = pytest.mark.spark


def test_one_json_call_reads_what_a_call_per_field_reads(spark):
    spark.range(10).count()  # a task run: the driver's counts are past zero
    infos = executor_infos(spark)
    by_call = _executor_infos_by_call(spark)
    # the task count may move between the two reads if another job runs; the rest may not
    strip = [{k: v for k, v in e.items() if k != "tasks"} for e in infos]
    assert strip == [{k: v for k, v in e.items() if k != "tasks"} for e in by_call]
    driver = next(e for e in infos if e["id"] == "driver")
    assert driver["cores"] >= 1 and driver["tasks"] >= 1 and driver["since"] > 1.6e9
    assert held_executors(infos) == []  # local Spark: the driver's slots only
