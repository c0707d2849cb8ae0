"""Small file helpers over pyarrow.fs, so every file Sluice keeps can live on a local disk or
behind any URI pyarrow understands (``file:///x``, ``s3://bucket/x``, ``hdfs://host/x``)."""

from __future__ import annotations

import contextlib
import os
import posixpath
import uuid

import pyarrow as pa
import pyarrow.fs as pafs

from sluice.errors import ConfigError, storage_problem

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


def write_atomic(fs: pafs.FileSystem, path: str, data: bytes | pa.Buffer, durable: bool = False) -> None:
    """Write a whole file so readers see the old content or the new one, never a part.

    File systems (local, HDFS): a hidden temporary file in the same directory, renamed over
    the target; a write that fails (disk full) removes its temporary file. Object stores have
    no rename, but a single PUT is already atomic.

    ``durable``: on a local disk the file and its directory are synced (``fsync``) before
    this returns, so the file survives a power loss, not only a crash of the process (the
    commit records of batches are written so)."""
    parent, name = posixpath.split(path)
    fs.create_dir(parent, recursive=True)
    if fs.type_name not in _RENAMING:
        with fs.open_output_stream(path) as out:
            out.write(data)
        return
    tmp = f"{parent}/.{name}.tmp-{uuid.uuid4().hex}"
    try:
        if durable and fs.type_name == "local":
            _write_synced(tmp, data)
        else:
            with fs.open_output_stream(tmp) as out:
                out.write(data)
        fs.move(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            fs.delete_file(tmp)
        problem = storage_problem(e, str(e), path) if isinstance(e, OSError) else None
        if problem is not None:
            raise problem from e
        raise
    if durable and fs.type_name == "local":
        _sync_dir(parent)


def _write_synced(path: str, data: bytes | pa.Buffer) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, memoryview(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(directory: str) -> None:
    """Sync a directory, so a rename in it is durable (Linux; a no-op where directories
    cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def append(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Add ``data`` at the end of a file (created if missing). Object stores cannot append:
    there the file is rewritten whole, atomically (fine for the small logs Sluice keeps).

    A file whose last line was cut short (a crash mid-append) gets a line break first, so the
    new line starts a line of its own and readers skip only the torn one. An append the disk
    refuses (full) is cut off again on a local disk, so it leaves no torn line to warn of."""
    fs.create_dir(posixpath.dirname(path), recursive=True)
    if fs.type_name in _RENAMING:
        if _ends_torn(fs, path):
            data = b"\n" + data
        size = fs.get_file_info(path).size or 0
        try:
            with fs.open_append_stream(path) as out:
                out.write(data)
        except OSError as e:
            problem = storage_problem(e, str(e), path)
            if problem is not None:
                if fs.type_name == "local":
                    with contextlib.suppress(OSError):
                        os.truncate(path, size)
                raise problem from e
            raise
    else:
        old = read_bytes(fs, path) or b""
        write_atomic(fs, path, old + (b"\n" if old and not old.endswith(b"\n") else b"") + data)


def _ends_torn(fs: pafs.FileSystem, path: str) -> bool:
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File or not info.size:
        return False
    with fs.open_input_file(path) as f:
        f.seek(info.size - 1)
        return f.read(1) != b"\n"


def read_tail(fs: pafs.FileSystem, path: str, max_bytes: int) -> tuple[bytes, bool]:
    """The last ``max_bytes`` of a file, starting at a line (None-safe: b"" if missing), and
    whether lines before them were left out."""
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        return b"", False
    if info.size <= max_bytes:
        return read_bytes(fs, path) or b"", False
    with fs.open_input_file(path) as f:
        f.seek(info.size - max_bytes)
        data = f.read(max_bytes)
    cut = data.find(b"\n")
    return (data[cut + 1 :] if cut >= 0 else b""), True


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
