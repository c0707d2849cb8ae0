"""``KeyedStream.reduce(fn)``: fold each key's records pairwise, Flink-style.

The user's function is per record by nature, so this kernel calls it once per record;
grouping and state handling around it stay vectorized.
"""

from __future__ import annotations

import pyarrow as pa

from sluice.runtime.kernels.grouping import groups
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, DeadRecord, KeyedKernel, KeyedResult


class ReduceKernel(KeyedKernel):
    def __init__(self, key_columns: list[str], fn):
        super().__init__(key_columns)
        self.fn = fn

    def state_schema(self, input_schema: pa.Schema) -> pa.Schema:
        # the accumulated record itself; key columns first
        rest = [f for f in input_schema if f.name not in self.key_columns and f.name != KEY_GROUP]
        return pa.schema([input_schema.field(k) for k in self.key_columns] + rest)

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return pa.schema([f for f in input_schema if f.name != KEY_GROUP])

    def process(self, rows: pa.Table, state: pa.Table, ctx: BatchContext) -> KeyedResult:
        """Fold each key's records of the batch into its accumulated record.

        A record on which ``fn`` raises (or returns no dict) is a dead letter, and the fold
        goes on from the accumulated record as it was before that record: the key's other
        records of the batch are applied. A key none of whose records of the batch applied
        emits nothing and keeps its state. A key whose accumulated record does not fit the
        output schema keeps its state from before the batch, and the records of the batch
        applied to it are dead letters.
        """
        out_schema = self.output_schema(rows.schema)
        state_schema = self.state_schema(rows.schema)
        upsert_schema = state_schema.append(pa.field(KEY_GROUP, pa.int32()))
        previous = state.to_pylist() if state.num_rows else []
        reduced: list[dict] = []
        applied: list[tuple[tuple, list[dict]]] = []
        dead: list[DeadRecord] = []
        for key, state_row, key_rows in groups(state, rows, self.key_columns):
            records = key_rows.to_pylist()
            acc: dict | None = previous[state_row] if state_row is not None else None
            kg = records[0][KEY_GROUP]
            used = []
            for record in records:
                record.pop(KEY_GROUP)
                if acc is None:
                    acc = dict(record)
                else:
                    try:  # fn gets a fresh dict: what it does to it cannot change acc
                        new = self.fn({k: v for k, v in acc.items() if k != KEY_GROUP}, record)
                        if not isinstance(new, dict):
                            raise TypeError(f"reduce function returned {type(new).__name__}, not a dict")
                    except Exception as exc:  # the record is a dead letter; acc stays as before it
                        dead.append(DeadRecord(record, exc, key))
                        continue
                    acc = new
                used.append(record)
                assert acc is not None
                for k, v in zip(self.key_columns, key):
                    acc[k] = v  # the key is not the function's to change
            if used:
                assert acc is not None  # a used record started or updated it
                acc[KEY_GROUP] = kg
                reduced.append(acc)
                applied.append((key, used))
        try:
            return self._result(reduced, out_schema, upsert_schema, dead)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            pass
        fits = []  # some key's accumulated record does not fit: find which, keep the others
        for acc, (key, used) in zip(reduced, applied):
            try:
                pa.Table.from_pylist([{f.name: acc.get(f.name) for f in upsert_schema}], schema=upsert_schema)
                fits.append(acc)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
                dead += [DeadRecord(r, f"reduce result does not fit the schema {upsert_schema}: {exc}", key) for r in used]
        return self._result(fits, out_schema, upsert_schema, dead)

    @staticmethod
    def _result(reduced: list[dict], out_schema: pa.Schema, upsert_schema: pa.Schema, dead: list[DeadRecord]) -> KeyedResult:
        output = pa.Table.from_pylist([{f.name: r.get(f.name) for f in out_schema} for r in reduced], schema=out_schema)
        upserts = pa.Table.from_pylist([{f.name: r.get(f.name) for f in upsert_schema} for r in reduced], schema=upsert_schema)
        return KeyedResult(output=output, upserts=upserts, dead_letters=dead)
