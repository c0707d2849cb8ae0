"""The autopilot: every countermeasure a job has, coordinated to keep its goals.

A job that states goals (``Pipeline.goals``, ``sluice run --latency``) and names no policies
runs this one policy. Its members are the policies an expert would otherwise name:

- ``batch_sizing``: the admission cap that holds the latency bound (``ModelBatchSizing``);
- ``scaling``: DS2's one-step partitions of each keyed stage, and executors on a standalone
  cluster (with a keyed partition a core of them), sized for the highest of the measured
  rate and the rates forecast over twice the time a new executor takes to join (scale-ahead:
  ``control.forecast``, and the rising line through the last 30 s of arrivals);
- ``balancing`` / ``collocation``: key groups moved off hot partitions; between two keyed
  stages keyed differently with measured traffic, ALBIC's collocation, which balances both
  stages itself (when both propose for a stage in one round, collocation's change goes
  ahead; afterwards the stage is its re-router's within the undo window, below);
- ``chaining``: Python operators fused or split by measured work (``DynamicChaining``);
- ``alternates_by_load``: each operator's alternate by the load (when it has alternates).

Their proposals go to one arbiter (:class:`GoalArbiter`) that judges each against one model
of the job (``control.job_model``: latency, utilization, cost) and its own memory of what
it changed:

- **hysteresis**: a scale-out needs pressure (the goal broken, the backlog growing, or the
  utilization, measured or forecast, above ``high``); a scale-in needs the utilization
  below ``low`` and a predicted latency inside the bound with a margin afterwards;
- **lazy scale-down**: the utilization must stay low for ``scale_down_delay_s`` first, and
  no scale-in follows a scale-out within ``undo_window_s``;
- **one change at a time, measured**: no structural change while the last one is being
  applied or measured (``measure_batches`` batches under it);
- **no undoing another's change**: within ``undo_window_s`` a change back to what a change
  replaced is held, and so is a routing change of a stage another member re-routed;
- **undo what measured worse** (unless an executor was lost or replaced while it was
  measured: those batches measure the loss, not the change): a change meant to add capacity whose batches then take
  ``worse_margin`` longer than the model predicted for them before it, or a scale-in after
  which the job falls behind, is undone, and the same change is not made again for
  ``ban_s``; a scale-out is kept while the job would be under pressure without it (the
  batches after it carry the new executors' warm-up, and on a rising input giving the
  capacity back would leave the job short for the ban's length).

Held proposals are logged once per reason (``notes``: the controller writes them to
``decisions.jsonl`` as ``held``). Pure: no Spark.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sluice.control.actions import (
    Action,
    Admission,
    Chains,
    Escalate,
    Executors,
    Partitions,
    Routing,
    SwitchAlternate,
    Threads,
)
from sluice.control.alternates import AlternatesByLoad
from sluice.control.balancing import KeyGroupBalancing
from sluice.control.batch_sizing import LinearFit, ModelBatchSizing
from sluice.control.chaining import DynamicChaining
from sluice.control.collocation import CollocationBalancing
from sluice.control.forecast import ArrivalForecaster, make_forecaster
from sluice.control.goals import Goals, make_goals
from sluice.control.job_model import JobModel, build_model
from sluice.control.policy import Policy
from sluice.control.scaling import OneStepScaling, balanced_routing
from sluice.control.view import ControlView
from sluice.errors import ConfigError

log = logging.getLogger("sluice.control")

# the utilization band by what the goals favour: (DS2's target, high, low)
BANDS = {"latency": (0.6, 0.8, 0.3), "cost": (0.75, 0.95, 0.45)}


class AheadScaling(OneStepScaling):
    """DS2's one step, sized for ``ahead`` rows/s when that is above the measured rate."""

    name = "scaling"

    def __init__(self, target_utilization: float = 0.7, window: int = 3, tolerance: float = 0.25):
        super().__init__(target_utilization, window, tolerance, whole_job=True)
        self.ahead: float | None = None  # set by the autopilot before each proposal
        # set likewise: the job's latency or backlog is rising (size now, do not wait for a
        # steady rate), and whether its backlog outgrows its batches (falling behind)
        self.urgent = False
        self.behind = False

    def offered(self, view: ControlView) -> float | None:
        measured = super().offered(view)
        if self.ahead is None or measured is None:
            return measured
        return max(measured, self.ahead)

    def _steady(self, view: ControlView) -> bool:
        if self.urgent:
            return True  # under pressure on a ramp the rate never holds still: size for it now
        measured = super().offered(view)
        if self.ahead is not None and measured is not None and self.ahead > measured * (1 + self.tolerance):
            return True  # sized for the forecast's level, not the moving measured one
        return super()._steady(view)

    def propose(self, view: ControlView) -> list[Action]:
        """DS2's step, with each keyed stage's partitions following the cores the job will
        hold: a keyed stage's batch time is its busiest partition's, which DS2's count from
        the mean useful time does not see (a hot key group on a partition among too few);
        with a partition a core the stage spreads over every core the executors add."""
        actions = super().propose(view)
        resources = view.resources
        if not resources.elastic:
            return actions
        most = resources.max_executors or resources.target
        grows = any(isinstance(a, Executors) and a.count > resources.target for a in actions)
        if self.behind and not grows and resources.target < most and _measured(view, self.window):
            # the job falls behind although its measured work fits the
            # executors held (work the task times do not see: fixed costs, skew, a backlog
            # to drain): one more executor, as Spark's dynamic allocation adds them while
            # tasks wait; the arbiter measures each step before the next
            actions = [a for a in actions if not isinstance(a, Executors)] + [
                Executors(
                    count=resources.target + 1,
                    reason=f"the job falls behind though its measured work fits {resources.target} "
                    f"executor(s): hold {resources.target + 1}",
                    expected={"executors": resources.target + 1},
                )
            ]
        target = next((a.count for a in actions if isinstance(a, Executors)), resources.target)
        cores = max(target * max(resources.cores_per_executor, 1), 1)
        out = [a for a in actions if not isinstance(a, Partitions)]
        plan = view.plan
        stages = sorted(plan.keyed_stages())
        busy = {ops: sum(view.operator_cpu(op) for op in ops) for ops in stages}
        for ops in stages:
            stage = plan.keyed[ops[0]]
            need = min(cores, plan.max_parallelism)
            if need > stage.partitions and busy[ops] < 0.1 * max(sum(busy.values()), 1e-9):
                continue  # a stage with a tenth of the job's work gains nothing from more partitions
            if need != stage.partitions:
                out.insert(
                    0,
                    Partitions(
                        target=ops[0],
                        count=need,
                        reason=f"{ops[0]}: a partition a core of the {target} executor(s) held: "
                        f"{stage.partitions} -> {need}, key groups in ranges",
                        expected={"partitions": need},
                    ),
                )
                break  # one stage a step
        return out


@dataclass
class Change:
    """A structural change the arbiter let through: awaiting application, then its verdict."""

    member: str
    actions: tuple[Action, ...]
    undo: tuple[Action, ...]  # what puts back what it replaced
    intent: str  # "capacity" (out, rebalance, chains) or "cost" (in)
    proposed_batch: int
    proposed_version: int
    baseline: LinearFit | None  # the model before it
    per_row: float | None = None  # seconds a row of the batches before it (when there is no fit)
    applied_batch: int | None = None
    applied_at: float | None = None
    judged: bool = False
    revert: bool = False  # this change undoes an earlier one
    scale_out: bool = False  # it adds executors or partitions
    executors: tuple[float, ...] = ()  # when each executor held at its proposal joined


@dataclass
class GoalArbiter:
    """Judges the autopilot's candidates (see the module's docstring for the rules)."""

    favour: str = "latency"
    undo_window_s: float = 120.0
    scale_down_delay_s: float = 120.0
    ban_s: float = 600.0
    measure_batches: int = 3
    worse_margin: float = 0.25
    patience: int = 10  # batches a proposed change may wait to be applied before it is dropped
    pending: Change | None = None
    changes: list[Change] = field(default_factory=list)  # applied, newest last
    banned: dict[tuple, float] = field(default_factory=dict)  # (kind, target, value key) -> until (s)
    low_since: float | None = None
    notes: list[dict] = field(default_factory=list)
    _said: dict[tuple, str] = field(default_factory=dict)

    @property
    def band(self) -> tuple[float, float, float]:
        return BANDS[self.favour]

    # ---- memory -------------------------------------------------------------------------------
    def observe(self, view: ControlView, model: JobModel, now: float) -> list[Action]:
        """After each batch: notice a pending change applied, track the utilization, and
        return the undo of an applied change that measured worse (or nothing)."""
        pending = self.pending
        if pending is not None:
            if all(_in_force(view, a) for a in pending.actions):
                pending.applied_batch, pending.applied_at = view.batch_id - 1, now
                self.changes.append(pending)
                self.changes = self.changes[-20:]
                self.pending = None
            elif pending.revert:
                return list(pending.actions)  # an undo is asked for until it is applied
            elif view.batch_id - pending.proposed_batch > self.patience:
                self.pending = None  # never applied (deferred or rejected): forget it
        u = model.utilization
        low = self.band[2]
        if u is not None and u < low and not model.behind:
            self.low_since = now if self.low_since is None else self.low_since
        else:
            self.low_since = None
        for change in self.changes:
            if not change.judged and not change.revert:
                undo = self._verdict(change, view, model, now)
                if undo:
                    return undo
        return []

    def _verdict(self, change: Change, view: ControlView, model: JobModel, now: float) -> list[Action]:
        assert change.applied_batch is not None
        resources = view.resources
        if resources.executors < resources.target:
            return []  # executors still joining: not the change's steady state yet
        # the first batch under a change carries its transient (moved state loading)
        after = [m for m in view.batches() if m.batch_id > change.applied_batch + 1]
        if len(after) < self.measure_batches:
            return []
        change.judged = True
        after = after[: self.measure_batches]
        if not any(isinstance(a, Executors) for a in change.actions) and tuple(sorted(resources.since)) != change.executors:
            # an executor was lost or replaced while the change was measured: its batches carry
            # the recomputed tasks and the newcomer's warm-up, not the change's effect
            self._note(
                view,
                change.member,
                change.actions[0],
                "not judged: the executors held changed while it was measured (an executor lost or replaced)",
            )
            return []
        if change.intent == "cost":
            if not model.behind:
                return []
            why = "the job fell behind after it"
            self._ban(change, now, "in")
        else:
            if change.baseline is not None:
                predicted = sum(change.baseline.seconds(m.rows_in) for m in after)
            elif change.per_row is not None:  # no fit before it: its batches' mean time a row
                predicted = sum(change.per_row * m.rows_in for m in after)
            else:
                return []
            measured = sum(m.duration_s for m in after)
            if predicted <= 0 or measured <= predicted * (1 + self.worse_margin):
                return []
            if change.scale_out and self._short_without(change, model):
                # on a rising input the batches after a scale-out carry the new executors'
                # warm-up and growth the fit extrapolates badly; giving the capacity back
                # while the job would be short of it leaves it short for the ban's length
                self._note(
                    view,
                    change.member,
                    change.actions[0],
                    f"kept: its batches took {measured / predicted:.2f}x what the model predicted before it, "
                    "but the job would be short of capacity without it",
                )
                return []
            why = (
                f"its batches took {measured / predicted:.2f}x what the model predicted for them before it "
                f"({measured * 1000 / len(after):.0f} ms against {predicted * 1000 / len(after):.0f} ms)"
            )
            self._ban(change, now, None)
        undo = tuple(
            replace(a, reason=f"undo {change.member}'s {a.kind} change of {a.target}: {why}; not retried for {self.ban_s:.0f} s")
            for a in change.undo
        )
        self.pending = Change(change.member, undo, (), "capacity", view.batch_id, view.plan.version, None, revert=True)
        return list(undo)

    def _ban(self, change: Change, now: float, direction: str | None) -> None:
        for a in change.actions:
            self.banned[(a.kind, a.target, direction or _key(a.value))] = now + self.ban_s

    def _banned(self, action: Action, direction: str | None, now: float) -> bool:
        for key in ((action.kind, action.target, _key(action.value)), (action.kind, action.target, direction)):
            until = self.banned.get(key)
            if until is not None and now < until:
                return True
        return False

    # ---- judging ------------------------------------------------------------------------------
    def judge(self, candidates: list[tuple[str, Action]], view: ControlView, model: JobModel, now: float) -> list[Action]:
        """The candidates (member, action) that pass; the rest are noted with why."""
        out: list[Action] = []
        structural = [(m, a) for m, a in candidates if a.structural]
        scaling_out = any(self._direction(view, a) == "out" for _, a in structural)
        for member, action in candidates:
            if isinstance(action, (Admission, SwitchAlternate)):
                out.append(action)
            elif isinstance(action, Escalate):
                if scaling_out or self._capacity_in_flight():
                    self._note(view, member, action, "held: scaling is tried first")
                else:
                    out.append(action)
        # one structural change (with the executors that go with it) a batch, by priority
        groups: dict[str, list[Action]] = {}
        for member, action in structural:
            groups.setdefault(member, []).append(action)
        ranked = sorted(groups.items(), key=lambda item: self._priority(view, model, item[1]))
        for member, actions in ranked:
            why = self._why_not(member, actions, view, model, now)
            if why is not None:
                for action in actions:
                    self._note(view, member, action, why)
                continue
            directions = {self._direction(view, a) for a in actions}
            intent = "cost" if "in" in directions else "capacity"
            before = view.batches(5)
            rows = sum(m.rows_in for m in before)
            self.pending = Change(
                member,
                tuple(actions),
                tuple(_undo(view, a) for a in actions),
                intent,
                view.batch_id,
                view.plan.version,
                model.fit,
                sum(m.duration_s for m in before) / rows if rows else None,
                scale_out="out" in directions,
                executors=tuple(sorted(view.resources.since)),
            )
            out.extend(actions)
            break
        return out

    def _priority(self, view: ControlView, model: JobModel, actions: list[Action]) -> int:
        directions = {self._direction(view, a) for a in actions}
        if "out" in directions:
            return 0 if model.behind else 1
        if any(isinstance(a, Routing) for a in actions):
            return 2
        if any(isinstance(a, (Chains, Threads)) for a in actions):
            return 3
        return 4  # scale-in last

    def _why_not(self, member: str, actions: list[Action], view: ControlView, model: JobModel, now: float) -> str | None:
        if self.pending is not None:
            what = "the undo of " if self.pending.revert else ""
            return f"held: {what}{self.pending.member}'s change is being applied"
        last = self.changes[-1] if self.changes else None
        if last is not None and not last.judged and not last.revert:
            return f"held: measuring {last.member}'s change (applied after batch {last.applied_batch})"
        for action in actions:
            direction = self._direction(view, action)
            if self._banned(action, direction, now):
                return "held: the same change measured worse not long ago"
            undoing = self._undoes(member, action, now)
            if undoing is not None:
                return f"held: it would undo {undoing}'s change within {self.undo_window_s:.0f} s"
        directions = {self._direction(view, a) for a in actions}
        high, low = self.band[1], self.band[2]
        u = model.utilization
        if "out" in directions and not self.pressed(model) and u is not None:
            ahead = model.utilization_at(model.ahead)
            return (
                f"held: no pressure to scale out (utilization {u:.2f}"
                + ("" if ahead is None else f", {ahead:.2f} at the forecast rate")
                + " within the band, goal kept)"
            )
        if "in" in directions:
            if model.behind:
                return "held: no scale-in while the job is behind its goal"
            if self.low_since is None or now - self.low_since < self.scale_down_delay_s:
                return (
                    f"held: lazy scale-down (utilization under {low:.2f} for "
                    f"{0 if self.low_since is None else now - self.low_since:.0f} of {self.scale_down_delay_s:.0f} s)"
                )
            recent_out = [
                c
                for c in self.changes
                if c.applied_at is not None
                and now - c.applied_at < self.undo_window_s
                and c.intent == "capacity"
                and any(isinstance(a, (Partitions, Executors)) for a in c.actions)
            ]
            if recent_out:
                return f"held: a scale-out {now - recent_out[-1].applied_at:.0f} s ago"  # type: ignore[operator]
            speedup = min((self._speedup(view, a) for a in actions), default=1.0)
            after = model.utilization_at(max(model.rate or 0.0, model.ahead or 0.0), speedup)
            latency = model.latency_s(max(model.rate or 0.0, model.ahead or 0.0), speedup) if model.rate else None
            if after is not None and after > high:
                return f"held: the model predicts utilization {after:.2f} after it (band top {high:.2f})"
            if latency is not None and model.bound_s is not None and latency > 0.8 * model.bound_s:
                return (
                    f"held: the model predicts {latency * 1000:.0f} ms after it, over 80 % of the "
                    f"{model.bound_s * 1000:.0f} ms bound"
                )
        return None

    def pressed(self, model: JobModel) -> bool:
        """Whether the job needs more capacity than it has: it is behind, the latency at the
        measured or forecast rate nears the bound, the measured latency's rising line crosses
        90 % of it within the time a scale-out takes, or the utilization (measured or
        forecast) is over the band's top."""
        high, u = self.band[1], model.utilization
        ahead = model.utilization_at(model.ahead)
        rate = max(model.rate or 0.0, model.ahead or 0.0)
        latency = model.latency_s(rate) if rate > 0 else None
        near = latency is not None and model.bound_s is not None and latency > 0.9 * model.bound_s
        return model.behind or near or _rising(model) or (u is not None and u > high) or (ahead is not None and ahead > high)

    def _short_without(self, change: Change, model: JobModel) -> bool:
        """Whether the model from before ``change`` (a scale-out) says the job would be under
        pressure at today's rate (measured or forecast) without it: the utilization over the
        band's top, or the goal's latency within 10 % of the bound. Judged on the fit from
        before, not on the batches since, which carry what made the change measure worse."""
        fit, rate = change.baseline, max(model.rate or 0.0, model.ahead or 0.0)
        if fit is None or rate <= 0:
            return False
        if rate * fit.b >= self.band[1]:
            return True
        latency = replace(model, fit=fit).latency_s(rate)  # the model as it stood before the change
        return model.bound_s is not None and latency is not None and latency > 0.9 * model.bound_s

    def _undoes(self, member: str, action: Action, now: float) -> str | None:
        """Who made the change within the window that ``action`` would undo, if any."""
        for change in reversed(self.changes):
            if change.applied_at is None or now - change.applied_at >= self.undo_window_s or change.revert:
                continue
            for done, undo in zip(change.actions, change.undo):
                if (
                    isinstance(action, Routing)
                    and isinstance(done, Routing)
                    and change.member != member
                    and action.stages & done.stages
                ):
                    return change.member
                if type(done) is type(action) and done.target == action.target and _key(undo.value) == _key(action.value):
                    return change.member
        return None

    def busy(self) -> bool:
        """A structural change is being applied or measured (nothing else structural passes)."""
        if self.pending is not None:
            return True
        last = self.changes[-1] if self.changes else None
        return last is not None and not last.judged and not last.revert

    def _capacity_in_flight(self) -> bool:
        if self.pending is not None and self.pending.intent == "capacity":
            return True
        last = self.changes[-1] if self.changes else None
        return last is not None and not last.judged and last.intent == "capacity"

    @staticmethod
    def _direction(view: ControlView, action: Action) -> str | None:
        sizes = action.sizes(view.plan, view.resources.target) if isinstance(action, (Partitions, Executors, Threads)) else None
        if sizes is None:
            return None
        now, new = sizes
        return "out" if new > now else "in" if new < now else None

    @staticmethod
    def _speedup(view: ControlView, action: Action) -> float:
        """How much faster a row goes after a scale change (conservative: all of a row's
        work scales with the partitions, so a scale-in slows it by their ratio)."""
        sizes = action.sizes(view.plan, view.resources.target) if isinstance(action, (Partitions, Executors)) else None
        if sizes is None:
            return 1.0
        now, new = sizes
        return new / max(now, 1)

    def _note(self, view: ControlView, member: str, action: Action, why: str) -> None:
        key = (member, action.kind, action.target)
        gist = re.sub(r"[\d.,]+", "#", why)  # said once until the reason itself changes, not its figures
        if self._said.get(key) == gist:
            return
        self._said[key] = gist
        self.notes.append(
            {
                "batch_id": view.batch_id,
                "member": member,
                "kind": action.kind,
                "target": action.target,
                "reason": why,
                "proposal": action.reason,
            }
        )


def _key(value: Any) -> str:
    """A comparable form of an action's value (routing tables are lists, chains tuples)."""
    if isinstance(value, dict) and "partitions" in value:
        return f"partitions={int(value['partitions'])}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"partitions={value}"
    return repr(value)


def _in_force(view: ControlView, action: Action) -> bool:
    return action.in_force(view.plan, view.resources.target)


def _undo(view: ControlView, action: Action) -> Action:
    """The action that puts back what ``action`` replaces (read from the Plan in force)."""
    return action.undo(view.plan, view.resources.target)


class Autopilot(Policy):
    """Keep a job's goals with every countermeasure it has (see the module's docstring).

    ``goals``: what to keep (default: keep up, favour latency); ``forecaster``: how the
    scale-ahead forecasts the arrivals (a ``control.forecast`` forecaster, its name, or
    ``{name: {options}}``; None: measured rates only); ``startup_s``: how far ahead it
    looks (what a new executor takes to join); ``catch_up_s``: with ``keep_up``, a backlog of
    more than the bound's worth of input is sized to drain within it. The arbiter's settings
    (``undo_window_s``, ``scale_down_delay_s``, ``ban_s``, ``measure_batches``,
    ``worse_margin``) are described in :class:`GoalArbiter`.
    """

    name = "autopilot"
    arbitrates = True  # its GoalArbiter measures each change before the next

    def __init__(
        self,
        goals: Goals | dict | None = None,
        *,
        forecaster: Any = "holt_winters",
        startup_s: float = 30.0,
        catch_up_s: float = 20.0,
        undo_window_s: float = 120.0,
        scale_down_delay_s: float = 120.0,
        ban_s: float = 600.0,
        measure_batches: int = 3,
        worse_margin: float = 0.25,
        members: list[Policy] | None = None,
    ):
        if isinstance(goals, dict):
            goals = make_goals(**goals)
        self.goals = goals or Goals()
        if (
            min(undo_window_s, scale_down_delay_s, ban_s, startup_s) < 0
            or catch_up_s <= 0
            or measure_batches < 1
            or worse_margin <= 0
        ):
            raise ConfigError("autopilot: the windows and delays must be >= 0, measure_batches >= 1 and worse_margin > 0")
        target = BANDS[self.goals.favour][0]
        self.scaling = AheadScaling(target_utilization=target)
        # key groups are placed by load (a MILP) only for a rescale the arbiter lets through
        self.scaling.balance = False
        self.members: list[Policy] = (
            members
            if members is not None
            else [
                ModelBatchSizing(scaling=None),
                self.scaling,
                CollocationBalancing(),
                KeyGroupBalancing(),
                DynamicChaining(),
                AlternatesByLoad(),
            ]
        )
        self.forecaster: ArrivalForecaster | None = make_forecaster(forecaster) if forecaster else None
        self.startup_s = startup_s
        self.catch_up_s = catch_up_s  # a backlog over the bound's worth of input is to drain within this
        # a balancing member whose look found nothing, or a move the arbiter held, rests this
        # long (in seconds, not batches: after a surge a batch may take as long as twenty small
        # ones) unless the job is under pressure: then it looks every batch, so a hot set that
        # moves at the peak is met at once, while idle partitions are not re-routed on noise
        self.rebalance_every_s = 20.0
        self._quiet_until: dict[str, float] = {}
        self.arbiter = GoalArbiter(self.goals.favour, undo_window_s, scale_down_delay_s, ban_s, measure_batches, worse_margin)

    def describe(self) -> dict:
        a = self.arbiter
        return {
            "policy": self.name,
            "goals": self.goals.to_dict(),
            "members": [m.describe() for m in self.members],
            "forecaster": None if self.forecaster is None else self.forecaster.describe(),
            "undo_window_s": a.undo_window_s,
            "scale_down_delay_s": a.scale_down_delay_s,
            "ban_s": a.ban_s,
            "measure_batches": a.measure_batches,
            "worse_margin": a.worse_margin,
        }

    def restore(self, history: list) -> None:
        for member in self.members:
            member.restore(history)

    def drain_notes(self) -> list[dict]:
        """What the arbiter held since the last call, and why (the controller logs them)."""
        notes, self.arbiter.notes = self.arbiter.notes, []
        return notes

    def propose(self, view: ControlView) -> list[Action]:
        latest = view.latest
        if latest is None:
            return []
        now = latest.started_at + latest.duration_s
        ahead = None
        if self.forecaster is not None:
            self.forecaster.observe(view)
            # over the time a scale-out takes to pay off: the executors join, then the change
            # is measured before the next one may pass (about as long again): on a ramp, a step
            # sized for the rate at the join alone is outgrown while it is measured
            ahead = self.forecaster.peak(now, 2 * self.startup_s)
        trend = _trend_ahead(view, 2 * self.startup_s)
        if trend is not None:
            ahead = max(ahead or 0.0, trend)
        backlog, rate = view.backlog(), view.offered_rate()
        if self.goals.keep_up and backlog is not None and rate and backlog > rate * (self.goals.latency_s or 1.0):
            # catch up: size for the arrivals plus the backlog drained within catch_up_s
            ahead = max(ahead or 0.0, rate + backlog / self.catch_up_s)
        self.scaling.ahead = ahead
        model = build_model(view, ahead=ahead, horizon_s=self.startup_s)
        # the utilization DS2 sizes for: the band's target, or lower when the goal needs it
        # (the batches' cycle (a + gap) / (1 - u) times k must stay within 80 % of the bound)
        target = BANDS[self.goals.favour][0]
        if model.fit is not None and model.bound_s is not None:
            target = min(target, max(1 - model.k * (model.fit.a + model.gap_s) / (0.8 * model.bound_s), 0.3))
        self.scaling.target_utilization = target
        # rising now (not a bound broken by a fixed cost more executors cannot cut)
        self.scaling.urgent = model.growing or _rising(model)
        # falling behind: the backlog outgrows the batches and the latency heads for the bound
        # (a backlog that grows over the first batches, as every job's does while it warms up,
        # is not enough)
        self.scaling.behind = model.growing and _rising(model)
        pressed = self.arbiter.pressed(model)
        log.debug(
            "autopilot batch %s: rate %s ahead %s u %s p95 projected %s behind %s pressed %s urgent %s",
            view.batch_id,
            model.rate and round(model.rate),
            ahead and round(ahead),
            model.utilization and round(model.utilization, 2),
            model.projected_s and round(model.projected_s, 1),
            model.behind,
            pressed,
            self.scaling.urgent,
        )
        undo = self.arbiter.observe(view, model, now)
        if undo:
            return undo
        busy = self.arbiter.busy()
        proposals: list[tuple[Policy, Action]] = []
        looked: list[str] = []  # the rebalancers that looked at measured loads this round
        for member in self.members:
            if isinstance(member, AlternatesByLoad) and not view.plan.alternates:
                continue
            if busy and not isinstance(member, (ModelBatchSizing, AlternatesByLoad)):
                continue  # a structural change is being applied or measured: nothing else structural yet
            rebalancer = member if isinstance(member, (KeyGroupBalancing, CollocationBalancing)) else None
            if rebalancer and now < self._quiet_until.get(member.name, -math.inf) and not pressed:
                continue  # its last look found nothing that passed, and the job is not pressed: resting
            proposed = member.propose(view)
            if rebalancer and _measured(view, rebalancer.window):
                looked.append(member.name)
            proposals.extend((member, action) for action in proposed)
        candidates = [(m.name, replace(a, reason=f"{m.name}: {a.reason}")) for m, a in _collocation_first(proposals)]
        log.debug(
            "autopilot batch %s: candidates %s", view.batch_id, [(m, a.kind, a.value) for m, a in candidates if a.structural]
        )
        accepted = [self._placed(view, a) for a in self.arbiter.judge(candidates, view, model, now)]
        for name in looked:
            if not any(a.reason.startswith(f"{name}:") for a in accepted):
                # it found nothing, or what it found was held: looking again next batch would
                # re-route idle partitions on noise, or solve again (up to its time limit,
                # between batches) for what was just held
                self._quiet_until[name] = now + self.rebalance_every_s
        return self._bounded(view, model, self._keeping_up(view, model, accepted))

    def _bounded(self, view: ControlView, model: JobModel, actions: list[Action]) -> list[Action]:
        """With the keep-up goal on elastic executors, an uncapped job keeps a cap of a batch
        the bound long on the cores it holds: after an outage the first batch would otherwise
        take every waiting row onto the cores held then, and run for as long as the scale-out
        it prompts would need to drain the lot."""
        fit, resources = model.fit, view.resources
        if (
            not self.goals.keep_up
            or not resources.elastic
            or model.bound_s is None
            or any(isinstance(a, Admission) for a in actions)
        ):
            return actions
        # never below four times the recent batches (a fit over small batches may say little)
        cap = 4 * max((m.rows_in for m in view.batches(5)), default=0)
        if fit is not None and fit.b > 0 and fit.a < model.bound_s:
            cap = max(cap, int((model.bound_s - fit.a) / fit.b))
        if cap <= 0:
            return actions
        current = view.admission_total
        if current is not None and current <= cap:
            return actions
        if current is not None and current <= 1.25 * cap and current >= 0.8 * cap:
            return actions
        return [
            *actions,
            Admission(
                rows=cap,
                reason=f"keep up: at most a batch the bound long on the cores held, or four times the recent batches: "
                f"{cap:,} rows)",
                expected={"rows": cap},
            ),
        ]

    def _keeping_up(self, view: ControlView, model: JobModel, actions: list[Action]) -> list[Action]:
        """With the keep-up goal, after an outage or a surge: when more than the bound's
        worth of input waits, admission takes all of it (those rows are late whatever the
        batch size; smaller batches would only keep them waiting and the backlog growing)."""
        latest = view.latest
        backlog = model.backlog
        if not self.goals.keep_up or backlog is None or latest is None or model.rate is None:
            return actions
        if backlog <= max(model.rate * (model.bound_s or 1.0), latest.rows_in):
            return actions
        rows = backlog + latest.rows_in
        resources = view.resources
        fit = model.fit
        asked = max([resources.target] + [a.count for a in actions if isinstance(a, Executors)])
        sized = [a for a in actions if isinstance(a, Admission)]
        current = view.admission_total
        if (
            resources.elastic
            and resources.executors < asked
            and fit is not None
            and fit.b > 0
            and model.bound_s is not None
            and fit.a < model.bound_s
        ):
            # executors asked for are still joining: a batch of it all now would run on the
            # cores held now (its tasks are placed when it starts); batches the bound long
            # until they join leave the bulk of the backlog to the cores they add
            rows = min(rows, max(int((model.bound_s - fit.a) / fit.b), latest.rows_in))
            reason = (
                f"keep up: {backlog:,} rows wait while {asked - resources.executors} executor(s) join: "
                f"batches the bound long ({rows:,} rows) until they do"
            )
            if current != rows or sized:
                return [a for a in actions if not isinstance(a, Admission)] + [
                    Admission(rows=rows, reason=reason, expected={"rows": rows})
                ]
            return actions
        if current is None and not sized:
            return actions  # uncapped: it admits what waits already
        if all(a.rows >= rows for a in sized) and sized:
            return actions
        if not sized and current is not None and current >= rows:
            return actions
        reason = (
            f"keep up: {backlog:,} rows wait, more than the bound's worth of input; admit them all "
            f"({rows:,} rows) rather than keep them waiting"
        )
        return [a for a in actions if not isinstance(a, Admission)] + [
            Admission(rows=rows, reason=reason, expected={"rows": rows})
        ]

    def _placed(self, view: ControlView, action: Action) -> Action:
        """A rescale let through, with its key groups placed by their measured loads."""
        if not isinstance(action, Partitions) or action.routing is not None or action.target not in view.plan.keyed:
            return action
        plan = view.plan
        ops = next((ops for ops in plan.keyed_stages() if action.target in ops), (action.target,))
        batches = [m for m in view.batches() if m.plan_version == plan.version][-self.scaling.window :]
        routing = balanced_routing(batches, ops, plan.keyed[action.target], action.count, plan.max_parallelism)
        if routing is None:
            return action
        placed = replace(
            action,
            routing=tuple(routing),
            reason=action.reason.replace("key groups in ranges", "key groups by measured load"),
        )
        if self.arbiter.pending is not None:
            self.arbiter.pending.actions = tuple(placed if a is action else a for a in self.arbiter.pending.actions)
        return placed


def _measured(view: ControlView, window: int) -> bool:
    """Whether ``window`` batches ran under the plan in force (a rebalancer that had fewer
    could not look yet)."""
    return sum(1 for m in view.batches() if m.plan_version == view.plan.version) >= window


def _rising(model: JobModel) -> bool:
    """Whether the goal's measured latency is rising to cross 90 % of the bound within the
    time a scale-out takes."""
    return model.projected_s is not None and model.bound_s is not None and model.projected_s > 0.9 * model.bound_s


def _collocation_first(proposals: list[tuple[Policy, Action]]) -> list[tuple[Policy, Action]]:
    """The round's proposals without balancing's routing of a stage collocation re-routes in
    the same round: collocation balances the pair itself, and re-routing it twice at once
    would leave one of the two tables unmeasured. A stage collocation leaves alone (it found
    no pair worth collocating there) stays balancing's to even out."""
    collocating: set[str] = set()
    for member, action in proposals:
        if isinstance(member, CollocationBalancing) and isinstance(action, Routing):
            collocating |= action.stages
    return [
        (member, action)
        for member, action in proposals
        if not (type(member) is KeyGroupBalancing and isinstance(action, Routing) and action.stages & collocating)
    ]


def _trend_ahead(view: ControlView, horizon_s: float, span_s: float = 30.0) -> float | None:
    """The offered rate ``horizon_s`` ahead on the line fitted to the last ``span_s`` of
    measured arrivals, when it rises (None: no rise, or too few batches)."""
    latest = view.latest
    if latest is None:
        return None
    end = latest.started_at + latest.duration_s
    batches = [m for m in view.history if not m.skipped]
    times, rates = [], []
    for i in range(min(len(batches) - 1, 200)):
        m = batches[len(batches) - 1 - i]
        t = m.started_at + m.duration_s
        if end - t > span_s:
            break
        r = view.offered_rate(1, before=i)
        if r is None:
            return None
        times.append(t)
        rates.append(r)
    if len(times) < 5 or max(times) - min(times) < span_s / 3:
        return None
    slope, level = np.polyfit(np.asarray(times) - end, np.asarray(rates), 1)
    if slope <= 0:
        return None
    return float(level + slope * horizon_s)
