"""Loading the Python files the commands are given: ``sluice run``, ``check``, ``plan`` and
``profile`` all run a file the same way, and read its ``pipeline`` the same way."""

from __future__ import annotations

import os
import runpy
import sys

from sluice.api import Pipeline
from sluice.errors import ConfigError


def run_file(path: str) -> dict:
    """Run the Python file ``path`` (as ``__sluice__``, not ``__main__``) and return what it
    defines. Its local imports resolve beside it, from any working directory, as
    ``python FILE`` does; executors get the same modules shipped (``runtime.shipping``)."""
    if not os.path.exists(path):
        raise ConfigError(f"no such pipeline file: {path}")
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return runpy.run_path(path, run_name="__sluice__")


def load_pipeline(path: str) -> Pipeline:
    """The ``pipeline`` variable of a Python file (a sluice.Pipeline)."""
    pipeline = run_file(path).get("pipeline")
    if not isinstance(pipeline, Pipeline):
        raise ConfigError(f"{path} must define a variable `pipeline` holding a sluice.Pipeline")
    return pipeline
