"""The dead-letter budget: when an operator sends most of a batch to dead letters, that is
a bug in the operator (a map returning the wrong type, a filter that raises on every
record), not bad data, and the job stops instead of reporting success.

An operator is over budget in a batch when it received at least ``BUDGET_MIN_ROWS`` records
and sent at least ``budget`` (a fraction, default 1.0: all of them) to dead letters. The
check runs on the driver after the batch's sinks are written and before its state is
committed, so the batch is not done: after a fix, the restart replays it with the fixed
operator. Sources are not counted: records a source cannot parse are bad data (they go to
dead letters all the same, and the job goes on).
"""

from __future__ import annotations

from collections import Counter

from sluice.core.metrics import OperatorProgress
from sluice.errors import ConfigError, DeadLetterBudgetExceeded
from sluice.graph import JobGraph

DEFAULT_BUDGET = 1.0
BUDGET_MIN_ROWS = 100
"""A batch smaller than this says too little about an operator to stop the job."""


def check_budget_value(budget: float) -> float:
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= 1:
        raise ConfigError(
            f"dead_letter_budget must be a fraction in (0, 1] of an operator's records in a batch "
            f"(e.g. 0.05 for 5 %), got {budget!r}"
        )
    return float(budget)


def check_budget(
    graph: JobGraph, batch_id: int, dead: list[dict], operators: dict[str, OperatorProgress], budget: float, where: str
) -> None:
    """Raise ``DeadLetterBudgetExceeded`` for the first operator over budget in the batch.

    ``dead``: the batch's dead-letter records (``operator`` is an operator's name);
    ``operators``: the tasks' metrics by operator id (``rows_in``); ``where``: where the dead
    letters are, for the message."""
    by_name = Counter(record.get("operator") for record in dead)
    for op in graph.operators:
        if op.is_source or not by_name.get(op.name):
            continue
        # a window combined in Python before its exchange receives its records there: its own
        # rows_in counts the combined rows, fewer than the records its dead letters count
        progress = operators.get(op.id) or OperatorProgress()
        received = int(max(stage.rows_in for stage in progress.stages()))
        failed = by_name[op.name]
        if received >= BUDGET_MIN_ROWS and failed >= budget * received:
            first = next(r["error"] for r in dead if r.get("operator") == op.name)
            location = f" defined at {op.location}" if op.location else ""
            raise DeadLetterBudgetExceeded(
                f"operator {op.name!r}{location} sent {failed:,} of the {received:,} records it received in "
                f"batch {batch_id} to dead letters, over the dead-letter budget of {budget:.0%}: a bug in the "
                f"operator, not bad data. First error: {first.splitlines()[-1] if first else '?'}. "
                f"The dead letters are in {where}. The batch was not committed: fix the operator and run again "
                f"(the batch is replayed), or allow more (dead_letter_budget=, sluice run --dead-letter-budget)."
            )
