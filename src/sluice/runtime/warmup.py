"""Work a job does in the background: what a fresh job starts early so that its first batch
does not wait for it, and the thread helper for it.

A new SparkSession has no Python workers: the first batch's tasks would each fork one and
import pyarrow, numpy and Sluice's runtime in it (a second or more each on a busy machine),
one after the other on the batch's critical path. While the driver validates the pipeline
and opens its sources (Py4J calls and Python planning processes that leave the executors
idle), a small job of no-op ``mapInArrow`` passes starts those workers and makes them import
what the batch's tasks will need (pandas too: pyarrow imports it at its first conversion of
values). Spark keeps idle workers for reuse, so the first batch finds them ready. The job
waits for it before it starts its query: the Python process Spark starts then to plan a
Python source must connect back within 10 s, and imports competing with it on a loaded
machine could make it miss that. The warm-up is best effort: it changes no result, and its
failure only costs the time it meant to save.
"""

from __future__ import annotations

import importlib
import threading
from concurrent.futures import Future

RUNTIME_MODULES = ("sluice.runtime.sources.datasource", "sluice.runtime.batch.stages", "sluice.runtime.kernels.factory")


def _import_runtime(batches):
    # the modules a batch's tasks import: the keyed and chained stages, the sources' readers
    # (by name: loaded for their side effect, the worker has them when the batch comes)
    for module in RUNTIME_MODULES:
        importlib.import_module(module)
    # pyarrow imports pandas at its first conversion of Python or NumPy values (its pandas
    # shim), which every source read and most user functions make: 0.3 s of CPU idle and 1-2 s
    # loaded per worker, on the first batch's critical path unless done here
    import pyarrow as pa

    pa.array([0])

    yield from batches


def in_background(work, name: str = "sluice-background") -> Future:
    """Run ``work()`` on a daemon thread; returns its Future (result or exception)."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def start_python_workers(spark, tasks: int | None = None, passes: int = 2) -> Future:
    """Start (in the background) ``tasks`` parallel tasks of ``passes`` chained Python passes
    each: the workers a batch uses at once (a task reading a Python source holds one worker
    for the read and one for each Python pass after it). Returns a Future of the job."""
    tasks = tasks or spark.sparkContext.defaultParallelism

    def run() -> int:
        spark.sparkContext.setJobDescription("sluice: start Python workers")
        frame = spark.range(tasks, numPartitions=tasks)
        for _ in range(passes):
            frame = frame.mapInArrow(_import_runtime, frame.schema)
        return len(frame.collect())

    return in_background(run, "sluice-warmup")
