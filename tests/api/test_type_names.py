"""The type names the README lists work everywhere a schema or a type is given: operators'
schema=, sources' schema= (files and connectors), udaf result types; an unknown one is named
where it was written."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sluice import agg, sources
from sluice.errors import SluiceError
from sluice.graph.schemas import to_arrow_type

NAMES = {
    "int": pa.int64(),
    "int64": pa.int64(),
    "int32": pa.int32(),
    "double": pa.float64(),
    "float": pa.float64(),
    "float32": pa.float32(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
    "binary": pa.binary(),
    "decimal(12, 2)": pa.decimal128(12, 2),
}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_every_listed_type_name_is_accepted(name, tmp_path):
    assert to_arrow_type(name) == NAMES[name]
    assert (
        agg.udaf("x", create=list, add=lambda a, v: a, merge=lambda a, b: a, result=len, result_type=name).result_type
        == NAMES[name]
    )
    schema = {"x": name, "ts": "timestamp"}
    assert sources.directory(str(tmp_path), format="json", schema=schema).schema().field("x").type == NAMES[name]


def test_connector_sources_take_a_dict_schema_and_name_an_unknown_type():
    assert sources.nats("orders", schema={"id": "int", "amount": "decimal(10, 2)"}).schema().types == [
        pa.int64(),
        pa.decimal128(10, 2),
    ]
    with pytest.raises(SluiceError, match="NatsSource\\('orders'\\): column 'amount': unknown type 'decimel'"):
        sources.nats("orders", schema={"id": "int", "amount": "decimel"})
