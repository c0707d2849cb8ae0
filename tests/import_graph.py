"""Sluice's import graph, read from the AST of every module under src/sluice: each import
statement (top-level, inside a function, or under ``if TYPE_CHECKING``) as an edge from the
importing module to the Sluice module it names, and the layer each module belongs to.

``tests/architecture/test_architecture.py`` checks the edges against the layers; run this file to print
the package-level edges and the count of function-local imports::

    .venv/bin/python tests/import_graph.py
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

# The layers, lowest first; a module may import its own layer and the layers in ALLOWED[its
# layer]. docs/architecture.md draws them.
LAYERS = ("core", "graph", "models", "plan", "runtime", "control", "sim", "job", "ui", "api", "examples", "cli")
_BELOW_RUNTIME = {"core", "graph", "models", "plan"}
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "graph": {"core"},
    "models": {"core", "graph"},
    "plan": {"core", "graph", "models"},
    # the data plane and the control plane are siblings: neither imports the other
    "runtime": _BELOW_RUNTIME,
    "control": _BELOW_RUNTIME,
    # the simulators drive the real policies on modelled batches, never Spark
    "sim": _BELOW_RUNTIME | {"control"},
    # the composition root: wires the runtime, the control plane, the sources and the lease
    "job": _BELOW_RUNTIME | {"runtime", "control"},
    "ui": _BELOW_RUNTIME | {"runtime", "control"},
    "api": _BELOW_RUNTIME | {"runtime", "control", "job"},
    "examples": _BELOW_RUNTIME | {"runtime", "control", "sim", "job", "api"},
    "cli": set(LAYERS) - {"cli"},
}

# Modules whose layer is not their package's.
_MODULE_LAYERS = {
    "sluice.errors": "core",
    "sluice.credentials": "core",
    # what `import sluice` offers: facades over api, graph and the runtime's sinks and readers
    "sluice": "api",
    "sluice.agg": "api",
    "sluice.windows": "api",
    "sluice.sources": "api",
    "sluice.sinks": "api",
    "sluice.state": "api",
    "sluice.testing": "api",
    "sluice.demo": "examples",
    "sluice.__main__": "cli",
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if module == "sluice":
        return _MODULE_LAYERS[module]
    for n in range(len(parts), 1, -1):
        found = _MODULE_LAYERS.get(".".join(parts[:n]))
        if found is not None:
            return found
    return parts[1]


@dataclass(frozen=True)
class Import:
    importer: str  # the importing module, e.g. sluice.control.swap
    imported: str  # the Sluice module it names, e.g. sluice.core.checkpoint
    line: int
    local: bool  # inside a function (runs when the function is called)

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} (line {self.line}{', function-local' if self.local else ''})"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "sluice").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports() -> list[Import]:
    known = modules()
    edges: list[Import] = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        _walk(ast.parse(path.read_text()), name, package, known, False, edges)
    return edges


def _walk(node: ast.AST, name: str, package: str, known: dict[str, Path], local: bool, out: list[Import]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import):
            out += [Import(name, a.name, child.lineno, local) for a in child.names if a.name.split(".")[0] == "sluice"]
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:  # relative: resolve against the importing package
                up = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                base = ".".join(up + ([child.module] if child.module else []))
            if base.split(".")[0] == "sluice":
                # `from sluice.runtime import files` names the module sluice.runtime.files
                targets = {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in child.names}
                out += [Import(name, t, child.lineno, local) for t in sorted(targets)]
        inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        _walk(child, name, package, known, inner, out)


def against_the_layers(edges: list[Import]) -> list[Import]:
    return [
        e
        for e in edges
        if layer_of(e.importer) != layer_of(e.imported) and layer_of(e.imported) not in ALLOWED[layer_of(e.importer)]
    ]


def function_local_count(edges: list[Import]) -> int:
    """Function-local import statements of Sluice modules (one per statement and module)."""
    return len({(e.importer, e.line) for e in edges if e.local})


if __name__ == "__main__":
    edges = imports()
    by_package = Counter(
        (layer_of(e.importer), layer_of(e.imported), "local" if e.local else "top")
        for e in edges
        if layer_of(e.importer) != layer_of(e.imported)
    )
    for (a, b, where), n in sorted(by_package.items()):
        print(f"{a:>9} -> {b:<9} {where:<5} {n}")
    print(f"function-local imports: {function_local_count(edges)}")
    wrong = [f"  {e}" for e in against_the_layers(edges)]
    print("against the layers:", *(wrong or ["  none"]), sep="\n")
