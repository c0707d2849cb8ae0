"""The executors a running SparkSession has, as the dashboard shows them."""

from __future__ import annotations


def executor_infos(spark) -> list[dict]:
    """One dict per executor (the driver included on local Spark): host, running tasks, and
    storage memory used, from the JVM's status tracker (a few Py4J calls; no Spark job)."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return [{"host": f"{e.host()}:{e.port()}", "running_tasks": int(e.numRunningTasks()),
             "storage_mb": round((e.usedOnHeapStorageMemory() + e.usedOffHeapStorageMemory()) / 2**20, 1)}
            for e in infos]


def cores(spark) -> int:
    """Task slots of the session: local[N]'s N, or the executors' cores on a cluster."""
    return int(spark.sparkContext.defaultParallelism)
