"""Value, throughput, cost and profit of a running job, batch by batch (thesis 4.5 and 4.6).

Kumbhare's metrics, measured live rather than simulated (``models.dynamic`` has the same
equations for the simulator and the schedulers):

* **value** Gamma(t), Eq. 4.3: the mean over the processing elements of the relative value
  of their active alternate (``graph.alternates.application_value``); ``value_mean`` is its
  time-weighted mean over the run (Gamma-bar of section 4.6).
* **relative throughput** Omega(t), Eq. 4.4 and 4.7: output over the output that was possible
  for the input. A micro-batch has no queues inside it (every row a batch admits is
  processed before it commits), so each output's ratio is the sources': rows the batch
  processed over rows that arrived in its interval (admitted + the growth of what waits,
  ``i dt`` of Eq. 4.4; the queue ``q`` is the batch before's arrivals, which a micro-batch
  processes one batch later by design), at most 1, pooled over the sources (None when a
  source cannot say what waits: a pull source could give any number of rows at once).
* **cost** mu(t), Eq. 4.2: the executors the job holds (the Plan's ``executors``, else the
  executors Spark gives it: on local Spark the driver, one), each billed by the ``hour``
  (every started hour whole, Eq. 4.2) or by the ``second``, at ``price_per_hour``.
* **profit** Theta, Eq. 4.8 with sigma of Eq. 4.9: the user names the cost *per hour* at
  which a run breaks even at the best and at the worst application value; over a run of
  tau hours that is C_max^Gamma_max = break_even_best * tau, and the same at Gamma_min.
  ``profit`` is Theta over the run so far (Gamma-bar against mu(t)); ``profit_now`` is Theta
  for this batch's interval alone (Gamma(t) against the cost per hour held now). As in
  ``models.dynamic.ProfitModel`` a deployment on the break-even line has Theta = 0.

The running sums (integral of the value, of Omega, the executors' leases) are carried in each
batch's record, so a restart goes on from the last batch. Pure: no Spark.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sluice.core.metrics import OperatorProgress
from sluice.graph.economics import Economics
from sluice.models.dynamic import ProfitModel


def profit(economics: Economics, value: float, cost: float, hours: float, gamma_min: float, gamma_max: float) -> float | None:
    """Theta (Eq. 4.8, sigma of Eq. 4.9) of a run of ``hours`` at mean value ``value`` that
    cost ``cost``, against the economics' break-even costs per hour; None for no run."""
    if hours <= 0:
        return None
    best, worst = economics.break_even_rates
    model = ProfitModel(gamma_min, gamma_max, worst * hours, best * hours)
    return float(model.profit(value, cost))


@dataclass
class Ledger:
    """The executors' leases: the cost of those released, and when each held one started."""

    released_cost: float = 0.0
    open_since: tuple[float, ...] = ()

    def hold(self, executors: int, at: float, economics: Economics) -> None:
        """From ``at`` on, hold ``executors``: new leases start, or the newest end."""
        held = list(self.open_since)
        while len(held) > executors:
            self.released_cost += economics.lease_cost(held.pop(), at)
        held += [at] * (executors - len(held))
        self.open_since = tuple(held)

    def cost(self, now: float, economics: Economics) -> float:
        """mu(now): the released leases plus the open ones billed up to ``now``."""
        return self.released_cost + sum(economics.lease_cost(start, now) for start in self.open_since)


@dataclass
class BatchFacts:
    """What the economics of one batch are computed from."""

    started_at: float  # epoch s
    ended_at: float
    value: float  # Gamma(t) of the alternates the batch ran
    rows_in: int
    backlog: dict[str, Any]  # source -> rows left waiting (None: unknown)
    executors: int


def omega(rows_in: int, backlog: dict[str, Any], previous: float | None) -> float | None:
    """Rows the batch processed over the rows that arrived in its interval (at most 1).

    ``backlog``: rows waiting at each source at the batch's end, ``previous``: in all, at
    the previous batch's end (None for the first: nothing waited). Arrivals are the rows
    admitted plus the growth of what waits. A micro-batch processes what arrived during the
    batch before it, so a job that keeps up has Omega about 1 even though rows wait while a
    batch runs; one that falls behind (batches that grow, or admission capped below the
    rate) admits less than arrives. None when a source cannot say what waits."""
    known = [v for v in backlog.values() if v is not None]
    if not backlog or len(known) < len(backlog) or any(math.isinf(float(v)) for v in known):
        return None
    arrived = rows_in + sum(float(v) for v in known) - (previous or 0.0)
    return 1.0 if arrived <= 0 else min(rows_in / arrived, 1.0)


class EconomicsMeter:
    """Computes each batch's ``dynamics`` record from the last one's (a restart passes the
    record of the last batch done, so sums and leases go on)."""

    def __init__(self, economics: Economics, gamma_min: float, gamma_max: float, last: dict | None = None):
        self.economics = economics
        self.gamma_min, self.gamma_max = gamma_min, gamma_max
        last = last or {}
        state = last.get("state") or {}
        self.ledger = Ledger(float(state.get("released_cost", 0.0)), tuple(state.get("open_since", ())))
        self.until = state.get("until")  # end of the last batch accounted
        self.seconds = float(state.get("seconds", 0.0))  # running time accounted (a stop's downtime is not)
        self.value_s = float(state.get("value_s", 0.0))
        self.omega_s = float(state.get("omega_s", 0.0))
        self.omega_known_s = float(state.get("omega_known_s", 0.0))
        self.waiting = state.get("waiting")  # rows waiting at the sources at the last batch's end
        if self.until is not None and self.ledger.open_since:
            # a restart: the executors of the last run were released when it stopped
            self.ledger.hold(0, float(self.until), economics)

    def measure(self, facts: BatchFacts) -> dict[str, Any]:
        econ = self.economics
        # the interval this batch accounts for: since the last batch ended (the wait for it
        # included), or its own length for the first batch of a run
        begin = facts.started_at if self.until is None or self.until > facts.started_at else float(self.until)
        if not self.ledger.open_since:
            begin = facts.started_at
        self.ledger.hold(facts.executors, begin, econ)
        seconds = max(facts.ended_at - begin, 0.0)
        ratio = omega(facts.rows_in, facts.backlog, self.waiting)
        known = [v for v in facts.backlog.values() if v is not None]
        self.waiting = sum(float(v) for v in known) if known and len(known) == len(facts.backlog) else None
        self.value_s += facts.value * seconds
        if ratio is not None:
            self.omega_s += ratio * seconds
            self.omega_known_s += seconds
        self.until = facts.ended_at
        self.seconds += seconds
        run_s = self.seconds
        cost = self.ledger.cost(facts.ended_at, econ)
        value_mean = self.value_s / run_s if run_s > 0 else facts.value
        rate = facts.executors * econ.price_per_hour
        return {
            "value": round(facts.value, 9),
            "value_mean": round(value_mean, 9),
            "omega": None if ratio is None else round(ratio, 9),
            "omega_mean": round(self.omega_s / self.omega_known_s, 9) if self.omega_known_s > 0 else None,
            "executors": facts.executors,
            "cost": round(cost, 9),
            "cost_per_hour": round(rate, 9),
            "profit": _rounded(profit(econ, value_mean, cost, run_s / 3600.0, self.gamma_min, self.gamma_max)),
            "profit_now": _rounded(profit(econ, facts.value, rate, 1.0, self.gamma_min, self.gamma_max)),
            "state": {
                "released_cost": self.ledger.released_cost,
                "open_since": list(self.ledger.open_since),
                "seconds": self.seconds,
                "until": self.until,
                "value_s": self.value_s,
                "omega_s": self.omega_s,
                "omega_known_s": self.omega_known_s,
                "waiting": self.waiting,
            },
        }


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 9)


def measured_costs(
    operators: dict[str, OperatorProgress], alternates: dict[str, str], keyed: set[str]
) -> dict[str, dict[str, Any]]:
    """Per operator with alternates: the alternate that ran, and what it measured in this
    batch: ``cost`` (seconds of task time per input row; a keyed operator's kernel time, its
    state reads and writes left out) and ``selectivity`` (rows out per row in)."""
    out: dict[str, dict[str, Any]] = {}
    for op_id, alternate in alternates.items():
        values = operators.get(op_id) or OperatorProgress()
        rows = float(values.rows_in)
        entry: dict[str, Any] = {"alternate": alternate}
        if rows > 0:
            seconds = float(values.counters.get("kernel_s", 0.0) if op_id in keyed else values.time_s)
            entry["cost"] = seconds / rows
            entry["selectivity"] = float(values.rows_out) / rows
        out[op_id] = entry
    return out
