"""The Plan log: every Plan is written to the checkpoint before the first batch that uses it,
so a batch replayed after a crash runs with the plan it ran with before."""

from __future__ import annotations

import re

from sluice.errors import CheckpointError, PlanError
from sluice.plan.physical import Plan
from sluice.runtime.checkpoint import PLANS, Checkpoint


class PlanLog:
    def __init__(self, checkpoint: str | Checkpoint):
        self.checkpoint = Checkpoint.of(checkpoint)
        self.root = self.checkpoint.uri
        self._cache: dict[int, Plan] = {}

    def versions(self) -> list[int]:
        """Versions in the log; files of other names (a stray copy, an editor's backup) are
        not plans and are left alone."""
        return sorted(int(name[:-5]) for name in self.checkpoint.files(PLANS) if _PLAN_NAME.fullmatch(name))

    def write(self, plan: Plan) -> None:
        # synced: a batch may run with this plan only once it survives a power loss too
        self.checkpoint.write_bytes(_plan_file(plan.version), plan.to_json().encode(), durable=True)
        self._cache[plan.version] = plan

    def read(self, version: int) -> Plan:
        if version not in self._cache:
            data = self.checkpoint.read_bytes(_plan_file(version))
            if data is None:
                raise PlanError(f"the plan log has no plan version {version} ({self.checkpoint.path(_plan_file(version))})")
            try:
                self._cache[version] = Plan.from_json(data.decode())
            except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
                raise CheckpointError(
                    f"{self.checkpoint.location(_plan_file(version))} is damaged ({type(e).__name__}: {e}): "
                    f"a plan the job's batches ran with. Restore it from a backup, or run with a new "
                    f"checkpoint."
                ) from None
        return self._cache[version]

    def plan_for(self, batch_id: int) -> Plan | None:
        """The plan with the largest version not after ``batch_id``."""
        usable = [v for v in self.versions() if v <= batch_id]
        return self.read(usable[-1]) if usable else None

    def latest(self) -> Plan | None:
        versions = self.versions()
        return self.read(versions[-1]) if versions else None


_PLAN_NAME = re.compile(r"\d+\.json")


def _plan_file(version: int) -> str:
    return f"{PLANS}/{version:09d}.json"
