"""Arrow <-> Spark schemas, and the typer that lets the pure graph validation ask Spark for
the result types of SQL expressions without running anything."""

from __future__ import annotations

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType
from pyspark.sql.utils import AnalysisException

from sluice.core.columns import INGEST, KEY_GROUP, PARTITION, SOURCE_ID  # noqa: F401 (SOURCE_ID re-exported)
from sluice.errors import SchemaError
from sluice.graph.operators import Operator
from sluice.graph.specs import FilterExprOp, SelectOp, WithColumnsOp


def quote(name: str) -> str:
    """A column name as a Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def partition_id() -> int:
    """The partition of the Spark task running this code (0 outside a task)."""
    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def to_spark(schema: pa.Schema) -> StructType:
    return from_arrow_schema(schema)


def to_arrow(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


def with_hidden(schema: pa.Schema, *names: str) -> pa.Schema:
    types = {INGEST: pa.timestamp("us", tz="UTC"), KEY_GROUP: pa.int32(), PARTITION: pa.int32()}
    for name in names:
        schema = schema.append(pa.field(name, types[name]))
    return schema


def apply_native(op: Operator, df):
    """The DataFrame transformation of a native operator (no Python involved)."""
    from pyspark.sql import functions as F

    spec = op.spec
    if isinstance(spec, FilterExprOp):
        return df.filter(spec.expr)
    if isinstance(spec, SelectOp):
        hidden = [c for c in df.columns if c.startswith("__")]
        return df.selectExpr(*spec.exprs, *hidden)
    if isinstance(spec, WithColumnsOp):
        return df.withColumns({name: F.expr(e) for name, e in spec.columns.items()})
    raise ValueError(f"{op.kind} is not a single-input native operator")


class SparkTyper:
    """Resolves native operators' output schemas with Spark's analyzer on an empty frame."""

    def __init__(self, spark):
        self.spark = spark

    def __call__(self, op: Operator, schema: pa.Schema) -> pa.Schema:
        empty = self._empty(to_spark(schema))
        try:
            out = apply_native(op, empty).schema
        except AnalysisException as exc:
            first = str(exc).splitlines()[0]
            raise SchemaError(f"Spark cannot resolve it: {first}", op.name, op.location) from None
        return to_arrow(out)

    def _empty(self, schema: StructType):
        """An empty DataFrame of ``schema`` made in the JVM (a local relation): PySpark's
        ``createDataFrame([])`` goes through a Python RDD (a temporary file, a parallelized
        collection), which costs far more than the analysis it is for."""
        from pyspark.sql import DataFrame

        try:
            jvm = self.spark._jvm
            jschema = jvm.org.apache.spark.sql.types.DataType.fromJson(schema.json())
            return DataFrame(self.spark._jsparkSession.createDataFrame(jvm.java.util.ArrayList(), jschema), self.spark)
        except Exception:
            return self.spark.createDataFrame([], schema)
