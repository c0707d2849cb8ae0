"""The Policy interface: ``propose(view) -> list[Action]``.

A policy is a small pure class (no Spark import): it reads a ``ControlView`` and proposes
actions, each with a reason and an expected effect. It does not apply anything; the
controller's arbiter decides what is applied and when (``sluice.control.controller``).
Policies may keep state between calls (a fitted model, say); ``restore(history)`` lets one
warm up from the batches of an earlier run of the same checkpoint.
"""

from __future__ import annotations

from sluice.control.actions import Action
from sluice.control.view import ControlView


class Policy:
    """Base class of every control policy. Subclasses set ``name`` and implement ``propose``."""

    name: str = "policy"
    arbitrates: bool = False
    """True for a policy that measures each of its changes before the next (the autopilot):
    the controller's flush rule does not hold its structural changes back."""

    def propose(self, view: ControlView) -> list[Action]:
        raise NotImplementedError

    def restore(self, history: list) -> None:
        """Warm up from earlier batches' metrics (a restart); the default ignores them."""

    def drain_notes(self) -> list[dict]:
        """Proposals the policy held back since the last call, each with its reason (the
        controller logs them as ``held`` records); the default has none."""
        return []

    def describe(self) -> dict:
        """The policy's settings, for the decisions log and the docs."""
        return {"policy": self.name}
