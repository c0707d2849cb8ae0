"""``sluice.report(name, value)``: a measurement from inside an operator's function, into the
batch's metrics, where guards and policies read it (``metric(op, name)`` in a guard).

The runtime opens a scope around each call of an operator's kernel in a Spark task; a report
made inside it adds to the operator's ``user.<name>.sum`` and ``user.<name>.count`` in the
task's metrics, which reach the driver with the others. A batch's value of the metric is the
mean of what was reported (``control.guards.operator_metric``). Outside a running operator (a
unit test calling the function itself) a report is ignored. No Spark import: user code and
pure tests import it freely.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_scopes: list[tuple[object, str]] = []  # (task metrics, operator id), innermost last


def report(name: str, value: float) -> None:
    """Report ``value`` for the metric ``name`` of the operator whose function is running.

    E.g. a forecaster reports its error, ``sluice.report("forecast_error", mape)``, and a
    guard ``when: "metric('forecast', 'forecast_error') > 0.1"`` switches alternates on it."""
    if not _scopes:
        return
    if not isinstance(name, str) or not name:
        raise ValueError(f"sluice.report needs a metric name, got {name!r}")
    metrics, op_id = _scopes[-1]
    metrics.add(op_id, f"user.{name}.sum", float(value))  # type: ignore[attr-defined]
    metrics.add(op_id, f"user.{name}.count", 1)  # type: ignore[attr-defined]


@contextmanager
def reporting_to(metrics, op_id: str) -> Iterator[None]:
    """Reports made inside go to ``op_id``'s metrics in ``metrics`` (a TaskMetrics)."""
    _scopes.append((metrics, op_id))
    try:
        yield
    finally:
        _scopes.pop()
