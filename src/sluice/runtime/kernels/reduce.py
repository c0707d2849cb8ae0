"""``KeyedStream.reduce(fn)``: fold each key's records pairwise, Flink-style.

The user's function is per record by nature, so this kernel calls it once per record;
grouping and state handling around it stay vectorized.
"""

from __future__ import annotations

import pyarrow as pa

from sluice.runtime.kernels.grouping import groups
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, KeyedKernel, KeyedResult


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
        out_schema = self.output_schema(rows.schema)
        state_schema = self.state_schema(rows.schema)
        previous = state.to_pylist() if state.num_rows else []
        reduced = []
        for key, state_row, key_rows in groups(state, rows, self.key_columns):
            records = key_rows.to_pylist()
            acc = previous[state_row] if state_row is not None else None
            kg = records[0][KEY_GROUP]
            for record in records:
                record.pop(KEY_GROUP)
                acc = record if acc is None else self.fn({k: v for k, v in acc.items() if k != KEY_GROUP}, record)
                for k, v in zip(self.key_columns, key):
                    acc[k] = v  # the key is not the function's to change
            acc[KEY_GROUP] = kg
            reduced.append(acc)
        output = pa.Table.from_pylist([{f.name: r.get(f.name) for f in out_schema} for r in reduced], schema=out_schema)
        upsert_schema = state_schema.append(pa.field(KEY_GROUP, pa.int32()))
        upserts = pa.Table.from_pylist([{f.name: r.get(f.name) for f in upsert_schema} for r in reduced], schema=upsert_schema)
        return KeyedResult(output=output, upserts=upserts)
