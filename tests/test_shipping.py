"""What ``sluice run`` ships to executors: the modules and packages beside the pipeline file
(and, for a file inside a package, those beside its top package), nothing else."""

from __future__ import annotations

import io
import zipfile

from sluice.runtime.shipping import code_roots, code_zip


def names(data: bytes | None) -> list[str]:
    return sorted(zipfile.ZipFile(io.BytesIO(data)).namelist()) if data else []


def write(path, text: str = "x = 1\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_modules_and_packages_beside_the_pipeline_are_zipped(tmp_path):
    write(tmp_path / "pipeline.py")
    write(tmp_path / "helpers.py")
    write(tmp_path / "lib" / "__init__.py")
    write(tmp_path / "lib" / "units.py")
    write(tmp_path / "lib" / "deep" / "__init__.py")
    write(tmp_path / "lib" / "deep" / "more.py")
    write(tmp_path / "lib" / "notes" / "plain.py")  # not a package: not importable as lib.notes
    write(tmp_path / "data" / "readings.py")  # a directory, not a package
    write(tmp_path / "readings.csv", "a,b\n")
    write(tmp_path / "lib" / "__pycache__" / "__init__.py")
    write(tmp_path / ".venv" / "__init__.py")
    data = code_zip(str(tmp_path / "pipeline.py"))
    assert names(data) == ["helpers.py", "lib/__init__.py", "lib/deep/__init__.py", "lib/deep/more.py",
                           "lib/units.py", "pipeline.py"]
    assert code_zip(str(tmp_path / "pipeline.py")) == data  # same code, same zip (same name for Spark)


def test_a_pipeline_inside_a_package_ships_its_top_package(tmp_path):
    write(tmp_path / "project" / "setup_notes.py")
    write(tmp_path / "project" / "app" / "__init__.py")
    write(tmp_path / "project" / "app" / "jobs" / "__init__.py")
    write(tmp_path / "project" / "app" / "jobs" / "pipeline.py")
    write(tmp_path / "project" / "app" / "jobs" / "helpers.py")
    pipeline = tmp_path / "project" / "app" / "jobs" / "pipeline.py"
    assert code_roots(str(pipeline)) == [str(tmp_path / "project" / "app" / "jobs"), str(tmp_path / "project")]
    assert names(code_zip(str(pipeline))) == [
        "app/__init__.py", "app/jobs/__init__.py", "app/jobs/helpers.py", "app/jobs/pipeline.py",
        "helpers.py", "pipeline.py", "setup_notes.py"]


def test_nothing_to_ship_gives_none(tmp_path):
    (tmp_path / "empty").mkdir()
    assert code_zip(str(tmp_path / "empty")) is None
