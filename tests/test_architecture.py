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


def test_the_api_builds_specs_and_never_imports_the_runtime():
    """The fluent API makes operators (kind names and params); kernels are the runtime's. Only
    ``Pipeline.run`` (api/pipeline.py) reaches into the runtime, to run the job."""
    import ast
    from pathlib import Path

    import sluice.api

    for path in Path(sluice.api.__file__).parent.glob("*.py"):
        if path.name == "pipeline.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("sluice.runtime"), f"{path.name} imports {node.module}"
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("sluice.runtime") for a in node.names), path.name


def test_every_python_and_keyed_kind_names_a_kernel_factory_the_runtime_has():
    from sluice.graph.kinds import KEYED, KINDS, PYTHON
    from sluice.runtime.kernels.factory import _resolve

    for kind in KINDS.values():
        if kind.family in (PYTHON, KEYED):
            assert callable(_resolve(kind.kernel)), kind.name
