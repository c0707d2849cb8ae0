"""A batch made to fit a table's columns, with the rows that cannot fit set aside.

Lakehouse sinks write into tables that have types of their own. A batch's column is cast to
the table's type in one vectorized call; only when that call fails is the column searched
for the values that fail, by halving the range that fails (a few bad values cost a few
extra casts, not one per row). A row with such a value, or with a null in a column the
table declares not null, or in a key column, is a reject with its reason: it goes to the
dead letters while the other rows are written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.errors import SinkError


@dataclass
class Fitted:
    table: pa.Table  # the rows that fit, in the table's types (plus any new columns)
    rejects: list[tuple[int, str]] = field(default_factory=list)  # (row of the input, reason)
    added: list[str] = field(default_factory=list)  # columns the batch adds to the table


def _failing_rows(column: pa.ChunkedArray | pa.Array, target: pa.DataType) -> list[tuple[int, str]]:
    """Rows of ``column`` whose value cannot be cast to ``target``, with the cast's error."""
    out: list[tuple[int, str]] = []
    pending = [(0, len(column))]
    while pending:
        first, stop = pending.pop()
        if first >= stop:
            continue
        try:
            column.slice(first, stop - first).cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            if stop - first == 1:
                out.append((first, str(e).strip().splitlines()[0]))
                continue
            middle = (first + stop) // 2
            pending += [(middle, stop), (first, middle)]
    return sorted(out)


def fit(batch: pa.Table, target: pa.Schema | None, key: tuple[str, ...], where: str) -> Fitted:
    """``batch`` in ``target``'s column types (columns it lacks are null; columns it adds
    are kept, nullable); rows that cannot be so are rejects. ``target`` None: no table yet."""
    missing = [k for k in key if k not in batch.column_names]
    if missing:
        raise SinkError(f"{where}: key columns {missing} are not among the stream's columns {batch.column_names}")
    bad = np.zeros(batch.num_rows, dtype=bool)
    reasons: dict[int, str] = {}

    def reject(rows, reason: str) -> None:
        for r in rows:
            if not bad[r]:
                bad[r] = True
                reasons[int(r)] = reason

    columns: list[pa.ChunkedArray] = []
    fields: list[pa.Field] = []
    added: list[str] = []
    by_name = {f.name: f for f in target} if target is not None else {}
    for name in batch.column_names:
        column = batch.column(name)
        wanted = by_name.get(name)
        if wanted is None:
            if target is not None:
                added.append(name)
            if pa.types.is_null(column.type):  # all null so far (e.g. a dead letter's location): text
                column = column.cast(pa.string())
            fields.append(pa.field(name, column.type, nullable=True))
            columns.append(column)
            continue
        if column.type != wanted.type:
            try:
                column = column.cast(wanted.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                failing = _failing_rows(column, wanted.type)
                if not failing:  # the type itself cannot be cast: no row could be written
                    raise SinkError(
                        f"{where}: column {name!r} is {column.type} in the stream, the table "
                        f"has {wanted.type}, and one cannot be cast to the other"
                    ) from None
                unfit = np.zeros(batch.num_rows, dtype=bool)
                for row, error in failing:
                    unfit[row] = True
                    reject([row], f"column {name!r}: {column[row].as_py()!r} cannot be stored as {wanted.type}: {error}")
                column = pc.if_else(pa.array(unfit), pa.scalar(None, column.type), column).cast(wanted.type)
        if not wanted.nullable:
            reject(
                np.flatnonzero(pc.is_null(column).to_numpy(zero_copy_only=False)),
                f"column {name!r} is null, the table declares it not null",
            )
        fields.append(wanted)
        columns.append(column)
    for f in target or ():
        if f.name not in batch.column_names:
            if not f.nullable:
                raise SinkError(f"{where}: the table's column {f.name!r} is not null and the stream has no such column")
            fields.append(f)
            columns.append(pa.nulls(batch.num_rows, f.type))
    for k in key:
        reject(np.flatnonzero(pc.is_null(batch.column(k)).to_numpy(zero_copy_only=False)), f"key column {k!r} is null")
    table = pa.Table.from_arrays(columns, schema=pa.schema(fields))
    if bad.any():
        table = table.filter(pa.array(~bad))
    return Fitted(table, sorted(reasons.items()), added)
