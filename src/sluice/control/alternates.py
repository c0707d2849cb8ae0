"""``AlternatesByLoad``: the most valuable alternates the job's cores can keep up with.

A simple live policy for operators with alternates (the thesis's runtime adaptation of
alternates, section 4.8.2, without the VM side: the elastic policies add executors):

- **down** when the job falls behind: a latency constraint is violated, the cores are busier
  than ``high``, or the relative throughput over the last batches (rows processed a second
  over rows arriving a second) is under ``min_omega`` while the active alternate's predicted
  load at the offered rate is over ``target``. A throughput dip the active alternate's load
  does not explain (one batch stalled by other work on the machine, with the cores mostly
  idle) is no reason to give up value: a cheaper alternate would not have prevented it, and
  switching down on it and back up once it passes is thrash. The operator switches to the
  most valuable of its less valuable, cheaper alternates whose predicted load fits
  ``target``, else to the cheapest.
- **up** when there is slack: all is well and the predicted load with a more valuable
  alternate stays within ``target``. It switches to the most valuable such alternate.

The load is the share of the cores the batches' tasks kept busy (task time over wall time
and cores). The load an alternate ``b`` would need at the offered rate is
``offered * (other + share * cost_b) / cores``: ``other`` is the task time per admitted row
of everything but the operator's active alternate, ``share`` the rows reaching the operator
per admitted row, and the costs are as measured while each alternate ran, else as declared
(``ControlView.alternate_cost``).
It decides on ``window`` batches run under the plan in force, so it never judges a switch by
the batches before it.

Pure: no Spark.
"""

from __future__ import annotations

from sluice.control.actions import Action, SwitchAlternate
from sluice.control.policy import Policy
from sluice.control.view import ControlView


class AlternatesByLoad(Policy):
    """Pick each operator's alternate by the load the job's cores can carry (see the module)."""

    name = "alternates_by_load"

    def __init__(self, target: float = 0.6, high: float = 0.9, min_omega: float = 0.95, window: int = 3):
        if not 0 < target < high <= 1.5 or not 0 <= min_omega <= 1 or window < 1:
            raise ValueError("alternates_by_load: 0 < target < high <= 1.5, 0 <= min_omega <= 1 and window >= 1")
        self.target, self.high, self.min_omega, self.window = target, high, min_omega, window

    def describe(self) -> dict:
        return {"policy": self.name, "target": self.target, "high": self.high, "min_omega": self.min_omega, "window": self.window}

    def propose(self, view: ControlView) -> list[Action]:
        batches = [m for m in view.batches() if m.plan_version == view.plan.version][-self.window :]
        if len(batches) < self.window:
            return []
        wall = sum(m.duration_s for m in batches)
        cores = max(view.resources.cores, 1)
        busy = sum(v.busy_s for m in batches for v in m.operators.values())
        load = busy / (wall * cores) if wall > 0 else 0.0
        admitted = sum(m.rows_in for m in batches)
        if admitted <= 0 or wall <= 0:
            return []
        arriving = view.offered_rate(self.window)
        offered = arriving or admitted / wall
        # Omega over the window: the rate processed over the rate arriving (one batch's Omega
        # swings with the length of the batch before it)
        omega = None if arriving is None else min(admitted / wall / arriving, 1.0) if arriving > 0 else 1.0
        violated = [name for name, s in view.status.items() if s.state == "violated"]
        pressed = bool(violated) or load > self.high
        slow = omega is not None and omega < self.min_omega
        actions: list[Action] = []
        for op_id, active in sorted(view.plan.alternates.items()):
            alternates = view.alternates(op_id)
            costs = {name: view.alternate_cost(op_id, name) for name in alternates}
            if costs.get(active) is None:
                continue
            share = sum(float(m.operators[op_id].rows_in) for m in batches if op_id in m.operators) / admitted
            # the work of everything else, per row admitted: what the active alternate did not do
            other = max(busy - share * admitted * costs[active], 0.0) / admitted

            def load_at_offered(name: str, costs=costs, share=share, other=other) -> float:
                cost = costs.get(name)
                return float("inf") if cost is None else offered * (other + share * cost) / cores

            values = {name: alt.value for name, alt in alternates.items()}
            by_value = sorted(values, key=lambda n: -values[n])
            fitting = [n for n in by_value if load_at_offered(n) <= self.target]
            why = (
                f"cores {load:.2f} busy, {offered:,.0f} rows/s offered, {active} would need "
                f"{load_at_offered(active):.2f} of {cores} cores"
                + (f", Omega {omega:.2f}" if omega is not None else "")
                + (f", {violated} violated" if violated else "")
            )
            # a throughput shortfall is the alternate's when its load at the offered rate is over the target
            if pressed or (slow and load_at_offered(active) > self.target):  # down: to a cheaper alternate
                known = {n: c for n, c in costs.items() if c is not None}  # the active one among them
                lower = [
                    n
                    for n in by_value
                    if alternates[n].value < alternates[active].value and n in known and known[n] < known[active]
                ]
                if not lower:
                    continue
                fits = [n for n in lower if n in fitting]
                choice = fits[0] if fits else min(lower, key=known.__getitem__)
                if choice != active:
                    actions.append(
                        SwitchAlternate(
                            target=op_id,
                            alternate=choice,
                            reason=f"behind ({why}): {active} -> {choice}",
                            expected={"load": round(load_at_offered(choice), 3)},
                        )
                    )
            elif fitting and alternates[fitting[0]].value > alternates[active].value:
                choice = fitting[0]
                actions.append(
                    SwitchAlternate(
                        target=op_id,
                        alternate=choice,
                        reason=f"slack ({why}): {choice} would need {load_at_offered(choice):.2f} "
                        f"<= {self.target}: {active} -> {choice}",
                        expected={"load": round(load_at_offered(choice), 3)},
                    )
                )
        return actions
