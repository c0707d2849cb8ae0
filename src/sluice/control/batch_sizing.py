"""Batch sizing policies: the micro-batch is Nephele's output buffer (docs/architecture.md, section 3).

Records wait at the source until a batch admits them, then for the batch to run. With
Spark's trigger 0 the next batch starts when the last one ends, so two regimes meet:

- **rate mode** (input arrives at some rate lambda, the sources report a finite backlog):
  a batch holds what arrived while the previous one ran. With batch time
  D(n) = a + b*n (fixed cost a, cost per row b) the batches settle at
  D_ss = (a + g) / (1 - b*lambda) (g: Spark's gap between batches), and a record's latency
  is its wait (about D/2 on average) plus D. A cap below lambda*D_ss would only build a
  backlog; the bound holds at lambda exactly when k*D_ss <= bound, with k the measured
  ratio of latency to batch time (about 1.5 for the mean, 2 for the p95).
- **pull mode** (the input is all there, the backlog is unbounded or rows are stamped on
  admission): the batch size alone sets the latency, and throughput n / D(n) grows with n,
  so the highest throughput within the bound is the largest n with k*D(n) <= bound.

One cap serves both: n_bound = (bound*safety/k - a) / b, the largest batch whose predicted
latency keeps the bound. In rate mode it never binds while the bound is feasible
(lambda*D_ss <= n_bound exactly then), and it stops a catch-up batch after a stall from
taking everything at once. When the bound is infeasible at the offered rate (b*lambda >= 1,
or k*D_ss > bound) the policy keeps admission ahead of the input (a cap of 1.3 * lambda *
cycle, so the backlog never grows for good) and escalates: the constraint, the bottleneck
operator, and the highest rate at which the bound can hold, R* = (1 - k*(a+g)/bound) / b.
Before it escalates it tries scaling, the countermeasure Nephele's latency controller tries
before it escalates: when DS2's one-step scaling (``OneStepScaling``)
finds a keyed stage that needs more partitions than it has, the policy proposes that
instead, waits for the change to be applied and measured (the model of batch time is
refitted under the new Plan), and escalates only if the bound still cannot hold and no
stage can be given more.

``ModelBatchSizing`` fits a and b online (least squares over recent batches; the slope is
kept once the sizes stop varying, and the fixed cost re-fitted; a batch far off the model,
40 % by default, starts a new fit from there) and jumps to n_bound in one step. Until it has a
fit it falls back to Nephele's rules: multiplicative shrink on violation
(Eq. 2, obs* = max(eps, obs * r^excess)) and growth by s = 1.1 when there is slack and input
waits (Eq. 3). A dead band (10 %) keeps it from chasing noise.

``FixedPointBatchSizing`` is Das et al.'s (SoCC 2014) baseline: a fixed-point iteration of
the batch interval against processing time, x_next = (D + g) / rho (the interval is the time
from one batch's start to the next one's: its processing time D plus Spark's gap g between
batches), turned into rows per batch through the offered rate. ``FixedAdmission`` is a constant cap. Pure: no Spark.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from sluice.control.actions import Action, Admission, Escalate, Executors, Partitions, Threads
from sluice.control.policy import Policy
from sluice.control.scaling import OneStepScaling
from sluice.control.view import ControlView
from sluice.errors import ConfigError

MIN_ROWS = 100
"""No batch is capped below this (a fixed cost paid for a handful of rows helps nobody)."""

COUNTERMEASURE_PATIENCE = 10
"""Batches a proposed scale-out may wait to be applied (the arbiter may hold it behind another
structural change) before the policy asks again or escalates."""


@dataclass(frozen=True)
class LinearFit:
    """Batch time ~ a + b * rows (seconds)."""

    a: float
    b: float
    points: int

    def seconds(self, rows: float) -> float:
        return self.a + self.b * rows

    def rows_within(self, seconds: float) -> float:
        return (seconds - self.a) / self.b if self.b > 0 else math.inf


def fit_batch_time(
    rows: list[float], seconds: list[float], slope: float | None = None, max_rel_error: float = 0.25
) -> LinearFit | None:
    """Least squares fit of seconds ~ a + b*rows; None without enough evidence.

    The slope is trusted only when its standard error is under ``max_rel_error`` of it
    (batch sizes that hardly vary cannot tell the cost per row from noise). Otherwise, with
    a known ``slope`` from earlier batches only the fixed cost is re-fitted (it is what
    changes with the machine's load); without one there is no fit."""
    n = np.asarray(rows, dtype=float)
    d = np.asarray(seconds, dtype=float)
    if len(n) < 3 or n.min() <= 0:
        return None
    spread = float(((n - n.mean()) ** 2).sum())
    fitted: tuple[float, float] | None = None  # (a, b)
    if spread > 0 and len(n) >= 4:
        b, a = (float(x) for x in np.polyfit(n, d, 1))
        residual = d - (a + b * n)
        error = math.sqrt(float((residual**2).sum()) / (len(n) - 2) / spread)
        if not (b <= 0 or error > max_rel_error * b):
            fitted = (a, b)
    if fitted is None:
        if slope is None:
            return None
        fitted = (float(np.median(d - slope * n)), slope)
    a, b = fitted
    if a < 0:  # through the origin: a negative fixed cost is noise
        a, b = 0.0, float((n * d).sum() / (n * n).sum())
    return LinearFit(float(a), float(b), len(n))


@dataclass(frozen=True)
class Target:
    """The tightest latency a sizing policy must keep, and how latency relates to batch time."""

    constraint: str
    bound_ms: float
    k: float  # latency / batch time, measured
    measure: str  # "mean" or "p95"


def _ratio_prior(measure: str, pull: bool) -> float:
    if pull:
        return 1.0
    return 1.5 if measure == "mean" else 2.0


def latency_targets(view: ControlView, pull: bool, last: int = 10) -> list[Target]:
    """For each constraint and each bound it has (mean, p95): the bound and the measured
    ratio of that latency to the batch's time (median of the last batches, within [1, 2.5])."""
    out = []
    batches = view.batches(last)
    for c in view.constraints:
        for measure, bound in (("mean", c.bound_s), ("p95", c.p95_s)):
            if bound is None:
                continue
            ratios = []
            for m in batches:
                split = (m.paths or {}).get(c.name)
                value = None if split is None else split.get("mean_ms" if measure == "mean" else "p95_ms")
                if value and m.duration_s > 0:
                    ratios.append(value / (m.duration_s * 1000))
            k = float(np.median(ratios)) if len(ratios) >= 3 else _ratio_prior(measure, pull)
            out.append(Target(c.name, bound * 1000, min(max(k, 1.0), 2.5), measure))
    return out


def _pull_mode(view: ControlView, rate: float | None) -> bool:
    """True when the input is all there rather than arriving: no backlog is reported, or one
    is (a finite source without a rate) but nothing arrives (under 1 % of what is admitted).
    Such rows are stamped when a batch admits them, so admitting all that waits would only
    make the batch, and every row's latency, longer."""
    if rate is None:
        return True
    batches = view.batches(4)
    seconds = sum(m.duration_s for m in batches)
    admitted = sum(m.rows_in for m in batches) / seconds if seconds > 0 else 0.0
    return rate < 0.01 * admitted


def _gap_s(view: ControlView, last: int = 10) -> float:
    """Spark's time between one batch's end and the next one's start (planning, offsets)."""
    batches = [m for m in view.history if not m.skipped][-(last + 1) :]
    gaps = [cur.started_at - (prev.started_at + prev.duration_s) for prev, cur in itertools.pairwise(batches)]
    gaps = [g for g in gaps if g >= 0]
    return float(np.median(gaps)) if gaps else 0.0


def _bottleneck(view: ControlView, constraint: str) -> str | None:
    """The operator on the constraint's path that took most of the window's latency."""
    ops = view.status[constraint].split.get("operators", {}) if constraint in view.status else {}
    return max(ops, key=lambda op: ops[op]) if ops else None


def _latest_pressure(view: ControlView) -> tuple[float, str | None]:
    """max over constraints of the latest batch's latency over its bound (1.0 = at the bound)."""
    latest = view.latest
    worst, name = 0.0, None
    for c in view.constraints:
        split = (latest.paths or {}).get(c.name) if latest is not None else None
        if not split:
            continue
        ratios = [split["mean_ms"] / (c.bound_s * 1000)]
        if c.p95_s is not None and split.get("p95_ms") is not None:
            ratios.append(split["p95_ms"] / (c.p95_s * 1000))
        if max(ratios) > worst:
            worst, name = max(ratios), c.name
    return worst, name


class ModelBatchSizing(Policy):
    """Sluice's batch sizing: a fitted model of batch time, one step to the right size."""

    name = "batch_sizing"

    def __init__(
        self,
        safety: float = 0.8,
        fit_batches: int = 40,
        dead_band: float = 0.1,
        r: float = 0.98,
        s: float = 1.1,
        max_rows: int = 2_000_000,
        model_tolerance: float = 0.4,
        scaling: bool | Policy | None = True,
    ):
        self.safety = safety  # aim at this share of the bound (noise, the next batch's variance)
        self.fit_batches = fit_batches
        self.dead_band = dead_band
        self.r, self.s = r, s  # Nephele's Eq. 2 and Eq. 3 factors (fallback)
        self.max_rows = max_rows  # omega: an upper bound whatever the model says (memory)
        self.model_tolerance = model_tolerance  # a batch this far off the model resets it
        self.slope: float | None = None
        self.fit: LinearFit | None = None
        self.escalated = False  # hysteresis: an escalation ends only with 5 % of margin
        self.since = -1  # batches up to this one were measured before the engine's cost changed
        self.last_shrink: tuple[int, float] | None = None  # (rows, seconds) before the last Eq. 2 shrink
        self.futile_below: int | None = None  # shrinking below this many rows did not help
        self.warm = False  # the first batch a run sees pays one-time costs (JVM, code generation)
        # the countermeasure tried before escalating (True: DS2's one-step scaling)
        self.scaling: Policy | None = OneStepScaling() if scaling is True else (scaling or None)
        self.countering: tuple[int, int] | None = None  # (batch, plan version) when a scale-out was proposed
        self.plan_version: int | None = None  # the Plan the model was fitted under

    def describe(self) -> dict:
        return {
            "policy": self.name,
            "safety": self.safety,
            "fit_batches": self.fit_batches,
            "dead_band": self.dead_band,
            "r": self.r,
            "s": self.s,
            "max_rows": self.max_rows,
            "model_tolerance": self.model_tolerance,
            "scaling": None if self.scaling is None else self.scaling.describe(),
        }

    def restore(self, history: list) -> None:
        batches = [m for m in history if m.rows_in > 0 and not m.skipped][-self.fit_batches :]
        self._refit(batches)

    def _refit(self, batches) -> None:
        batches = [m for m in batches if m.batch_id > self.since]
        fit = fit_batch_time([m.rows_in for m in batches], [m.duration_s for m in batches], self.slope)
        self.fit = fit
        if fit is not None:
            self.slope = fit.b

    def _check_model(self, latest) -> None:
        """Forget the model when a batch took far from what it predicts (the cost per row
        changed: other work on the machine, heavier records): refit on later batches only."""
        if self.fit is None or latest.rows_in == 0:
            return
        predicted = self.fit.seconds(latest.rows_in)
        if abs(latest.duration_s - predicted) > self.model_tolerance * predicted:
            self.since = latest.batch_id - 1  # the surprising batch is the first of the new regime
            self.fit = self.slope = None

    def _check_plan(self, latest) -> None:
        """A new Plan (more partitions, other chains) changes the cost of a batch: the model
        is refitted on the batches run under it."""
        version = latest.plan_version
        if self.plan_version is not None and version != self.plan_version:
            self.since = max(self.since, latest.batch_id - 1)
            self.fit = self.slope = None
        self.plan_version = version

    def _escalate_or_counter(self, view: ControlView, escalation: Action) -> list[Action]:
        """What the policy says when the bound cannot hold: a countermeasure if there is one
        (or nothing while one is being applied and measured), else the escalation."""
        counter = self._countermeasure(view, escalation.target)
        if counter:
            return counter
        return [] if self.countering is not None else [escalation]

    def _countermeasure(self, view: ControlView, constraint: str) -> list[Action]:
        """Before escalating: a change that gives the job more capacity (a keyed stage's
        partitions, an operator's threads, with the executors they need on an elastic
        cluster), from the scaling policy. While one proposed is not yet applied, or applied
        but not yet measured, the policy waits (no escalation): ``self.countering`` is set
        then, and nothing is returned."""
        if self.scaling is None:
            return []
        if self.countering is not None:
            proposed_at, version = self.countering
            applied = view.plan.version != version
            measured = sum(1 for m in view.batches() if m.plan_version == view.plan.version)
            if (not applied and view.batch_id - proposed_at <= COUNTERMEASURE_PATIENCE) or (applied and measured < 3):
                return []
            self.countering = None
        proposals = self.scaling.propose(view)
        more = [
            a
            for a in proposals
            if (isinstance(a, Partitions) and a.target in view.plan.keyed and a.count > view.plan.keyed[a.target].partitions)
            or (isinstance(a, Threads) and a.threads > view.plan.threads.get(a.target, 1))
        ]
        if not more:
            return []
        self.countering = (view.batch_id, view.plan.version)
        prefix = f"{constraint}: batch sizing cannot keep the bound at the offered rate; scaling before escalating: "
        return [replace(more[0], reason=prefix + more[0].reason)] + [a for a in proposals if isinstance(a, Executors)]

    def propose(self, view: ControlView) -> list[Action]:
        if not view.constraints or view.latest is None:
            return []
        if not self.warm:  # the first batch of a run says nothing about the next ones
            self.warm = True
            self.since = max(self.since, view.latest.batch_id)
            return []
        self._check_plan(view.latest)
        self._check_model(view.latest)
        self._refit(view.batches(self.fit_batches))
        rate = view.offered_rate()
        pull = _pull_mode(view, rate)
        targets = latency_targets(view, pull)
        if not targets:
            return []
        if self.fit is None:
            return self._fallback(view, pull)
        fit, gap = self.fit, _gap_s(view)
        # the tightest bound decides: the largest batch time every target allows
        tight = min(targets, key=lambda t: t.bound_ms * self.safety / t.k)
        batch_s = tight.bound_ms / 1000 * self.safety / tight.k
        n_bound = fit.rows_within(batch_s)
        actions: list[Action] = []
        if pull:
            feasible = n_bound >= MIN_ROWS
            # infeasible: a smaller batch would cost throughput and gain nothing; keep the size
            cap = n_bound if feasible else (view.admission_total or view.latest.rows_in)
            expected_rows = cap
        else:
            assert rate is not None  # not pull mode: the offered rate is measured
            judged = rate * 1.05 if self.escalated else rate
            cycle = (fit.a + gap) / (1 - fit.b * judged) if fit.b * judged < 1 else math.inf
            feasible = fit.b * judged < 1 and tight.k * cycle <= tight.bound_ms / 1000 and n_bound >= MIN_ROWS
            keep_up = 1.3 * rate * cycle if math.isfinite(cycle) else 2.0 * max(m.rows_in for m in view.batches(5))
            cap = max(n_bound, keep_up) if not feasible else max(n_bound, 1.3 * rate * cycle)
            expected_rows = min(cap, rate * cycle) if math.isfinite(cycle) else cap
        cap = int(min(max(cap, MIN_ROWS), self.max_rows))
        expected_ms = fit.seconds(min(expected_rows, cap)) * 1000
        self.escalated = not feasible
        if not feasible:
            actions.extend(self._escalate_or_counter(view, self._escalation(view, tight, fit, gap, rate)))
        else:
            self.countering = None
        current = view.admission_total
        if current is None or abs(cap - current) > self.dead_band * current:
            mode = "pull" if pull else f"input {rate:,.0f} rows/s"
            reason = (
                f"model: batch time = {fit.a * 1000:.0f} ms + {fit.b * 1e6:.2f} us/row ({fit.points} batches); "
                f"{mode}; {tight.constraint} {tight.measure} <= {tight.bound_ms:.0f} ms with latency = "
                f"{tight.k:.2f} x batch time allows batches of {batch_s * 1000:.0f} ms"
            )
            actions.append(
                Admission(
                    rows=cap,
                    reason=reason,
                    expected={"batch_ms": round(expected_ms, 1), "latency_ms": round(expected_ms * tight.k, 1)},
                )
            )
        return actions

    def _escalation(self, view: ControlView, tight: Target, fit: LinearFit, gap: float, rate: float | None) -> Action:
        bound_s = tight.bound_ms / 1000
        max_rate = max((1 - tight.k * (fit.a + gap) / bound_s) / fit.b, 0.0) if fit.b > 0 else None
        details = {
            "bottleneck": _bottleneck(view, tight.constraint),
            "max_rate": None if max_rate is None else round(max_rate, 1),
            "offered_rate": None if rate is None else round(rate, 1),
            "fixed_cost_ms": round(fit.a * 1000, 1),
            "us_per_row": round(fit.b * 1e6, 3),
        }
        if rate is None:
            reason = (
                f"{tight.constraint}: even the smallest batch takes {fit.a * 1000:.0f} ms, over what the "
                f"bound of {tight.bound_ms:.0f} ms allows"
            )
        else:
            reason = (
                f"{tight.constraint}: at {rate:,.0f} rows/s the bound of {tight.bound_ms:.0f} ms ({tight.measure}) "
                f"cannot hold; it can up to about {details['max_rate']:,.0f} rows/s; bottleneck "
                f"{details['bottleneck']}"
            )
        return Escalate(target=tight.constraint, details=details, reason=reason)

    def _fallback(self, view: ControlView, pull: bool) -> list[Action]:
        """Nephele's Eq. 2 / Eq. 3 until the model has a fit.

        Like Nephele, it shrinks only while shrinking helps: when halving the batch did not
        cut its time by a tenth, the time is the fixed cost of a batch, smaller batches would
        only cost throughput, and the constraint is escalated instead (section 3.5: report
        when the preconditions for countermeasures no longer hold)."""
        pressure, name = _latest_pressure(view)
        latest = view.latest
        current = view.admission_total or latest.rows_in
        backlog = view.backlog()
        waiting = backlog is None or backlog > 0
        if not pull and backlog is not None and backlog > max(latest.rows_in, MIN_ROWS):
            # more than a batch's worth of input waits and keeps arriving: a smaller batch
            # would only grow the backlog (and every record's wait); admit what waits
            cap = min(self.max_rows, max(int(current), latest.rows_in + backlog))
            self.last_shrink = None
            if view.admission_total is not None and cap <= current:
                return []
            return [
                Admission(
                    rows=cap,
                    reason=f"{backlog} rows waiting: admission must keep up with the input (no model yet)",
                    expected={"rows": cap},
                )
            ]
        shrunk = self.last_shrink
        if shrunk is not None and latest.rows_in and latest.rows_in < shrunk[0]:
            self.last_shrink = None
            fewer_rows = 1 - latest.rows_in / shrunk[0]
            less_time = 1 - latest.duration_s / shrunk[1]
            # judged only on a shrink large enough to tell from noise: a batch with a quarter
            # fewer rows or more whose time fell by less than a fifth of that share is its fixed cost
            if fewer_rows >= 0.25 and less_time < 0.2 * fewer_rows:
                self.futile_below = shrunk[0]
                reason = (
                    f"{name}: shrinking the batch by {fewer_rows:.0%} ({shrunk[0]} -> {latest.rows_in} rows) "
                    f"left its time at {latest.duration_s * 1000:.0f} ms: the fixed cost of a batch is over "
                    f"the bound"
                )
                details = {
                    "bottleneck": _bottleneck(view, name) if name else None,
                    "max_rate": 0.0,
                    "offered_rate": view.offered_rate(),
                    "fixed_cost_ms": round(latest.duration_s * 1000, 1),
                }
                return [
                    *self._escalate_or_counter(
                        view, Escalate(target=name or view.constraints[0].name, details=details, reason=reason)
                    ),
                    Admission(
                        rows=int(shrunk[0]),
                        reason="back to the larger batch: smaller ones cost throughput and gain no latency",
                        expected={"rows": int(shrunk[0])},
                    ),
                ]
        if pressure > 1.0:
            if self.futile_below is not None and current <= self.futile_below:
                name = name or view.constraints[0].name
                return self._escalate_or_counter(
                    view,
                    Escalate(
                        target=name,
                        details={
                            "bottleneck": _bottleneck(view, name),
                            "max_rate": 0.0,
                            "offered_rate": view.offered_rate(),
                            "fixed_cost_ms": round(latest.duration_s * 1000, 1),
                        },
                        reason=f"{name}: smaller batches do not shorten a batch; its fixed cost is over the bound",
                    ),
                )
            excess_pct = 100 * (pressure - 1.0)
            # at least the dead band: a shrink smaller than it would be dropped below, and the
            # batch would sit at the bound with no second size for the model to fit
            cap = max(MIN_ROWS, int(current * min(max(self.r**excess_pct, 0.5), 1 - self.dead_band)))
            if cap < current:
                self.last_shrink = (current, latest.duration_s)
            reason = f"Eq. 2: {name} at {pressure:.0%} of its bound, no model yet: shrink by r^excess"
        elif pressure < self.safety * (1 - self.dead_band / 2) and waiting:  # slack: grow, which also gives the fit a second size
            cap = min(self.max_rows, int(current * self.s))
            reason = f"Eq. 3: latency at {pressure:.0%} of the bound and input waiting: grow by s={self.s}"
        else:
            return []
        if view.admission_total is not None and abs(cap - current) <= self.dead_band * current / 2:
            return []
        return [Admission(rows=cap, reason=reason, expected={"rows": cap})]


class FixedPointBatchSizing(Policy):
    """Das et al. (SoCC 2014): the batch interval x follows the processing time by fixed-point
    iteration so the system stays stable with rho of headroom: the processing time D of a
    batch must take at most rho of its interval.

    With Spark's trigger 0 a batch's interval is its processing time plus Spark's gap
    between batches (planning it, reading offsets; about 0.1 s on one machine), so the
    iteration is x_next = (D + g) / rho. Spark's trigger interval cannot change while a
    query runs, so the interval is turned into rows per batch through the offered rate
    (rows = rate * x): a cap that admits 1/rho of what arrives in one cycle, which keeps up
    with arrivals at any steady rate the job can hold. (Leaving the gap out, x = D / rho
    caps below arrivals whenever g > D * (1/rho - 1): at a 0.1 s gap and 0.36 s of fixed
    cost a backlog would grow at every rate.) It ignores the latency bound by design: it
    aims at stability, the paper's goal."""

    name = "fixed_point"

    def __init__(self, rho: float = 0.8, smoothing: float = 0.5):
        if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0 < rho <= 1:
            raise ConfigError(
                f"fixed_point: rho must be a number in (0, 1] (the share of its interval a batch may take), got {rho!r}"
            )
        if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float)) or not 0 < smoothing <= 1:
            raise ConfigError(f"fixed_point: smoothing must be a number in (0, 1], got {smoothing!r}")
        self.rho = float(rho)
        self.smoothing = float(smoothing)  # weight of the new estimate (Das et al. damp the iteration)
        self.interval: float | None = None

    def describe(self) -> dict:
        return {"policy": self.name, "rho": self.rho, "smoothing": self.smoothing}

    def propose(self, view: ControlView) -> list[Action]:
        latest = view.latest
        if latest is None or latest.rows_in == 0:
            return []
        gap = _gap_s(view)
        rate = view.offered_rate()
        if rate is None:  # pull mode: the admitted rate over the last batch's cycle
            rate = latest.rows_in / max(latest.duration_s + gap, 1e-3)
        target = (latest.duration_s + gap) / self.rho
        self.interval = target if self.interval is None else self.smoothing * target + (1 - self.smoothing) * self.interval
        cap = max(MIN_ROWS, int(rate * self.interval))
        current = view.admission_total
        if current is not None and abs(cap - current) <= 0.05 * current:
            return []
        return [
            Admission(
                rows=cap,
                reason=f"fixed point: interval {self.interval * 1000:.0f} ms = (batch time "
                f"{latest.duration_s * 1000:.0f} ms + gap {gap * 1000:.0f} ms) / rho {self.rho} at "
                f"{rate:,.0f} rows/s",
                expected={"batch_ms": round(self.rho * self.interval * 1000 - gap * 1000, 1)},
            )
        ]


class FixedAdmission(Policy):
    """A constant cap (rows per batch): the fixed configurations of the benchmark."""

    name = "fixed"

    def __init__(self, rows: int):
        self.rows = int(rows)

    def describe(self) -> dict:
        return {"policy": self.name, "rows": self.rows}

    def propose(self, view: ControlView) -> list[Action]:
        return [Admission(rows=self.rows, reason="fixed configuration")]
