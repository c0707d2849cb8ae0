"""Run by Python at start-up in the processes Spark starts (``sluice.runtime.worker_site``):
drop Spark's zip and jar copies of an installed PySpark and Py4J from ``sys.path``.

Only entries inside the installed ``pyspark`` package are dropped (``<pyspark>/python/lib/
pyspark.zip``, ``py4j-<version>-src.zip`` when that Py4J version is installed beside it,
``<pyspark>/jars/*.jar``), and only when that package is importable from the same path: the
copies are then the package's own. Anything else is left as Spark set it. Kept to the
standard library and a few file checks: it runs before every Python process of a job.
"""

import os
import sys


def _installed_pyspark(entry: str) -> str | None:
    """The installed pyspark package directory ``entry`` lies in, if it is one on the path."""
    parent = os.path.dirname(entry)
    if entry.endswith(".zip") and parent.endswith(os.path.join("python", "lib")):
        package = os.path.dirname(os.path.dirname(parent))
    elif entry.endswith(".jar") and os.path.basename(parent) == "jars":
        package = os.path.dirname(parent)
    else:
        return None
    if os.path.basename(package) != "pyspark" or not os.path.isfile(os.path.join(package, "__init__.py")):
        return None
    return package if os.path.dirname(package) in sys.path else None


def _redundant(entry: str) -> bool:
    package = _installed_pyspark(entry)
    if package is None:
        return False
    name = os.path.basename(entry)
    if name.startswith("py4j-") and name.endswith("-src.zip"):  # Py4J installed beside it, same version
        version = name[len("py4j-") : -len("-src.zip")]
        site = os.path.dirname(package)
        return os.path.isdir(os.path.join(site, "py4j")) and os.path.isdir(os.path.join(site, f"py4j-{version}.dist-info"))
    return name == "pyspark.zip" or name.endswith(".jar")


def prefer_installed_pyspark() -> None:
    for entry in [e for e in sys.path if _redundant(e)]:
        sys.path.remove(entry)
        sys.path_importer_cache.pop(entry, None)


def _chain() -> None:
    """Run the ``sitecustomize`` this one shadows, if the environment has one."""
    from importlib.machinery import PathFinder

    here = os.path.dirname(os.path.abspath(__file__))
    spec = PathFinder.find_spec("sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != here])
    if spec is not None and spec.loader is not None:
        module = type(sys)("sitecustomize")
        module.__file__ = spec.origin
        spec.loader.exec_module(module)


prefer_installed_pyspark()
_chain()
