"""``sluice cluster up|down|status``: a Spark standalone cluster on this machine, to try
``sluice run --master spark://...`` without one (runtime.cluster.LocalCluster)."""

from __future__ import annotations

import os

STATE = os.path.join(".sluice", "cluster.json")


def register(subparsers) -> None:
    p = subparsers.add_parser("cluster", help="start or stop a Spark standalone cluster on this machine")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--workers", type=int, default=2, help="number of workers (default 2)")
    p.add_argument("--cores", type=int, default=1, help="cores per worker (default 1)")
    p.add_argument("--memory", default="1g", help="memory per worker (default 1g)")
    p.add_argument(
        "--dir", default=os.path.join(".sluice", "cluster"), help="work directories and logs (default .sluice/cluster)"
    )
    p.set_defaults(func=main)


def main(args) -> int:
    from sluice.errors import ConfigError
    from sluice.runtime.cluster import ClusterInfo, LocalCluster, stop_pids

    if args.action == "up":
        if os.path.exists(STATE):
            raise ConfigError(f"a cluster is already up ({ClusterInfo.load(STATE).master_url}); `sluice cluster down` first")
        cluster = LocalCluster(args.workers, args.cores, args.memory, root=args.dir, authenticate=True).start()
        cluster.info().save(STATE)
        print(
            f"Spark standalone cluster up: {args.workers} workers x {args.cores} core(s), {args.memory} each\n"
            f"  master   {cluster.master_url}   (sluice run PIPELINE.py --master {cluster.master_url})\n"
            f"  web UI   {cluster.master_ui}\n  logs     {os.path.join(cluster.root, 'logs')}\n"
            f"  auth     spark.authenticate on; `sluice run` from this directory uses the secret in "
            f"{cluster.secret_file}"
        )
        return 0
    if not os.path.exists(STATE):
        print("no cluster is up (started by `sluice cluster up` from this directory)")
        return 0 if args.action == "status" else 1
    info = ClusterInfo.load(STATE)
    if args.action == "status":
        print(f"master {info.master_url}, web UI {info.master_ui}, processes {info.pids}")
        return 0
    stop_pids(info.pids)
    os.remove(STATE)
    print(f"cluster {info.master_url} stopped")
    return 0
