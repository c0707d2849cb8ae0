"""The class archive of Spark's driver JVM: recorded by the first session, used by later ones."""

from __future__ import annotations

import pytest

from sluice.runtime.session import ClassArchive, class_archive


def test_a_missing_archive_is_recorded_into_a_file_of_its_own(tmp_path):
    archive = ClassArchive(str(tmp_path / "spark.jsa"))
    options = archive.java_options()
    assert not archive.exists()
    assert f"-XX:ArchiveClassesAtExit={archive.recording}" in options
    assert archive.recording != archive.path and archive.recording.startswith(archive.path)
    assert "SharedArchiveFile" not in options


def test_an_archive_in_place_is_used(tmp_path):
    (tmp_path / "spark.jsa").write_bytes(b"archive")
    archive = ClassArchive(str(tmp_path / "spark.jsa"))
    options = archive.java_options()
    assert f"-XX:SharedArchiveFile={archive.path}" in options and "ArchiveClassesAtExit" not in options
    assert "-Xlog:cds=off" in options  # the JVM's note on an archive it cannot use stays quiet


@pytest.mark.parametrize("value", ["0", "false", "no"])
def test_the_archive_can_be_turned_off(monkeypatch, value):
    monkeypatch.setenv("SLUICE_CLASS_ARCHIVE", value)
    assert class_archive() is None


def test_archives_live_in_the_cache_directory_one_per_spark_and_java(monkeypatch, tmp_path):
    import pyspark

    monkeypatch.delenv("SLUICE_CLASS_ARCHIVE", raising=False)
    monkeypatch.setenv("SLUICE_CACHE_DIR", str(tmp_path))
    archive = class_archive()
    assert archive is not None
    assert archive.path.startswith(str(tmp_path / "class-archives"))
    assert f"spark-{pyspark.__version__}-java-" in archive.path


def test_one_process_records_at_a_time(tmp_path):
    first = ClassArchive(str(tmp_path / "spark.jsa"))
    assert "ArchiveClassesAtExit" in first.java_options() and first.records
    second = ClassArchive(str(tmp_path / "spark.jsa"))
    # the lock names this (live) process: a second start goes plain rather than pay for recording
    assert second.java_options() == "" and not second.records
    first.release_recording_lock()
    assert "ArchiveClassesAtExit" in ClassArchive(str(tmp_path / "spark.jsa")).java_options()


def test_a_dead_recorders_lock_is_taken_over(tmp_path):
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True, text=True)
    (tmp_path / "spark.jsa.recording").write_text(gone.stdout.strip())
    archive = ClassArchive(str(tmp_path / "spark.jsa"))
    assert "ArchiveClassesAtExit" in archive.java_options() and archive.records
