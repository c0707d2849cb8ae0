"""The input of a join's keyed stage in Spark: both sides as one tagged union.

Each side's records are projected to the union's columns (``sluice.graph.joins``): the key
columns under the left side's names, the side tag, the side's own columns under prefixed
names and the other side's as typed nulls. One projection per side, in SQL text (a column
object per field would cost Py4J round trips every batch); then one ``union``. The keyed
stage routes the union by the key columns, so both sides' records of a key group reach the
partition the routing table gives it.
"""

from __future__ import annotations

from sluice.graph.joins import LEFT, RIGHT, SIDE, side_column
from sluice.runtime.kernels.joins import JoinKernelBase
from sluice.runtime.schemas import INGEST, quote, to_spark


def tagged_union(left_df, right_df, kernel: JoinKernelBase):
    """The two sides' frames as one frame of the kernel's union schema (plus ``__ingest_ts``)."""
    sides = kernel.sides
    spark_types = {f.name: f.dataType.simpleString() for f in to_spark(kernel.union).fields}
    frames = []
    for side, df, keys in ((LEFT, left_df, sides.left_keys), (RIGHT, right_df, sides.right_keys)):
        exprs = [f"{quote(k)} AS {quote(lk)}" for k, lk in zip(keys, sides.left_keys)]
        exprs.append(f"CAST({side} AS TINYINT) AS {SIDE}")
        own = side_column(side, "")
        for name in kernel.union.names[len(keys) + 1 :]:
            if name.startswith(own):
                exprs.append(f"{quote(name[len(own) :])} AS {quote(name)}")
            else:
                exprs.append(f"CAST(NULL AS {spark_types[name]}) AS {quote(name)}")
        exprs.append(INGEST)
        frames.append(df.selectExpr(*exprs))
    return frames[LEFT].union(frames[RIGHT])
