"""The Linear micro-DAG of Shukla and Simmhan (Fig. 5) as a Sluice pipeline, for ``sluice plan``.

Five tasks in a chain, each naming its performance model from the library (``perf_model=``):
Parse XML -> Pi -> Table query -> Blob download -> Batch file write. Try

    sluice plan examples/plan_linear_microdag.py --rate 100
    sluice plan examples/plan_linear_microdag.py --rate 100 --allocation LSA --mapping RSM

The functions are stand-ins that pass records through: planning only needs the graph and the
models (the real operators are in examples/operators/).
"""

from sluice import sinks, sources
from sluice.api import Pipeline


def passthrough(row: dict) -> dict:
    return row


pipeline = Pipeline("linear-microdag")
readings = pipeline.source(sources.generator(fields={"id": sources.Sequence()}, rate=100), name="S")
(
    readings.map(passthrough, name="X", perf_model="parse_xml")
    .map(passthrough, name="P", perf_model="pi")
    .map(passthrough, name="T", perf_model="table")
    .map(passthrough, name="B", perf_model="blob")
    .map(passthrough, name="F", perf_model="batch_file_write")
    .sink(sinks.console(), name="K")
)
