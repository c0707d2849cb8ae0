"""What a join is, independent of how it runs: its kinds, its time condition, and its schemas.

Two keyed streams meet in one keyed operator, ``join``. Both sides' records travel through
one exchange as one *tagged union*: the key columns (named as on the left), a side tag
(``__side``: 0 left, 1 right) and every other column of each side under a prefixed name
(``__left__x``, ``__right__y``), the other side's columns null. Routing by the key columns
then sends both sides' records of a key group to the same partition by the same routing
table (a collocated pair, in ALBIC's words), and the kernel keeps both sides' buffered
records in the same key-group store row, so the pair rebalances and rescales as one.

Two joins share that mechanism:

* a **stream-stream join** (:class:`StreamJoin`) on event time: within the same window
  (tumbling or sliding, :class:`sluice.graph.windows.Sliding`), or within an interval
  (``between=(lower, upper)``: ``right.t - left.t`` in ``[lower, upper]``, Flink's interval
  join);
* a **table lookup** (:class:`TableLookup`): the right side is a changelog of a table (its
  latest row per key is the table); each left record is enriched with the table's row of
  its key as of the batch it arrives in.

Output columns: the key columns (left's names; they hold the key of whichever side the row
has), then ``window_start``/``window_end`` for a window join, then the left side's other
columns, then the right side's other columns. A name both sides have gets the side's suffix
(``suffixes``, ``("_left", "_right")`` by default); a name that still collides is an error.
Right key columns with names of their own are not repeated (they equal the key).

Pure Python: no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from sluice.errors import SchemaError
from sluice.graph.windows import WINDOW_END, WINDOW_START, Sliding, format_duration

SIDE = "__side"  # the tagged union's side column: 0 left, 1 right
LEFT, RIGHT = 0, 1
PREFIXES = ("__left__", "__right__")
STREAM_HOWS = ("inner", "left", "right", "outer")
LOOKUP_HOWS = ("inner", "left")


def side_column(side: int, name: str) -> str:
    """The name of one side's column in the tagged union."""
    return PREFIXES[side] + name


@dataclass(frozen=True)
class JoinSides:
    """Key and event-time columns of the two sides, and the output's naming rule."""

    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    left_time: str | None = None
    right_time: str | None = None
    suffixes: tuple[str, str] = ("_left", "_right")

    def payload(self, side: int, schema: pa.Schema) -> list[pa.Field]:
        """A side's columns other than its keys (they travel under prefixed names)."""
        keys = self.left_keys if side == LEFT else self.right_keys
        return [f for f in schema if f.name not in keys and not f.name.startswith("__")]

    def union_schema(self, left: pa.Schema, right: pa.Schema) -> pa.Schema:
        """The tagged union's columns (without the runtime's hidden ones)."""
        check_keys(self, left, right)
        fields = [left.field(k) for k in self.left_keys] + [pa.field(SIDE, pa.int8())]
        for side, schema in ((LEFT, left), (RIGHT, right)):
            fields += [pa.field(side_column(side, f.name), f.type) for f in self.payload(side, schema)]
        return pa.schema(fields)

    def output_names(self, left: pa.Schema, right: pa.Schema, extra: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
        """Output names of the left and the right payload columns, by the suffix rule."""
        check_keys(self, left, right)
        lnames = [f.name for f in self.payload(LEFT, left)]
        rnames = [f.name for f in self.payload(RIGHT, right)]
        both = set(lnames) & set(rnames)
        lout = [n + self.suffixes[0] if n in both else n for n in lnames]
        rout = [n + self.suffixes[1] if n in both else n for n in rnames]
        taken = list(self.left_keys) + list(extra)
        for name in lout + rout:
            if name in taken:
                raise SchemaError(
                    f"join: output column {name!r} would appear twice (after suffixes {self.suffixes}); "
                    f"rename it on one side (select/with_columns) or pass other suffixes="
                )
            taken.append(name)
        return lout, rout


def check_keys(sides: JoinSides, left: pa.Schema, right: pa.Schema) -> None:
    if len(sides.left_keys) != len(sides.right_keys):
        raise SchemaError(
            f"join: the sides have {len(sides.left_keys)} and {len(sides.right_keys)} key columns; key both by as many columns"
        )
    for lk, rk in zip(sides.left_keys, sides.right_keys):
        for name, schema, what in ((lk, left, "left"), (rk, right, "right")):
            if name not in schema.names:
                raise SchemaError(f"join: {what} key column {name!r} is not among {schema.names}")
        lt, rt = left.field(lk).type, right.field(rk).type
        if lt != rt:
            raise SchemaError(
                f"join: key {lk!r} is {lt} on the left but {rk!r} is {rt} on the right; "
                f"cast one side so that both have the same type"
            )


def signed(micros: int) -> str:
    """A signed duration in words: ``-5m``, ``+1m``, ``+0s``."""
    return ("-" if micros < 0 else "+") + (format_duration(abs(micros)) if micros else "0s")


def time_type(schema: pa.Schema, column: str, what: str) -> pa.DataType:
    if column not in schema.names:
        raise SchemaError(f"join: {what} event-time column {column!r} is not among {schema.names}")
    dtype = schema.field(column).type
    if pa.types.is_timestamp(dtype):
        return pa.timestamp("us", tz=dtype.tz)
    if pa.types.is_integer(dtype):
        return pa.int64()
    raise SchemaError(f"join: {what} event-time column {column!r} has type {dtype}; use a timestamp")


@dataclass(frozen=True)
class StreamJoin:
    """A windowed or interval join of two keyed streams on event time.

    Exactly one of ``window`` (tumbling or sliding) and ``between`` (microseconds, lower <=
    upper) is set. ``allowed_lateness`` (microseconds) keeps windows (intervals) open that
    long after the watermark passes them."""

    sides: JoinSides
    how: str = "inner"
    window: Sliding | None = None
    between: tuple[int, int] | None = None
    allowed_lateness: int = 0

    def __post_init__(self) -> None:
        if self.how not in STREAM_HOWS:
            raise SchemaError(f"join: how must be one of {STREAM_HOWS}, not {self.how!r}")
        if (self.window is None) == (self.between is None):
            raise SchemaError("join: give exactly one of window= (tumbling or sliding) and between=(lower, upper)")
        if self.window is not None and not isinstance(self.window, Sliding):
            raise SchemaError(f"join: window must be tumbling or sliding, not {self.window!r}")
        if self.between is not None and self.between[0] > self.between[1]:
            raise SchemaError(
                f"join: between=({signed(self.between[0])}, {signed(self.between[1])}) has its lower bound above its upper bound"
            )
        if self.allowed_lateness < 0:
            raise SchemaError("join: allowed_lateness must be >= 0")

    def keeps_unmatched(self, side: int) -> bool:
        """True when unmatched records of ``side`` are emitted (padded with nulls)."""
        return self.how == "outer" or (self.how == "left" and side == LEFT) or (self.how == "right" and side == RIGHT)

    def window_columns(self) -> tuple[str, ...]:
        return (WINDOW_START, WINDOW_END) if self.window is not None else ()

    def output_schema(self, left: pa.Schema, right: pa.Schema) -> pa.Schema:
        for side, schema, column in ((LEFT, left, self.sides.left_time), (RIGHT, right, self.sides.right_time)):
            if column is None:
                raise SchemaError(
                    "join: a stream-stream join runs on event time; declare event_time= on the "
                    f"{'left' if side == LEFT else 'right'} side's sources"
                )
            time_type(schema, column, "left" if side == LEFT else "right")
        lout, rout = self.sides.output_names(left, right, self.window_columns())
        fields = [left.field(k) for k in self.sides.left_keys]
        if self.window is not None:
            wtype = time_type(left, str(self.sides.left_time), "left")
            fields += [pa.field(WINDOW_START, wtype), pa.field(WINDOW_END, wtype)]
        fields += [pa.field(n, f.type) for n, f in zip(lout, self.sides.payload(LEFT, left))]
        fields += [pa.field(n, f.type) for n, f in zip(rout, self.sides.payload(RIGHT, right))]
        return pa.schema(fields)

    def describe(self) -> str:
        """What the join's state depends on, in words (a change of it is state-incompatible)."""
        if self.window is not None:
            cond = f"window {self.window.label}"
        else:
            lower, upper = self.between or (0, 0)
            cond = f"between({signed(lower)},{signed(upper)})"
        late = f", allowed lateness {self.allowed_lateness}us" if self.allowed_lateness else ""
        return f"{self.how} join on {cond}, event time {self.sides.left_time}/{self.sides.right_time}{late}"


@dataclass(frozen=True)
class TableLookup:
    """Each left record enriched with the right side's latest row of its key (the table).

    ``version``: a right-side column that orders a key's rows (a sequence or an update
    time): the row with the highest version is the table's; an older one that arrives later
    changes nothing (so a replayed or reordered changelog gives the same table). ``deleted``:
    an optional boolean right-side column; a row with it true removes the key from the table
    (its row stays in the state as a tombstone, so that an older version arriving later
    cannot bring the key back)."""

    sides: JoinSides
    version: str
    how: str = "left"
    deleted: str | None = None

    def __post_init__(self) -> None:
        if self.how not in LOOKUP_HOWS:
            raise SchemaError(f"lookup: how must be one of {LOOKUP_HOWS}, not {self.how!r}")

    def output_schema(self, left: pa.Schema, right: pa.Schema) -> pa.Schema:
        if self.version not in right.names:
            raise SchemaError(f"lookup: version column {self.version!r} is not among the table's columns {right.names}")
        vtype = right.field(self.version).type
        if not (pa.types.is_integer(vtype) or pa.types.is_timestamp(vtype)):
            raise SchemaError(f"lookup: version column {self.version!r} must be an integer or a timestamp, it is {vtype}")
        if self.deleted is not None and (
            self.deleted not in right.names or not pa.types.is_boolean(right.field(self.deleted).type)
        ):
            raise SchemaError(f"lookup: deleted= must name a boolean column of the table, got {self.deleted!r}")
        lout, rout = self.sides.output_names(left, right)
        fields = [left.field(k) for k in self.sides.left_keys]
        fields += [pa.field(n, f.type) for n, f in zip(lout, self.sides.payload(LEFT, left))]
        fields += [pa.field(n, f.type) for n, f in zip(rout, self.sides.payload(RIGHT, right))]
        return pa.schema(fields)

    def describe(self) -> str:
        deleted = f", deleted by {self.deleted}" if self.deleted else ""
        return f"{self.how} lookup in a table versioned by {self.version}{deleted}"


JoinSpec = StreamJoin | TableLookup
