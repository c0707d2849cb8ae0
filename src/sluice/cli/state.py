"""``sluice state CHECKPOINT [OPERATOR] [--batch N] [--out FILE.parquet]``: the keyed state of
one operator, every key with its state, as of the last committed batch or batch N. Read-only:
it can run while the job does."""

from __future__ import annotations

import pyarrow.parquet as pq

from sluice.runtime.state.reader import committed_batches, read, stateful_operators

HEAD = 20  # rows shown without --out


def register(subparsers) -> None:
    p = subparsers.add_parser("state", help="show or export the keyed state of an operator in a checkpoint")
    p.add_argument("checkpoint", help="the job's checkpoint directory or URI")
    p.add_argument("operator", nargs="?", help="operator id or name (left out: list them, or the only one)")
    p.add_argument("--batch", type=int, default=None, help="as of this committed batch (default: the last)")
    p.add_argument("--out", default=None, help="write every row to this Parquet file instead of showing a head")
    p.set_defaults(func=main)


def main(args) -> int:
    if args.operator is None:
        ops = stateful_operators(args.checkpoint)
        if len(ops) != 1:
            print(f"{len(ops)} stateful operators in {args.checkpoint}:")
            for op in ops:
                print(f"  {op.describe()}")
            print("name one: sluice state CHECKPOINT OPERATOR")
            return 0
    done = committed_batches(args.checkpoint)
    # the batch fixed before reading: a running job may commit another meanwhile
    batch = args.batch if args.batch is not None else (done[-1] if done else None)
    table = read(args.checkpoint, args.operator, batch)
    if args.out:
        pq.write_table(table, args.out)
        print(f"{table.num_rows:,} keys as of batch {batch} written to {args.out}")
        return 0
    print(table.slice(0, HEAD).to_pandas().to_string(index=False) if table.num_rows else "(no keys)")
    more = f" (first {HEAD} shown)" if table.num_rows > HEAD else ""
    print(f"{table.num_rows:,} keys as of batch {batch}{more}")
    return 0
