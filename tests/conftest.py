"""Shared fixtures: one local SparkSession for the whole test session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from sluice.runtime.session import spark_session

    session = spark_session(master="local[2]", app_name="sluice-tests")
    yield session
    session.stop()
