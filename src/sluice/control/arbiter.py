"""The arbiter: which of the policies' proposals are applied after this batch (docs/control.md).

- At most one structural change (chains, threads, partitions) at a time. After one is
  applied at batch b, further structural proposals wait until the QoS manager's windows hold
  no measurement of batch b or earlier (Nephele's flush rule): the controller never reacts
  to the transient of its own change.
- A policy that judges its own changes (``Policy.arbitrates``: the autopilot, whose arbiter
  measures each change before the next) is not held back by the flush rule: it would hold
  a scale-out the job needs for a whole window after any change.
- An ``executors`` change may go with one other structural change of the same policy in the
  same batch: the resources and the parallelism that uses them move in one step (DS2).
- Batch sizing (``admission``) may act every batch; if several policies size the same
  target, the first policy in the configured order wins. SwitchAlternate switches likewise: any
  number of operators a batch, the first policy wins an operator.
- Escalations always pass: they change nothing, they report.
- A proposal equal to what is in force is dropped (no churn in the log).

Pure: no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

from sluice.control.actions import Action, Admission, Escalate, Executors, SwitchAlternate
from sluice.control.qos import QoSManager


@dataclass
class Verdict:
    accepted: list[Action]
    deferred: list[tuple[Action, str]]  # with why


class Arbiter:
    def __init__(self) -> None:
        self.structural_at: int | None = None  # batch after which the last structural change applied
        self.structural_action: Action | None = None

    def waiting(self, qos: QoSManager) -> bool:
        """True while the last structural change's old measurements are still in a window."""
        if self.structural_at is None:
            return False
        if qos.flushed(self.structural_at):
            self.structural_at = None
            return False
        return True

    def arbitrate(
        self,
        proposals: list[Action],
        batch_id: int,
        qos: QoSManager,
        in_force: dict[tuple[str, str], object],
        self_judged: frozenset[str] = frozenset(),
    ) -> Verdict:
        """``in_force``: (kind, target) -> the value in force now, to drop no-op proposals;
        ``self_judged``: the policies that measure their own changes (no flush rule for them)."""
        accepted: list[Action] = []
        deferred: list[tuple[Action, str]] = []
        sized: set[str] = set()
        switched: set[tuple[str, str]] = set()
        structural_taken: Action | None = None
        paired = False  # an executors change went with the structural change taken
        waiting = self.waiting(qos)
        for action in proposals:
            if isinstance(action, Escalate):
                accepted.append(action)
            elif isinstance(action, Admission):
                if action.target in sized:
                    deferred.append((action, "another policy sized this target first"))
                elif in_force.get((action.kind, action.target)) == action.value:
                    sized.add(action.target)
                else:
                    sized.add(action.target)
                    accepted.append(action)
            elif isinstance(action, SwitchAlternate):  # a switch: one per target a batch, the first policy's
                if (action.kind, action.target) in switched:
                    deferred.append((action, "another policy switched this target first"))
                elif in_force.get((action.kind, action.target)) != action.value:
                    accepted.append(action)
                switched.add((action.kind, action.target))
            elif in_force.get((action.kind, action.target)) == action.value:
                continue
            elif waiting and action.policy not in self_judged:
                deferred.append(
                    (
                        action,
                        f"waiting for the windows to flush measurements taken before the change after batch {self.structural_at}",
                    )
                )
            elif structural_taken is not None:
                if not paired and _one_step(structural_taken, action):
                    paired = True
                    accepted.append(action)
                else:
                    deferred.append((action, "one structural change at a time"))
            else:
                structural_taken = action
                accepted.append(action)
                self.structural_at = batch_id
                self.structural_action = action
        return Verdict(accepted, deferred)


def _one_step(taken: Action, action: Action) -> bool:
    """Whether ``action`` goes with the structural change ``taken``: one of them is an
    ``executors`` change, the other is not, and the same policy proposed both."""
    return action.policy == taken.policy and isinstance(action, Executors) != isinstance(taken, Executors)
