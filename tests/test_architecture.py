"""The layering DESIGN.md asks for: pure logic (graph, models, plan, sim, api) never imports
Spark, so it runs and tests without a JVM."""

import subprocess
import sys

PURE = ["sluice.api", "sluice.graph", "sluice.graph.sources", "sluice.graph.windows", "sluice.models.performance",
        "sluice.models.dynamic", "sluice.plan.physical", "sluice.plan.allocation", "sluice.plan.mapping",
        "sluice.plan.predict", "sluice.plan.balancing", "sluice.plan.elastic", "sluice.sim.scenario",
        "sluice.sim.balancing_workloads", "sluice.sim.elastic", "sluice.sim.executors", "sluice.control.elastic",
        "sluice.control", "sluice.graph.constraints", "sluice.models.latency", "sluice.sim.microbatch",
        "sluice.graph.alternates", "sluice.graph.economics", "sluice.models.economics"]


def test_pure_packages_do_not_import_pyspark():
    code = ("import sys, importlib\n"
            f"for m in {PURE!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
