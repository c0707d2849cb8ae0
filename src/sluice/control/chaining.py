"""Dynamic task chaining (Nephele section 3.5.2) as a control policy.

Between batches the policy reads each Python operator's measured work and rows, the
partitions of each chainable run's input and the cores, and predicts with
``sluice.plan.chaining.RunCosts`` how long the run takes fused and with a rebalance exchange
before each of its operators. When another layout is predicted at least ``min_gain`` faster
than the one in force, it proposes it; the controller applies it from the next batch through
the plan log (a replay keeps the chains it ran with), one structural change at a time.

The prediction is then checked against what happens: once the new layout has run a few
batches, its measured time per row is compared with that of the layout it replaced, and a
change that made things worse is undone and not tried again for a while. So a wrong
estimate of what a pass or an exchange costs (``pass_us_per_row``, ``exchange_us_per_row``)
costs a few batches, not the job.

A user's ``chain=False`` is respected: such an operator is never in a run with others.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.control.actions import Action, Chains
from sluice.control.policy import Policy
from sluice.control.view import ControlView
from sluice.core.metrics import OperatorProgress
from sluice.plan.chaining import RunCosts, best_cut, chainable_runs, run_layout, with_layout

PASS_US_PER_ROW = 0.25
"""What one more mapInArrow pass costs per row (Arrow from the JVM into a Python worker and
back), in microseconds, on a 2-core machine with a few numeric columns. A starting estimate
(``benchmarks/chaining.py`` measures it): the measured effect of every change is checked."""

EXCHANGE_US_PER_ROW = 1.0
"""What a rebalance exchange (shuffle write and read) costs per row, in microseconds: a
starting estimate, checked the same way."""

ALL = "*"
Layout = tuple  # (chains, rebalance as sorted items): what this policy changes in a Plan


@dataclass
class _Trial:
    """A change made by this policy, awaiting its measured verdict."""

    before: Layout
    after: Layout
    before_s_per_row: float


class DynamicChaining(Policy):
    """Fuse chains of Python operators, or rebalance before a costly one, by measured work.

    ``min_gain``: the predicted saving a change must promise (a share of the run's time);
    ``min_batches``: batches measured under the layout in force before judging it;
    ``worse_by``: how much slower per row a change may measure before it is undone;
    ``ban_batches``: how long an undone change is not proposed again;
    ``min_saving_s``: the least predicted saving a batch worth adding a rebalance (an
    exchange is a stage of its own, whose fixed cost the per-row estimate leaves out; a
    saving of a few milliseconds a batch is within the noise of the work it is predicted
    from).
    """

    name = "chaining"

    def __init__(
        self,
        min_gain: float = 0.15,
        min_batches: int = 3,
        pass_us_per_row: float = PASS_US_PER_ROW,
        exchange_us_per_row: float = EXCHANGE_US_PER_ROW,
        worse_by: float = 0.05,
        ban_batches: int = 50,
        min_saving_s: float = 0.01,
    ):
        if not 0 < min_gain < 1:
            raise ValueError(f"min_gain must be between 0 and 1, got {min_gain}")
        if min_batches < 1:
            raise ValueError(f"min_batches must be >= 1, got {min_batches}")
        self.min_gain = min_gain
        self.min_batches = min_batches
        self.pass_us_per_row = pass_us_per_row
        self.exchange_us_per_row = exchange_us_per_row
        self.worse_by = worse_by
        self.ban_batches = ban_batches
        self.min_saving_s = min_saving_s
        self.trial: _Trial | None = None
        self.banned: dict[Layout, int] = {}  # layout -> banned until this batch
        self.input_tasks: dict[str, float] = {}  # run head -> partitions of its input, as last measured

    def describe(self) -> dict:
        return {
            "policy": self.name,
            "min_gain": self.min_gain,
            "min_batches": self.min_batches,
            "pass_us_per_row": self.pass_us_per_row,
            "exchange_us_per_row": self.exchange_us_per_row,
            "min_saving_s": self.min_saving_s,
        }

    def propose(self, view: ControlView) -> list[Action]:
        plan = view.plan
        batches = [m for m in view.batches() if m.plan_version == plan.version][-self.min_batches :]
        if len(batches) < self.min_batches:
            return []  # the layout in force is not measured yet (or another change is settling)
        s_per_row = sum(m.duration_s for m in batches) / max(sum(m.rows_in for m in batches), 1)
        layout = _layout(plan.chains, plan.rebalance)
        undo = self._judge_trial(view, layout, s_per_row)
        if undo is not None:
            return [undo]
        cores = max(int(view.resources.cores), 1)
        for run in chainable_runs(view.graph):
            if len(run) < 2 and view.resources.cores <= 1:
                continue
            costs = self._costs(run, plan, batches, cores)
            if costs is None:
                continue
            at = run_layout(run, plan.chains, plan.rebalance)
            passes = sum(1 for chain in plan.chains if chain and chain[0] in run)
            now = costs.time(at) + (passes - (2 if at else 1)) * costs.rows[0] * costs.pass_s_per_row / min(
                max(costs.tasks, 1.0), cores
            )
            best, predicted = best_cut(costs)
            if (
                (best == at and passes == (2 if at else 1))
                or predicted > now * (1 - self.min_gain)
                or (best is not None and now - predicted < self.min_saving_s)
            ):
                continue
            chains, rebalance = with_layout(plan.chains, plan.rebalance, run, best, cores)
            new = _layout(chains, rebalance)
            if self.banned.get(new, -1) >= view.batch_id:
                continue
            self.trial = _Trial(layout, new, s_per_row)
            return [
                Chains(
                    target=ALL,
                    chains=chains,
                    rebalance=rebalance,
                    reason=_reason(run, best, costs, now, predicted),
                    expected={"run_ms": round(predicted * 1000, 2), "run_ms_before": round(now * 1000, 2)},
                )
            ]
        return []

    def _costs(self, run: tuple[str, ...], plan, batches, cores: int) -> RunCosts | None:
        """The run's costs per batch from the batches' operator metrics, or None if not measured.

        Each pass reports its tasks under its first operator (``runtime.batch.stages.python_chain``);
        the tasks of the run's first pass are its input's partitions unless a rebalance
        precedes it, in which case the partitions measured before are used."""
        ops = [[m.operators.get(op) or OperatorProgress() for m in batches] for op in run]
        work = tuple(sum(float(x.time_s) for x in per) / len(batches) for per in ops)
        rows = tuple(sum(float(x.rows_in) for x in per) / len(batches) for per in ops)
        if rows[0] <= 0:
            return None
        if run[0] not in plan.rebalance:
            tasks = sum(float(x.counters.get("tasks", 0.0)) for x in ops[0]) / len(batches)
            if tasks <= 0:
                return None
            self.input_tasks[run[0]] = tasks
        tasks = self.input_tasks.get(run[0], 1.0)
        return RunCosts(
            work_s=work,
            rows=rows,
            tasks=tasks,
            cores=cores,
            pass_s_per_row=self.pass_us_per_row * 1e-6,
            exchange_s_per_row=self.exchange_us_per_row * 1e-6,
        )

    def _judge_trial(self, view: ControlView, layout: Layout, s_per_row: float) -> Action | None:
        """Once the layout this policy set has been measured: undo it if it is slower."""
        trial = self.trial
        if trial is None or layout != trial.after:
            return None
        self.trial = None
        if s_per_row <= trial.before_s_per_row * (1 + self.worse_by):
            return None
        self.banned[trial.after] = view.batch_id + self.ban_batches
        chains, rebalance = trial.before
        return Chains(
            target=ALL,
            chains=chains,
            rebalance=dict(rebalance),
            reason=f"undone: the new chains measured {s_per_row * 1e6:.2f} us a row against "
            f"{trial.before_s_per_row * 1e6:.2f} before the change; not tried again "
            f"for {self.ban_batches} batches",
            expected={"us_per_row": round(trial.before_s_per_row * 1e6, 3)},
        )


def _layout(chains, rebalance: dict[str, int]) -> Layout:
    return (tuple(tuple(c) for c in chains), tuple(sorted(rebalance.items())))


def _reason(run, best: int | None, costs: RunCosts, now: float, predicted: float) -> str:
    work = " + ".join(f"{w * 1000:.1f}" for w in costs.work_s)
    setting = f"its input has {costs.tasks:g} partition(s) for {costs.cores} cores"
    if best is None:
        why = (
            f"fuse {'+'.join(run)} into one pass: {work} ms of work a batch; {setting}, so a rebalance "
            f"or another pass costs more than it gives"
        )
    else:
        why = (
            f"rebalance over {costs.cores} partitions before {run[best]}: {work} ms of work a batch and "
            f"{setting}, so its work runs on {min(max(costs.tasks, 1.0), costs.cores):g} core(s)"
        )
    return f"{why}; predicted {now * 1000:.1f} -> {predicted * 1000:.1f} ms a batch"
