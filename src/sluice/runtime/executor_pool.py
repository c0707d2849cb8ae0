"""The executors a running SparkSession has, and how many it holds on a standalone cluster.

``executor_infos`` describes them for every batch's metrics (id, cores, since when, host,
storage memory); ``ExecutorPool`` adds and releases them between batches through the JVM
SparkContext, the actuator of the control loop's ``executors`` action.

What Spark 4.3 allows, checked on a standalone master started from the wheel
(``runtime.cluster.LocalCluster``):

- Without dynamic allocation a standalone application takes an executor on every worker with
  free cores when it starts (its executor limit is unbounded).
- ``SparkContext.killExecutors(ids)`` releases executors (force: they are killed even when
  busy; Sluice calls it between batches) and lowers the application's target by one each.
  But the scheduler backend counts that target from its own requests: killing an executor
  the application got at start, before any request, sets the target to 0, and a later
  ``requestExecutors(1)`` then asks for 1 *in total*, which the executors left already
  satisfy: nothing is added. ``requestTotalExecutors(n, 0, {})`` sets the target absolutely,
  so the pool sets it to what it holds when it attaches, and uses it for every change.
- ``killExecutors`` is refused while dynamic allocation is on (Spark's own allocation
  manager owns the executors then), so the pool needs ``spark.dynamicAllocation.enabled``
  false, Spark's default.
- A requested executor joins when its JVM has started and registered (seconds; 10-20 s on a
  small 2-core machine); the pool does not block the next batch for it unless asked to:
  Spark spreads tasks onto it from the batch after it registers.
- Local Spark (``local[n]``) has a fixed set of task slots in the driver: nothing to add or
  release, and the pool refuses with a clear error.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from sluice.core.resources import Resources, held_executors
from sluice.errors import ConfigError


def executor_infos(spark) -> list[dict]:
    """One dict per executor of the session (the driver among them, id ``driver``): its id,
    cores, when it was added (epoch s, ``since``), the tasks it has run so far, its host and
    the storage memory it uses, from the JVM's application status store (no Spark job).
    Recorded in every batch's metrics: the executors held, which the cost model bills.

    The store's summaries come over as one JSON text (Spark's own Jackson mapper, as its REST
    API serves them): a Py4J call per field of every executor cost some 18 ms a batch with
    one executor, about 1 % of a keyed_throughput batch; one call costs about 5 ms."""
    jsc = spark.sparkContext._jsc.sc()
    try:
        text = _json_mapper(spark).writeValueAsString(jsc.statusStore().executorList(True))
    except Exception:  # a Spark without the store API or Jackson's Scala module: call by call
        return _executor_infos_by_call(spark)
    return [
        {
            "id": str(s["id"]),
            "host": str(s["hostPort"]),
            "cores": int(s["totalCores"]),
            "since": round(s["addTime"] / 1000.0, 3),
            "tasks": int(s["totalTasks"]),
            "storage_mb": round(s["memoryUsed"] / 2**20, 1),
        }
        for s in json.loads(text)
    ]


def _json_mapper(spark):
    """Jackson's ObjectMapper with the Scala module, made once per SparkContext."""
    sc = spark.sparkContext
    mapper = getattr(sc, "_sluice_json_mapper", None)
    if mapper is None:
        jvm = sc._jvm
        mapper = jvm.com.fasterxml.jackson.databind.ObjectMapper()
        scala_module = getattr(jvm.com.fasterxml.jackson.module.scala, "DefaultScalaModule$")
        mapper.registerModule(getattr(scala_module, "MODULE$"))
        sc._sluice_json_mapper = mapper
    return mapper


def _executor_infos_by_call(spark) -> list[dict]:
    jsc = spark.sparkContext._jsc.sc()
    try:
        summaries = _as_list(spark, jsc.statusStore().executorList(True))
    except Exception:  # an older Spark without the store API: hosts only
        summaries = None
    if summaries is None:
        return [
            {
                "host": f"{e.host()}:{e.port()}",
                "storage_mb": round((e.usedOnHeapStorageMemory() + e.usedOffHeapStorageMemory()) / 2**20, 1),
            }
            for e in jsc.statusTracker().getExecutorInfos()
        ]
    return [
        {
            "id": str(s.id()),
            "host": str(s.hostPort()),
            "cores": int(s.totalCores()),
            "since": round(s.addTime().getTime() / 1000.0, 3),
            "tasks": int(s.totalTasks()),
            "storage_mb": round(s.memoryUsed() / 2**20, 1),
        }
        for s in summaries
    ]


def is_standalone(master: str) -> bool:
    return master.startswith("spark://")


@dataclass(frozen=True)
class Held:
    """What a pool holds: the executors registered now, and the count asked for (None: none
    asked yet, Spark's own allocation holds)."""

    executors: tuple[dict, ...]
    target: int | None

    @property
    def count(self) -> int:
        return len(self.executors)

    @property
    def cores(self) -> int:
        return sum(int(e.get("cores", 0)) for e in self.executors)


class ExecutorPool:
    """Adds and releases a standalone application's executors between batches.

    ``set_total(n)`` makes the application hold ``n`` executors: more are requested from the
    master (they join when they register), surplus ones are killed, the newest first (state
    lives in the checkpoint, not in an executor, so any may go). ``max_executors``: what the
    cluster can grant (its workers' cores over the cores of one executor); requests beyond it
    are capped, not left pending. Unknown (None), it is the number of executors the
    application got when it started, once that number has settled: without dynamic
    allocation a standalone application starts with an executor on every worker it can use.
    """

    def __init__(self, spark, max_executors: int | None = None):
        self.spark = spark
        self.master = spark.sparkContext.master
        if not is_standalone(self.master):
            raise ConfigError(
                f"executors: the session runs on {self.master!r}, whose task slots are fixed when it "
                f"starts; adding or releasing executors needs a Spark standalone cluster "
                f"(master spark://host:port, e.g. `sluice cluster up`)"
            )
        conf = spark.sparkContext.getConf()
        if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
            raise ConfigError(
                "executors: spark.dynamicAllocation.enabled is on, so Spark's allocation manager owns "
                "the executors (killExecutors is refused); turn it off to let Sluice's controller "
                "hold them"
            )
        self._max = max_executors
        self.target: int | None = None

    # ---- reading ---------------------------------------------------------------------------
    def held(self) -> Held:
        return Held(tuple(held_executors(executor_infos(self.spark))), self.target)

    @property
    def max_executors(self) -> int:
        if self._max is None:
            self._max = max(self.settle().count, 1)
        return self._max

    def settle(self, stable_s: float = 5.0, timeout_s: float = 120.0) -> Held:
        """Wait until at least one executor is registered and the count has not changed for
        ``stable_s`` (executors of a starting application register one by one)."""
        deadline = time.time() + timeout_s
        held = self.held()
        since = time.time()
        while time.time() < deadline:
            time.sleep(0.25)
            now = self.held()
            if now.count != held.count:
                held, since = now, time.time()
            elif held.count >= 1 and time.time() - since >= stable_s:
                break
        return held

    # ---- changing --------------------------------------------------------------------------
    def set_total(self, n: int, wait_s: float = 0.0) -> Held:
        """Hold ``n`` executors (at least 1, at most ``max_executors``). Releases happen now;
        additions are requested now and join when they register: ``wait_s`` > 0 waits up to
        that long until exactly ``n`` are registered."""
        if n < 1:
            raise ConfigError(f"executors: a job holds at least one executor, asked for {n}")
        n = min(n, self.max_executors)
        self._release_surplus(self.held(), n)
        # the target set absolutely, after the kills lowered Spark's own count of it
        self.target = n
        self._request_total(n)
        if wait_s > 0:
            self._hold_exactly(n, wait_s)
        return self.held()

    def _release_surplus(self, held: Held, n: int, released: frozenset[str] = frozenset()) -> set[str]:
        """Kill the newest executors beyond ``n`` (not those in ``released``, already asked
        to go); returns the ids killed."""
        alive = [e for e in held.executors if e["id"] not in released]
        surplus = len(alive) - n
        if surplus <= 0:
            return set()
        newest = sorted(alive, key=lambda e: (e.get("since", 0.0), _numeric(e["id"])))[-surplus:]
        sc = self.spark.sparkContext
        sc._jsc.sc().killExecutors(sc._jvm.PythonUtils.toSeq([e["id"] for e in newest]))
        return {e["id"] for e in newest}

    def _hold_exactly(self, n: int, timeout_s: float, settle_s: float = 3.0) -> bool:
        """Wait until exactly ``n`` executors are registered and stay so for ``settle_s``,
        releasing any beyond ``n`` that register meanwhile: when an application starts, the
        master launches an executor on every worker with free cores, and those still starting
        when the target was set register after it (not counted, so not killed, by the first
        look). False on timeout."""
        deadline = time.time() + timeout_s
        released: set[str] = set()
        steady_since: float | None = None
        while time.time() < deadline:
            held = self.held()
            if held.count > n:
                released |= self._release_surplus(held, n, frozenset(released))
                steady_since = None
            elif held.count == n:
                steady_since = steady_since or time.time()
                if time.time() - steady_since >= settle_s:
                    return True
            else:
                steady_since = None
            time.sleep(0.25)
        return self.held().count == n

    def wait_for(self, n: int, timeout_s: float) -> bool:
        """Wait until exactly ``n`` executors are registered; False on timeout."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.held().count == n:
                return True
            time.sleep(0.25)
        return self.held().count == n

    def _request_total(self, n: int) -> None:
        sc = self.spark.sparkContext
        empty = sc._jvm.PythonUtils.toScalaMap({})
        sc._jsc.sc().requestTotalExecutors(int(n), 0, empty)


class SparkExecutors:
    """The control loop's executor actuator on a standalone cluster (``control.executors``)."""

    def __init__(self, pool: ExecutorPool):
        self.pool = pool

    def resources(self) -> Resources:
        held = self.pool.held()
        per_executor = max(1, held.cores // held.count) if held.count else 1
        return Resources(
            cores=max(held.cores, 1),
            executors=held.count,
            cores_per_executor=per_executor,
            max_executors=self.pool.max_executors,
            requested=held.target,
            since=tuple(float(e.get("since", 0.0)) for e in held.executors),
        )

    def set_total(self, n: int) -> None:
        self.pool.set_total(n)


def _as_list(spark, seq) -> list:
    """A Scala Seq as a Python list (through Scala 2.13's Java converters)."""
    converters = spark.sparkContext._jvm.scala.jdk.javaapi.CollectionConverters
    return list(converters.asJava(seq))


def _numeric(executor_id: str) -> int:
    return int(executor_id) if executor_id.isdigit() else -1
