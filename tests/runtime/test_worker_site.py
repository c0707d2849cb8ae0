"""Spark's Python processes import the installed PySpark, not Spark's zip copies of it
(``runtime.worker_site``): a worker would otherwise compile PySpark from source as it starts
and re-read a 6,000-entry jar at its first task."""

from __future__ import annotations

import os
import subprocess
import sys

from sluice.runtime.worker_site import DIRECTORY


def _layout(root, with_py4j: bool = True):
    """A site directory holding an installed pyspark package with Spark's copies inside it."""
    site = root / "site"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    (site / "pyspark" / "jars").mkdir()
    if with_py4j:
        (site / "py4j").mkdir()
        (site / "py4j-0.10.9.9.dist-info").mkdir()
    paths = {"zip": lib / "pyspark.zip", "py4j": lib / "py4j-0.10.9.9-src.zip", "jar": site / "pyspark" / "jars" / "core.jar"}
    for path in paths.values():
        path.write_bytes(b"")
    return site, {k: str(v) for k, v in paths.items()}


def _path_of_a_process(pythonpath: list[str]) -> list[str]:
    """sys.path of a fresh interpreter started as Spark starts its Python processes."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    out = subprocess.run(
        [sys.executable, "-c", "import sys; print('\\n'.join(sys.path))"], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def test_spark_copies_of_an_installed_pyspark_leave_the_path(tmp_path):
    site, copies = _layout(tmp_path)
    path = _path_of_a_process([copies["zip"], copies["py4j"], copies["jar"], DIRECTORY, str(site)])
    assert not set(copies.values()) & set(path)
    assert str(site) in path and DIRECTORY in path


def test_copies_without_an_installed_package_beside_them_stay(tmp_path):
    # no py4j installed beside pyspark: its zip is the only Py4J there is
    site, copies = _layout(tmp_path, with_py4j=False)
    path = _path_of_a_process([copies["zip"], copies["py4j"], DIRECTORY, str(site)])
    assert copies["py4j"] in path and copies["zip"] not in path
    # the installed package is not on the path (a cluster's worker with only Spark's copies)
    path = _path_of_a_process([copies["zip"], copies["py4j"], copies["jar"], DIRECTORY])
    assert {copies["zip"], copies["py4j"], copies["jar"]} <= set(path)


def test_a_sitecustomize_of_the_environment_still_runs(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITE_RAN'] = '1'\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([DIRECTORY, str(other)])}
    out = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('OTHER_SITE_RAN'))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "1"


def test_spark_workers_import_the_installed_pyspark(spark):
    def probe(_):
        import sys

        import pyspark

        yield (pyspark.__file__, [p for p in sys.path if p.endswith((".zip", ".jar")) and "pyspark" in p])

    origin, copies = spark.sparkContext.parallelize([0], 1).mapPartitions(probe).collect()[0]
    assert ".zip" not in origin
    assert copies == []
