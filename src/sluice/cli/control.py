"""``sluice control CHECKPOINT --policies FILE``: replace the policies of the job running on
``CHECKPOINT`` after its current batch, with no restart (``sluice.control.swap``).

The file is checked first (an error changes nothing); the job picks it up between two
batches, and ``decisions.jsonl`` gets a ``policies`` decision (or a ``rejected`` line).
No Spark is started."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser("control", help="replace a running job's control policies (no restart)")
    p.add_argument("checkpoint", help="the running job's checkpoint (a path or URI)")
    p.add_argument("--policies", required=True, metavar="FILE", help="a YAML policies file (docs/dynamic.md)")
    p.set_defaults(func=main)


def main(args) -> int:
    from sluice.control.swap import request_policies

    policies = request_policies(args.checkpoint, args.policies)
    names = ", ".join(p.name for p in policies) or "none"
    print(
        f"requested: {args.checkpoint} runs {names} from the batch after the one running now "
        f"(see decisions.jsonl; the job's controller picks the request up)"
    )
    return 0
