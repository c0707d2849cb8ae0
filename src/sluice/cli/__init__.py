"""Sluice runs streaming pipelines written in Python on Apache Spark, and keeps them within the
goals you set (a latency bound, an input rate, a budget) while they run.

Start with `sluice check PIPELINE.py` (validates it in a second, without Spark), then
`sluice run PIPELINE.py --checkpoint DIR`; `sluice status DIR` and `sluice ui DIR` show how
it goes. Guides: README.md and docs/.

Each sub-command lives in its own module of this package and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to the function that runs
it. Adding a command is adding a module and naming it in ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from sluice.errors import SluiceError

# module names inside sluice.cli, in the order they appear in --help
COMMANDS = ["check", "run", "demo", "cluster", "status", "control", "ui", "plan", "profile", "simulate", "state", "warm"]


def build_parser() -> argparse.ArgumentParser:
    from sluice import __version__

    description = "\n".join(__doc__.split("\n\nEach sub-command")[0].splitlines())
    parser = argparse.ArgumentParser(prog="sluice", description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"sluice {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"sluice.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"sluice.cli.{name}":
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SluiceError as exc:
        print(f"sluice: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _quiet_broken_pipe()


def _quiet_broken_pipe() -> int:
    """The reader of our output went away (``sluice status CKPT | head``): stop quietly, as
    ``cat`` does. stdout is pointed at /dev/null so that flushing it at exit raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141  # 128 + SIGPIPE, what a shell reports for a command a closed pipe ended


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
