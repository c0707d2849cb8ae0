"""``sluice profile FILE.py:Class --out model.json``: build an operator's performance model.

Runs Algorithm 1 of Shukla and Simmhan: the operator alone on one core of local Spark (a
separate ``local[1]`` process), at rising rates and thread counts, writing the model JSON that
``sluice plan`` and ``perf_model=`` use.
"""

from __future__ import annotations

import subprocess
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("profile", help="profile an operator into a performance model")
    p.add_argument("operator", help="FILE.py:ClassName, e.g. examples/operators/pi.py:Pi")
    p.add_argument("--out", required=True, help="model JSON to write")
    p.add_argument("--name", default=None, help="model name (default: the file's name)")
    p.add_argument("--kwargs", default="{}", help="JSON keyword arguments for the operator class")
    p.add_argument("--threads", default="1,2,4,8,16,32,64", help="thread counts to try, in order")
    p.add_argument("--duration", type=float, default=4.0, help="seconds per trial")
    p.add_argument("--slot-memory-mb", type=float, default=1024, help="memory of one slot")
    p.set_defaults(func=main)


def main(args) -> int:
    cmd = [sys.executable, "-m", "sluice.control.profiler", args.operator, "--out", args.out,
           "--kwargs", args.kwargs, "--threads", args.threads, "--duration", str(args.duration),
           "--slot-memory-mb", str(args.slot_memory_mb)]
    if args.name:
        cmd += ["--name", args.name]
    return subprocess.call(cmd)
