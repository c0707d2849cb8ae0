"""The job graph: a pure, validated description of a dataflow (no Spark here)."""

from sluice.graph.jobgraph import Edge, JobGraph
from sluice.graph.operators import Operator

__all__ = ["Edge", "JobGraph", "Operator"]
