"""``sluice profile FILE.py:NAME --out model.json``: build an operator's performance model.

Runs Algorithm 1 of Shukla and Simmhan: the operator alone on one core of local Spark (a
separate ``local[1]`` process), at rising rates and thread counts, writing the model JSON that
``sluice plan`` and ``perf_model=`` use.

NAME is an operator class of FILE.py (with ``setup()`` and ``process(tuple)``), or the name of
a Python operator of the pipeline FILE.py defines (``sluice profile my_pipeline.py:parse``),
which is profiled on input sampled from the pipeline's own source
(``sluice.cli.pipeline_operator``).
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

from sluice.cli.loading import run_file
from sluice.errors import ConfigError


def register(subparsers) -> None:
    p = subparsers.add_parser("profile", help="profile an operator into a performance model")
    p.add_argument(
        "operator",
        help="FILE.py:ClassName (e.g. examples/operators/pi.py:Pi), or "
        "PIPELINE.py:OPERATOR, an operator of the pipeline that file defines",
    )
    p.add_argument("--out", required=True, help="model JSON to write")
    p.add_argument("--name", default=None, help="model name (default: the file's name)")
    p.add_argument("--kwargs", default="{}", help="JSON keyword arguments for the operator class")
    p.add_argument("--threads", default="1,2,4,8,16,32,64", help="thread counts to try, in order")
    p.add_argument("--duration", type=float, default=4.0, help="seconds per trial")
    p.add_argument("--slot-memory-mb", type=float, default=1024, help="memory of one slot")
    p.set_defaults(func=main)


def resolve_operator(target: str, kwargs: dict) -> tuple[str, dict, str | None]:
    """(``FILE.py:Class``, class keyword arguments, default model name) for the profiler: a
    class of the file as it is, or a pipeline's operator wrapped in PipelineOperator."""
    path, sep, name = target.rpartition(":")
    if not sep or not path.endswith(".py") or not name:
        raise ConfigError(f"operator {target!r}: expected FILE.py:ClassName or PIPELINE.py:OPERATOR")
    if not Path(path).exists():
        raise ConfigError(f"operator {target!r}: file {path!r} does not exist")
    namespace = run_file(path)
    if inspect.isclass(namespace.get(name)):
        return target, kwargs, None
    if "pipeline" not in namespace:
        raise ConfigError(f"{path!r} has no class {name!r} and defines no `pipeline` with such an operator")
    from sluice.cli import pipeline_operator

    pipeline_operator.PipelineOperator(str(Path(path).resolve()), name).setup()  # fail here, not in a worker
    adapter = f"{pipeline_operator.__file__}:PipelineOperator"
    return adapter, {"pipeline": str(Path(path).resolve()), "operator": name, **kwargs}, name


def main(args) -> int:
    operator, kwargs, default_name = resolve_operator(args.operator, json.loads(args.kwargs))
    cmd = [
        sys.executable,
        "-m",
        "sluice.runtime.profiler",
        operator,
        "--out",
        args.out,
        "--kwargs",
        json.dumps(kwargs),
        "--threads",
        args.threads,
        "--duration",
        str(args.duration),
        "--slot-memory-mb",
        str(args.slot_memory_mb),
    ]
    if args.name or default_name:
        cmd += ["--name", args.name or default_name]
    return subprocess.call(cmd)
