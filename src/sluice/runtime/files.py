"""Small file helpers over pyarrow.fs, so every file Sluice keeps can live on a local disk or
behind any URI pyarrow understands (``file:///x``, ``s3://bucket/x``, ``hdfs://host/x``)."""

from __future__ import annotations

import os
import posixpath
import uuid

import pyarrow as pa
import pyarrow.fs as pafs

from sluice.errors import ConfigError

# file systems with an atomic rename; on object stores a single PUT is atomic instead
_RENAMING = ("local", "hdfs", "mock")


def is_uri(location: str) -> bool:
    return "://" in location


def normalize(location: str) -> str:
    """A location every process can resolve the same way: URIs as given, a plain (possibly
    relative) path made absolute against this process's working directory."""
    location = os.fspath(location)
    if not location:
        raise ConfigError("a file location must not be empty")
    if is_uri(location):
        return location.rstrip("/")
    return os.path.abspath(location)


def join(location: str, *parts: str) -> str:
    """``location`` (a path or URI) with ``parts`` appended, '/'-separated."""
    return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts)])


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path in it) for a local path or a URI such as file:///x, s3://b/x."""
    location = normalize(location)
    if not is_uri(location):
        return pafs.LocalFileSystem(), location
    try:
        fs, path = pafs.FileSystem.from_uri(location)
    except (pa.ArrowInvalid, ValueError, OSError) as exc:
        raise ConfigError(f"cannot open {location!r} through pyarrow.fs: {exc}") from exc
    return fs, path.rstrip("/") or "/"


def write_atomic(fs: pafs.FileSystem, path: str, data: bytes | pa.Buffer) -> None:
    """Write a whole file so readers see the old content or the new one, never a part.

    File systems (local, HDFS): a hidden temporary file in the same directory, renamed over
    the target. Object stores have no rename, but a single PUT is already atomic."""
    parent, name = posixpath.split(path)
    fs.create_dir(parent, recursive=True)
    if fs.type_name not in _RENAMING:
        with fs.open_output_stream(path) as out:
            out.write(data)
        return
    tmp = f"{parent}/.{name}.tmp-{uuid.uuid4().hex}"
    with fs.open_output_stream(tmp) as out:
        out.write(data)
    fs.move(tmp, path)


def append(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Add ``data`` at the end of a file (created if missing). Object stores cannot append:
    there the file is rewritten whole, atomically (fine for the small logs Sluice keeps)."""
    fs.create_dir(posixpath.dirname(path), recursive=True)
    if fs.type_name in _RENAMING:
        with fs.open_append_stream(path) as out:
            out.write(data)
    else:
        write_atomic(fs, path, (read_bytes(fs, path) or b"") + data)


def read_bytes(fs: pafs.FileSystem, path: str) -> bytes | None:
    """The whole file, or None if there is none."""
    try:
        with fs.open_input_stream(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def list_files(fs: pafs.FileSystem, directory: str) -> list[str]:
    """Paths of the files directly in ``directory`` (sorted; none if it doesn't exist;
    hidden files, such as unfinished atomic writes, left out)."""
    infos = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File and not i.base_name.startswith("."))


def list_dirs(fs: pafs.FileSystem, directory: str) -> list[str]:
    """Paths of the directories directly in ``directory`` (sorted; none if it doesn't exist)."""
    infos = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.Directory)


def remove_dir(fs: pafs.FileSystem, directory: str) -> None:
    """Delete ``directory`` and everything under it (nothing if it doesn't exist)."""
    if fs.get_file_info(directory).type != pafs.FileType.NotFound:
        fs.delete_dir(directory)
