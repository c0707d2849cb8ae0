"""Small file helpers over pyarrow.fs, so the checkpoint can be a local path or any URI."""

from __future__ import annotations

import os
import uuid

import pyarrow.fs as pafs


def filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path) for a local path or a URI such as file:///x, s3://b/x, hdfs://..."""
    if "://" in root:
        return pafs.FileSystem.from_uri(root)
    return pafs.LocalFileSystem(), os.path.abspath(root)


def write_atomic(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write a whole file so readers see the old content or the new one, never a part."""
    parent = path.rsplit("/", 1)[0]
    fs.create_dir(parent, recursive=True)
    tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
    with fs.open_output_stream(tmp) as out:
        out.write(data)
    fs.move(tmp, path)


def read_bytes(fs: pafs.FileSystem, path: str) -> bytes | None:
    try:
        with fs.open_input_stream(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def list_files(fs: pafs.FileSystem, directory: str) -> list[str]:
    """Paths of the files directly in ``directory`` (sorted; none if it doesn't exist)."""
    infos = fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File and not i.base_name.startswith("."))
