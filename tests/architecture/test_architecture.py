"""The layers of docs/architecture.md, checked over the import graph (``import_graph.py``):
every import, top-level or inside a function, goes down the layers; pure logic (graph,
models, plan, sim, control, api) never imports Spark, so it runs and tests without a JVM."""

import subprocess
import sys

import pytest

from import_graph import ALLOWED, LAYERS, against_the_layers, imports, layer_of

# Imports that go against the layers and are not removed yet, each with why. An entry that no
# longer occurs fails the test too, so the list only shrinks.
NOT_YET: dict[tuple[str, str], str] = {}

PURE = [
    "sluice.api",
    "sluice.graph",
    "sluice.graph.sources",
    "sluice.graph.windows",
    "sluice.models.performance",
    "sluice.models.dynamic",
    "sluice.plan.physical",
    "sluice.plan.allocation",
    "sluice.plan.mapping",
    "sluice.plan.predict",
    "sluice.plan.balancing",
    "sluice.plan.elastic",
    "sluice.sim.scenario",
    "sluice.sim.balancing_workloads",
    "sluice.sim.elastic",
    "sluice.sim.executors",
    "sluice.control.elastic",
    "sluice.control",
    "sluice.graph.constraints",
    "sluice.models.latency",
    "sluice.sim.microbatch",
    "sluice.graph.alternates",
    "sluice.graph.economics",
    "sluice.models.economics",
]


def test_pure_packages_do_not_import_pyspark():
    code = (
        "import sys, importlib\n"
        f"for m in {PURE!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_api_builds_specs_and_never_imports_the_runtime():
    """The fluent API makes operators (kinds and their typed specs); kernels are the runtime's. Only
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


# The layers without Spark import Sluice modules at the top: an import inside a function there
# would only hide a cycle or defer a cheap module. The ones left, each with why:
LOCAL_IN_PURE_LAYERS: set[tuple[str, str]] = set()
PURE_LAYERS = ("core", "graph", "models", "plan", "control", "sim")


@pytest.fixture(scope="module")
def edges():
    return imports()


def test_every_import_goes_down_the_layers(edges):
    wrong = [e for e in against_the_layers(edges) if (e.importer, e.imported) not in NOT_YET]
    assert not wrong, "imports against the layers (docs/architecture.md):\n" + "\n".join(map(str, wrong))


def test_the_allow_list_holds_only_imports_that_still_exist(edges):
    present = {(e.importer, e.imported) for e in against_the_layers(edges)}
    assert not set(NOT_YET) - present, f"remove from NOT_YET: {sorted(set(NOT_YET) - present)}"


def test_runtime_and_control_never_import_each_other(edges):
    """The data plane and the control plane meet only in core (the metrics record, resources,
    the checkpoint) and in the job that wires them."""
    crossing = [e for e in edges if {layer_of(e.importer), layer_of(e.imported)} == {"runtime", "control"}]
    assert not crossing, "\n".join(map(str, crossing))


def test_every_module_has_a_layer_and_the_layers_only_look_down(edges):
    assert {layer_of(e.importer) for e in edges} <= set(LAYERS)
    for layer, allowed in ALLOWED.items():
        assert all(LAYERS.index(a) < LAYERS.index(layer) for a in allowed), layer


def test_the_checker_sees_function_local_imports():
    """A violation hidden inside a function is caught: the checker is run on a module that
    makes one."""
    import ast

    from import_graph import Import, _walk

    tree = ast.parse("def f():\n    from sluice.runtime import session\n")
    found: list[Import] = []
    _walk(tree, "sluice.control.x", "sluice.control", {"sluice.runtime.session": None}, False, found)
    assert [str(e) for e in against_the_layers(found)] == ["sluice.control.x -> sluice.runtime.session (line 2, function-local)"]


def test_the_layers_without_spark_import_at_the_top(edges):
    local = {(e.importer, e.imported) for e in edges if e.local and layer_of(e.importer) in PURE_LAYERS}
    assert local <= LOCAL_IN_PURE_LAYERS, f"move to the top of the module: {sorted(local - LOCAL_IN_PURE_LAYERS)}"


def test_no_function_local_import_hides_a_cycle(edges):
    """An import inside a function whose target imports the importer back (at the top, or
    through other top-level imports) is a cycle kept out of sight; there is none."""
    top: dict[str, set[str]] = {}
    for e in edges:
        if not e.local:
            top.setdefault(e.importer, set()).add(e.imported)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            module = todo.pop()
            if module == goal:
                return True
            if module not in seen:
                seen.add(module)
                todo.extend(top.get(module, ()))
        return False

    hidden = [e for e in edges if e.local and e.imported != e.importer and reaches(e.imported, e.importer)]
    assert not hidden, "function-local imports that hide a cycle:\n" + "\n".join(map(str, hidden))
