"""Shared fixtures: one local SparkSession for the whole test session."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# No Spark UI in tests, in this process and in the `sluice run` subprocesses tests start:
# parallel runs would fight over its port, and nobody looks at it.
os.environ["SLUICE_SPARK_UI"] = "0"

# Every JVM the suite starts (its shared session, the `sluice run` children the crash tests
# kill and relaunch, a standalone cluster's master and workers) lives seconds to a minute:
# too short for the C2 compiler's work to pay back, and on a 2-core machine its compiler
# threads take the cores the job needs. C1 alone compiles the same code, only less
# optimised: the crash tests' relaunched drivers reach their first batch sooner
# (test_windows_crash: 62-64 s -> 46-48 s). No test asserts a timing; benchmarks run with
# the JVM's defaults. A JAVA_TOOL_OPTIONS of the caller's own wins.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")


def pytest_sessionstart(session):
    """Record Spark's class archive before any test starts a JVM, when it is missing: the
    suite starts dozens of Spark processes (crash tests relaunch pipelines), and each starts
    in about 4.8 s from the archive against 7.4 s without and 12.8 s while recording one."""
    from sluice.runtime.session import class_archive

    archive = class_archive()
    if archive is not None and not archive.exists():
        subprocess.run([sys.executable, "-m", "sluice", "warm"], check=False)


@pytest.fixture(scope="session")
def spark():
    from sluice.runtime.session import spark_session

    session = spark_session(master="local[2]", app_name="sluice-tests", ui=False)
    yield session
    session.stop()


def pytest_collection_modifyitems(config, items):
    """A test that takes the ``spark`` fixture is a Spark test whether or not it is marked, so
    ``-m "not spark"`` (``make test-fast``) never starts a JVM for it."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()) and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)


@pytest.fixture
def memory():
    """Memory sinks cleared before and after the test."""
    from sluice.runtime.sinks import clear_memory

    clear_memory()
    yield
    clear_memory()
