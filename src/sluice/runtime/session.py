"""The SparkSession Sluice runs on: local embedded Spark by default, any master URL works."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from sluice.errors import EnvironmentProblem

_INSTALL_JAVA = (
    "Install Java 17+ (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless; "
    "macOS: brew install openjdk@17) or point JAVA_HOME at one."
)


def java_major_version() -> int:
    """The major version of the ``java`` Spark will use; raises EnvironmentProblem if none."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise EnvironmentProblem("Spark needs Java 17+ but no 'java' was found. " + _INSTALL_JAVA)
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    try:
        version = out.split('"')[1]
    except IndexError:
        raise EnvironmentProblem(f"cannot read the Java version from {out!r}. " + _INSTALL_JAVA) from None
    parts = version.split(".")
    return int(parts[1]) if parts[0] == "1" else int(parts[0])


def check_java() -> None:
    major = java_major_version()
    if major < 17:
        raise EnvironmentProblem(f"Spark needs Java 17+, found Java {major}. " + _INSTALL_JAVA)


def ui_enabled(ui: bool | None = None) -> bool:
    """Whether a new session serves the Spark UI: ``ui`` if given, else on unless the
    environment says ``SLUICE_SPARK_UI=0`` (the test suite does: parallel runs would fight
    over its port)."""
    return ui if ui is not None else os.environ.get("SLUICE_SPARK_UI", "1") not in ("0", "false", "no")


def announce_ui(spark) -> None:
    """Print where the session's Spark UI serves (nothing when it has none)."""
    url = spark.sparkContext.uiWebUrl
    if url:
        print(f"Spark UI at {url}", flush=True)


def spark_session(master: str | None = None, app_name: str = "sluice", conf: dict | None = None,
                  ui: bool | None = None):
    """Get (or create) the SparkSession, quiet and with workers on this interpreter.

    Python workers must run the same interpreter as the driver (the virtualenv's), or
    Python data sources die with "Python worker failed to connect back". The Spark UI is on
    (port 4040, or the next free one) unless ``ui`` is False or ``SLUICE_SPARK_UI=0``.
    """
    check_java()
    # Workers must import what the driver imports (user modules next to a pipeline file,
    # test modules): hand them the driver's path. Set before the JVM starts the workers.
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    current = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(([current] if current else []) + paths))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    master = master or os.environ.get("SLUICE_MASTER", "local[*]")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", str(ui_enabled(ui)).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.driver.memory", os.environ.get("SLUICE_DRIVER_MEMORY", "2g"))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SLUICE_SPARK_LOG_LEVEL", "ERROR"))
    # A query that dies is reported by run_pipeline as the SluiceError it was raised as (or
    # with Spark's message): Spark's own log of it, Java and Python stack traces of some 80
    # lines, would bury that one clear message.
    log4j = spark.sparkContext._jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel(QUERY_LOGGER, log4j.Level.OFF)
    return spark


QUERY_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution"
