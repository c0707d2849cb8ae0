"""The ``sluice`` command.

Each sub-command lives in its own module of this package and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to the function that runs
it. Adding a command is adding a module and naming it in ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from sluice.errors import SluiceError

# module names inside sluice.cli, in the order they appear in --help
COMMANDS = ["run", "demo", "cluster", "status", "control", "ui", "plan", "profile", "simulate", "warm"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice", description=__doc__.splitlines()[0])
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
