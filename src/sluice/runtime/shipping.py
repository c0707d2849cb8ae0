"""Shipping a pipeline's own Python code to Spark's executors.

Functions defined in a pipeline file travel by value (cloudpickle), but what they import
from modules next to that file travels by name: an executor must be able to import it. On
one machine the driver's ``sys.path`` happens to reach them; on a cluster only what is shipped
does. ``ship_code`` zips the modules and packages beside the pipeline file and hands the zip
to ``SparkContext.addPyFile``, so executors need neither the driver's working directory nor
its ``PYTHONPATH``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
import tempfile
import zipfile

# directories never shipped, even when they look like packages
_SKIP = {"__pycache__", "node_modules", "site-packages"}


def code_roots(path: str) -> list[str]:
    """The directories whose modules ``path`` (a pipeline file or a directory) can import:
    its own directory and, if that is inside a package, the directory above its top package
    (so ``from mypackage.helpers import f`` works as well as ``import helpers``)."""
    directory = os.path.abspath(path if os.path.isdir(path) else os.path.dirname(path) or ".")
    roots = [directory]
    top = directory
    while os.path.exists(os.path.join(top, "__init__.py")):
        top = os.path.dirname(top)
    if top != directory:
        roots.append(top)
    return roots


def _modules(root: str) -> list[tuple[str, str]]:
    """(file, name in the zip) of the top-level modules of ``root`` and of every package
    under it."""
    out = []
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        if name.endswith(".py") and name != "__init__.py" and os.path.isfile(full):
            out.append((full, name))
        elif _is_package(full, name):
            for directory, dirs, files in os.walk(full):
                dirs[:] = sorted(d for d in dirs if _is_package(os.path.join(directory, d), d))
                for f in sorted(files):
                    if f.endswith(".py"):
                        out.append((os.path.join(directory, f), os.path.relpath(os.path.join(directory, f), root)))
    return out


def _is_package(full: str, name: str) -> bool:
    return (
        os.path.isdir(full)
        and not name.startswith(".")
        and name not in _SKIP
        and os.path.exists(os.path.join(full, "__init__.py"))
    )


def code_zip(path: str) -> bytes | None:
    """A zip of the modules ``path``'s pipeline can import locally (None if there are none)."""
    entries: dict[str, str] = {}
    for root in code_roots(path):
        for full, name in _modules(root):
            entries.setdefault(name, full)
    if not entries:
        return None
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(entries):
            # a fixed date: the same code gives the same zip, hence the same name below
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            with open(entries[name], "rb") as f:
                z.writestr(info, f.read(), zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def ship_code(spark, path: str) -> str | None:
    """Make the modules beside ``path`` importable on every executor; returns the zip shipped.

    The zip is named by its content: shipping the same code again is a no-op for Spark, and
    changed code gets a new name (Spark refuses one name for two different files)."""
    data = code_zip(path)
    if data is None:
        return None
    target = stage_zip(data)
    spark.sparkContext.addPyFile(target)
    return target


def stage_zip(data: bytes) -> str:
    """A file holding ``data``, in a directory only this user can write, named by its hash.

    Whatever this file holds runs in every executor, so nobody else may have put it there:
    the directory (``$TMPDIR/sluice-code-<uid>``) must be this user's own, not a link, and
    closed to others (0700); otherwise a fresh private directory is made for this process.
    A file found under the name is reused only when its bytes are exactly ``data``."""
    directory = private_dir(os.path.join(tempfile.gettempdir(), f"sluice-code-{os.getuid()}"))
    target = os.path.join(directory, f"pipeline-{hashlib.sha256(data).hexdigest()[:16]}.zip")
    if _holds(target, data):
        return target
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".pipeline-", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
    return target


def private_dir(path: str) -> str:
    """``path`` if it is (or can be made) a directory of this user's that no one else can
    write or read, else a new private temporary directory."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    if _is_private(path):
        return path
    return tempfile.mkdtemp(prefix="sluice-code-")  # 0700, a name nobody could foresee


def _is_private(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _holds(path: str, data: bytes) -> bool:
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size != len(data):
            return False
        with open(path, "rb") as f:
            return f.read() == data
    except OSError:
        return False
