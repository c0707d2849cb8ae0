"""What ``sluice run`` ships to executors: the modules and packages beside the pipeline file
(and, for a file inside a package, those beside its top package), nothing else."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

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
    assert names(data) == [
        "helpers.py",
        "lib/__init__.py",
        "lib/deep/__init__.py",
        "lib/deep/more.py",
        "lib/units.py",
        "pipeline.py",
    ]
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
        "app/__init__.py",
        "app/jobs/__init__.py",
        "app/jobs/helpers.py",
        "app/jobs/pipeline.py",
        "helpers.py",
        "pipeline.py",
        "setup_notes.py",
    ]


def test_nothing_to_ship_gives_none(tmp_path):
    (tmp_path / "empty").mkdir()
    assert code_zip(str(tmp_path / "empty")) is None


def test_shipped_code_never_comes_from_a_directory_others_can_write(tmp_path, monkeypatch):
    """Another local user who made the shared directory first (open to all) or planted a zip
    under the name the code hashes to cannot have it run in the executors."""
    import hashlib
    import os
    import stat
    import tempfile

    from sluice.runtime.shipping import stage_zip

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    data = b"PK the real code"
    shared = tmp_path / f"sluice-code-{os.getuid()}"
    shared.mkdir()
    shared.chmod(0o777)  # as a directory another user made for everyone would be
    planted = shared / f"pipeline-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    planted.write_bytes(b"PK evil code")
    target = stage_zip(data)
    assert os.path.dirname(target) != str(shared)
    assert Path(target).read_bytes() == data
    mode = os.stat(os.path.dirname(target)).st_mode
    assert stat.S_IMODE(mode) == 0o700


def test_a_planted_zip_in_the_private_directory_is_replaced_not_reused(tmp_path, monkeypatch):
    import hashlib
    import os
    import stat
    import tempfile

    from sluice.runtime.shipping import stage_zip

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    data = b"PK the real code"
    first = stage_zip(data)
    directory = os.path.dirname(first)
    assert directory == str(tmp_path / f"sluice-code-{os.getuid()}")
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(first).st_mode) & 0o077 == 0
    assert stage_zip(data) == first  # the same bytes: reused
    with open(first, "wb") as f:
        f.write(b"PK tampered, same name")
    assert first == os.path.join(directory, f"pipeline-{hashlib.sha256(data).hexdigest()[:16]}.zip")
    assert stage_zip(data) == first and Path(first).read_bytes() == data
    os.remove(first)
    os.symlink(str(tmp_path / "elsewhere"), first)  # a link under the name is not reused either
    assert stage_zip(data) == first and not os.path.islink(first) and Path(first).read_bytes() == data
