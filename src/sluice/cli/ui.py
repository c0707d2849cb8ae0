"""``sluice ui CHECKPOINT``: the live dashboard and Prometheus ``/metrics`` of a job, served
from its checkpoint (a job running elsewhere, or finished)."""

from __future__ import annotations

import os
import time

from sluice.errors import ConfigError


def add_server_options(p) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8321, help="port to serve on (default 8321; 0 picks a free one)")


def start_server(checkpoint: str, args, job: str | None = None, constraints: list[dict] | None = None):
    """Start the dashboard for ``checkpoint`` in a background thread and say where it is."""
    from sluice.ui import serve

    try:
        server = serve(checkpoint, host=args.host, port=args.port, job=job, constraints=constraints)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve the dashboard on {args.host}:{args.port}: {exc.strerror or exc} (choose another with --port)"
        ) from exc
    print(f"dashboard at {server.url}  (Prometheus: {server.url}metrics)", flush=True)
    return server


def register(subparsers) -> None:
    p = subparsers.add_parser("ui", help="serve the dashboard and /metrics of a job's checkpoint")
    p.add_argument("checkpoint", help="the job's checkpoint directory")
    p.add_argument(
        "--job", default=None, help="job name for the page and the metrics' job label (default: the checkpoint directory's name)"
    )
    add_server_options(p)
    p.set_defaults(func=main)


def main(args) -> int:
    if "://" not in args.checkpoint and not os.path.isdir(args.checkpoint):
        raise ConfigError(f"no checkpoint directory at {args.checkpoint}")
    server = start_server(args.checkpoint, args, job=args.job)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
