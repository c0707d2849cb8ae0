"""Shared fixtures: one local SparkSession for the whole test session."""

from __future__ import annotations

import os

import pytest

# No Spark UI in tests, in this process and in the `sluice run` subprocesses tests start:
# parallel runs would fight over its port, and nobody looks at it.
os.environ["SLUICE_SPARK_UI"] = "0"


@pytest.fixture(scope="session")
def spark():
    from sluice.runtime.session import spark_session

    session = spark_session(master="local[2]", app_name="sluice-tests", ui=False)
    yield session
    session.stop()
