"""The Controller: the control loop between micro-batches (docs/control.md).

After each batch the executor calls ``controller(metrics, plan)``. The controller

1. gives the batch's metrics to the QoS manager (the windows of every constraint) and
   measures the effect of the decisions the batch ran with;
2. builds a read-only ``ControlView`` and asks every policy, in the configured order, for
   proposals;
3. lets the arbiter pick what to apply (one structural change at a time, flush rule);
4. applies it: admission limits now (the next batch Spark plans reads them), executors
   through its executor actuator (``control.executors``: released now, added ones join when
   they register), structural changes as the Plan it returns for ``batch_id + 1``;
5. logs every decision and escalation to ``<checkpoint>/decisions.jsonl`` and keeps the
   state for the progress line and the dashboard (``state()``).

Pure of Spark itself (the actuators it is given touch files), so the simulator and the
pure tests drive the same object.
"""

from __future__ import annotations

import logging
import re
import time
import warnings
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING

from sluice.control.actions import (
    ALL_SOURCES,
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
from sluice.control.actuators import MemoryAdmission, apply_admission
from sluice.control.arbiter import Arbiter
from sluice.control.decisions import DecisionLog
from sluice.control.executors import ExecutorActuator, FixedExecutors
from sluice.control.policy import Policy
from sluice.control.qos import MET, UNKNOWN, VIOLATED, QoSManager
from sluice.control.swap import PolicySwaps
from sluice.control.view import ControlView, Resources
from sluice.core.decisions import Decision, Escalation, LoggedAction, Measured, PolicyFailed, Rejected
from sluice.errors import ConfigError
from sluice.graph.alternates import alternates_of

if TYPE_CHECKING:
    from sluice.core.checkpoint import Checkpoint

log = logging.getLogger("sluice.control")

HISTORY_BATCHES = 60
"""Batches of metrics a view holds (policies fit their models on them)."""

ADAPTING_BATCHES = 3
"""A constraint counts as adapting for this many batches after a change is applied."""


class EscalationWarning(UserWarning):
    """A latency constraint cannot be met by any countermeasure at the offered rate."""


class Controller:
    """The control loop between micro-batches: after each batch, ``controller(metrics, plan)``
    measures the batch against the constraints, asks the policies for proposals, lets the
    arbiter pick, applies what it picked (admission now, executors, or a plan for the next
    batch) and logs every decision to ``<checkpoint>/decisions.jsonl``. The runtime makes
    one per job; the simulator and tests drive it directly."""

    def __init__(
        self,
        graph,
        policies: list[Policy],
        *,
        checkpoint: str | Checkpoint | None = None,
        admission: MemoryAdmission | None = None,
        resources: Resources | None = None,
        history: list | None = None,
        executors: ExecutorActuator | None = None,
        swaps: PolicySwaps | None = None,
    ):
        """``resources``: fixed resources (``executors`` actions are rejected); ``executors``:
        an actuator that reports them after every batch and holds what the policies ask for;
        ``swaps``: where to look for new policies after every batch (``control.swap``)."""
        self.graph = graph
        self.constraints = tuple(graph.constraints)
        self.policies = list(policies)
        self.qos = QoSManager(list(self.constraints))
        self.arbiter = Arbiter()
        self.admission = admission or MemoryAdmission([op.id for op in graph.sources()])
        self.executors: ExecutorActuator = executors or FixedExecutors(resources or Resources())
        self.log = DecisionLog(checkpoint)
        self.history: deque = deque(history or [], maxlen=HISTORY_BATCHES)
        for policy in self.policies:
            policy.restore(list(self.history))
        self.escalated: dict[str, dict] = {}  # constraint -> details of the escalation in force
        self.unmeasured: list[tuple[int, Action]] = []  # (decision id, action) awaiting their first batch
        self.last_change_batch: int | None = None
        self.last_decision: dict | None = None
        self.decisions = 0
        self.swaps = swaps
        self._deferral_said: dict[tuple[str, str, str], str] = {}  # (policy, kind, target) -> why, last logged

    # ---- the loop ------------------------------------------------------------------------------
    def __call__(self, metrics, plan):
        """After batch ``metrics.batch_id``: returns the Plan for the next batch, or None."""
        if metrics.skipped:
            return None
        self.history.append(metrics)
        self.qos.observe(metrics)
        self._measure(metrics)
        for swap in self.swaps.poll(metrics.batch_id) if self.swaps is not None else ():
            if swap.policies is None:
                self.log.append(
                    Rejected(
                        batch_id=metrics.batch_id, time=_now(), policy="control", reason=f"new policies not loaded: {swap.error}"
                    )
                )
                log.warning("batch %d: new policies not loaded: %s", metrics.batch_id, swap.error)
            else:
                self.replace_policies(swap.policies, metrics.batch_id, swap.source)
        view = self.view(metrics.batch_id, plan)
        proposals = []
        for policy in list(self.policies):
            try:
                proposed = [_signed(action, policy.name) for action in policy.propose(view)]
                # a policy is any object with a name and propose(); notes are optional
                drain = getattr(policy, "drain_notes", None)
                notes = list(drain()) if drain is not None else []
            except Exception as exc:  # a policy's bug must never stop the job
                self._disable(metrics.batch_id, policy, exc)
                continue
            proposals.extend(proposed)
            for note in notes:  # proposals a policy held back itself, and why
                self.log.append({"type": "held", "batch_id": metrics.batch_id, "time": _now(), "policy": policy.name, **note})
        self_judged = frozenset(p.name for p in self.policies if getattr(p, "arbitrates", False))
        verdict = self.arbiter.arbitrate(proposals, metrics.batch_id, self.qos, self._in_force(plan), self_judged)
        self._log_deferrals(metrics.batch_id, verdict)
        new_plan = None
        escalating = set()
        for action in verdict.accepted:
            if isinstance(action, Escalate):
                escalating.add(action.target)
                self._escalate(metrics.batch_id, action)
            elif isinstance(action, Admission):
                apply_admission(self.admission, action, view.source_shares())
                self._decided(metrics.batch_id, action, view)
            elif isinstance(action, Executors):
                try:
                    self.executors.set_total(action.count)
                except ConfigError as exc:
                    self._reject(metrics.batch_id, action, str(exc))
                    continue
                new_plan = action.apply(new_plan or plan, metrics.batch_id + 1)
                self._decided(metrics.batch_id, action, view)
            else:
                problem = self._invalid(action)
                if problem is not None:
                    self._reject(metrics.batch_id, action, problem)
                    continue
                new_plan = action.apply(new_plan or plan, metrics.batch_id + 1)
                self._decided(metrics.batch_id, action, view)
        for name in list(self.escalated):
            if name not in escalating:  # the bound holds again, or can: say so once
                self._end_escalation(metrics.batch_id, name)
        return new_plan

    def _log_deferrals(self, batch_id: int, verdict) -> None:
        """A ``held`` record for each proposal the arbiter deferred, once until its reason
        changes (a flush can defer the same proposal for a whole window, batch after batch):
        a change a policy asked for and nobody applied must be visible in the log."""
        for action in verdict.accepted:
            self._deferral_said.pop((action.policy, action.kind, action.target), None)
        for action, why in verdict.deferred:
            key = (action.policy, action.kind, action.target)
            gist = re.sub(r"[\d.,]+", "#", why)  # its figures (a batch id) change; the reason does not
            if self._deferral_said.get(key) == gist:
                continue
            self._deferral_said[key] = gist
            self.log.append(
                {
                    "type": "held",
                    "batch_id": batch_id,
                    "time": _now(),
                    "policy": action.policy,
                    "member": action.policy,
                    "kind": action.kind,
                    "target": action.target,
                    "reason": f"held: {why}",
                    "proposal": action.reason,
                }
            )

    def _disable(self, batch_id: int, policy: Policy, exc: BaseException) -> None:
        """A policy raised (a division by zero, a guard that exhausts memory): it is dropped
        for the rest of the run, the job goes on with the others, and the decision log says
        which policy failed and how (``sluice control`` swaps in mended policies)."""
        self.policies.remove(policy)
        reason = f"policy failed and is disabled for this run: {type(exc).__name__}: {exc}"[:2000]
        self.log.append(PolicyFailed(batch_id=batch_id, time=_now(), policy=policy.name, reason=reason))
        log.error("batch %d: %s %s", batch_id, policy.name, reason)

    def replace_policies(self, policies: list[Policy], batch_id: int, source: str = "replace_policies") -> None:
        """Put ``policies`` in force from now on (after batch ``batch_id``: what they propose
        applies from the next batch), warmed up on the recent batches; logged as a decision."""
        previous = [p.describe() for p in self.policies]
        self.policies = list(policies)
        for policy in self.policies:
            policy.restore(list(self.history))
        names = ", ".join(p.name for p in self.policies) or "none"
        swap = LoggedAction(
            kind="policies", target=ALL_SOURCES, value=names, reason=f"policies replaced from {source}", policy="control"
        )
        record = Decision(
            id=self.log.next_id(),
            batch_id=batch_id,
            time=_now(),
            policy="control",
            action=swap,
            policies=[p.describe() for p in self.policies],
            previous=previous,
        ).to_dict()
        self.log.append(record)
        self.last_decision = record
        self.last_change_batch = batch_id
        self.decisions += 1
        log.info("batch %d: policies replaced from %s: %s", batch_id, source, names)

    def view(self, batch_id: int, plan) -> ControlView:
        return ControlView(
            batch_id=batch_id,
            graph=self.graph,
            plan=plan,
            constraints=self.constraints,
            status=self.qos.statuses(),
            history=tuple(self.history),
            admission=self.admission.current(),
            resources=self.resources,
        )

    @property
    def resources(self) -> Resources:
        """The job's resources now, as the executor actuator reports them."""
        return self.executors.resources()

    # ---- bookkeeping ---------------------------------------------------------------------------
    def _in_force(self, plan) -> dict:
        current = self.admission.current()
        out: dict = {(Admission.kind, source): rows for source, rows in current.items()}
        if current and all(v is not None for v in current.values()):
            out[(Admission.kind, ALL_SOURCES)] = sum(current.values())
        out[(Chains.kind, ALL_SOURCES)] = plan.chains
        for op, n in plan.threads.items():
            out[(Threads.kind, op)] = n
        for op, stage in plan.keyed.items():
            out[(Partitions.kind, op)] = stage.partitions
            out[(Routing.kind, op)] = list(stage.routing)
        for op, alternate in plan.alternates.items():
            out[(SwitchAlternate.kind, op)] = alternate
        out[(Executors.kind, ALL_SOURCES)] = self.resources.target
        return out

    def _decided(self, batch_id: int, action: Action, view: ControlView) -> None:
        decision_id = self.log.next_id()
        record = Decision(
            id=decision_id,
            batch_id=batch_id,
            time=_now(),
            policy=action.policy,
            action=_logged(action),
            constraints={name: s.to_dict() for name, s in view.status.items()},
        ).to_dict()
        self.log.append(record)
        self.unmeasured.append((decision_id, action))
        self.last_change_batch = batch_id
        self.last_decision = record
        self.decisions += 1
        log.info("batch %d: %s %s -> %s (%s)", batch_id, action.kind, action.target, action.value, action.reason)

    def _invalid(self, action: Action) -> str | None:
        """Why an accepted action cannot be applied to this job, checked before the next Plan
        is logged (a logged plan that cannot run would fail every replay of its batch)."""
        if isinstance(action, SwitchAlternate):
            if action.target not in self.graph or not alternates_of(self.graph[action.target]):
                return f"{action.target!r} is no operator with alternates"
            if action.alternate not in alternates_of(self.graph[action.target]):
                return (
                    f"{action.target!r} has no alternate {action.alternate!r}; its alternates: "
                    f"{sorted(alternates_of(self.graph[action.target]))}"
                )
        return None

    def _reject(self, batch_id: int, action: Action, problem: str) -> None:
        """An accepted action that cannot be applied to this job: logged, warned about, not applied."""
        self.log.append(Rejected(batch_id=batch_id, time=_now(), policy=action.policy, action=_logged(action), reason=problem))
        log.warning("batch %d: %s's %s action rejected: %s", batch_id, action.policy, action.kind, problem)

    def _measure(self, metrics) -> None:
        """The measured effect of decisions made before this batch, on its first batch with rows."""
        if not self.unmeasured or metrics.rows_in == 0:
            return
        measured = {"batch_ms": round(metrics.duration_s * 1000, 2), "rows": metrics.rows_in}
        latencies = [p["mean_ms"] for p in (metrics.paths or {}).values()]
        if latencies:
            measured["latency_ms"] = max(latencies)
        p95s = [p["p95_ms"] for p in (metrics.paths or {}).values() if p.get("p95_ms") is not None]
        if p95s:
            measured["p95_ms"] = max(p95s)
        traffic = {op: t.collocation for op, t in metrics.traffic.items() if t.collocation is not None}
        if traffic:  # beside a collocation's expected factor: the one measured (runtime.batch.traffic)
            measured["collocation"] = {op: round(factor, 4) for op, factor in traffic.items()}
        for decision_id, action in self.unmeasured:
            record = Measured(
                decision=decision_id, batch_id=metrics.batch_id, time=_now(), expected=dict(action.expected), measured=measured
            )
            self.log.append(record)
        self.unmeasured = []

    def _escalate(self, batch_id: int, action: Escalate) -> None:
        details = dict(action.details)
        previous = self.escalated.get(action.target)
        self.escalated[action.target] = details
        if previous is not None:
            return  # already said; the state shows it until it ends
        self.log.append(
            Escalation(
                batch_id=batch_id,
                time=_now(),
                constraint=action.target,
                state="started",
                policy=action.policy,
                details=details,
                reason=action.reason,
            )
        )
        warnings.warn(f"latency constraint {action.target!r} cannot be met: {action.reason}", EscalationWarning, stacklevel=2)
        log.warning("constraint %s cannot be met: %s", action.target, action.reason)

    def _end_escalation(self, batch_id: int, name: str) -> None:
        details = self.escalated.pop(name)
        self.log.append(
            Escalation(
                batch_id=batch_id,
                time=_now(),
                constraint=name,
                state="ended",
                details=details,
                reason="the bound can hold at the offered rate again",
            )
        )

    # ---- what the progress line and the dashboard show -------------------------------------------
    def constraint_state(self, name: str) -> str:
        """met / violated / adapting / escalated / unknown."""
        if name in self.escalated:
            return "escalated"
        status = self.qos.status(name)
        latest = self.history[-1].batch_id if self.history else None
        recent = self.last_change_batch is not None and latest is not None and latest - self.last_change_batch < ADAPTING_BATCHES
        if status.state == VIOLATED and (recent or self.arbiter.structural_at is not None):
            return "adapting"
        return status.state if status.state in (MET, VIOLATED) else UNKNOWN

    def state(self) -> dict:
        """Each constraint's state and window figures, the last decision, escalations."""
        return {
            "constraints": {
                name: {**self.qos.status(name).to_dict(), "state": self.constraint_state(name)} for name in self.qos.constraints
            },
            "admission": self.admission.current(),
            "last_decision": self.last_decision,
            "escalations": dict(self.escalated),
            "decisions": self.decisions,
        }


def _now() -> float:
    """A record's time: epoch seconds to the millisecond."""
    return round(time.time(), 3)


def _logged(action: Action) -> LoggedAction:
    """An action as the decisions log keeps it."""
    return LoggedAction(**action.to_dict())


def _signed(action: Action, policy: str) -> Action:
    if not isinstance(action, Action):
        raise TypeError(f"policy {policy!r} proposed {action!r}; a policy proposes sluice.control.actions.Action objects")
    return action if action.policy == policy else replace(action, policy=policy)
