"""The Plan log: every Plan is written to the checkpoint before the first batch that uses it,
so a batch replayed after a crash runs with the plan it ran with before."""

from __future__ import annotations

from sluice.errors import PlanError
from sluice.plan.physical import Plan
from sluice.runtime.checkpoint import PLANS, Checkpoint


class PlanLog:
    def __init__(self, checkpoint: str | Checkpoint):
        self.checkpoint = Checkpoint.of(checkpoint)
        self.root = self.checkpoint.uri
        self._cache: dict[int, Plan] = {}

    def versions(self) -> list[int]:
        return sorted(int(name.split(".")[0]) for name in self.checkpoint.files(PLANS) if name.endswith(".json"))

    def write(self, plan: Plan) -> None:
        self.checkpoint.write_bytes(_plan_file(plan.version), plan.to_json().encode())
        self._cache[plan.version] = plan

    def read(self, version: int) -> Plan:
        if version not in self._cache:
            data = self.checkpoint.read_bytes(_plan_file(version))
            if data is None:
                raise PlanError(f"the plan log has no plan version {version} ({self.checkpoint.path(_plan_file(version))})")
            self._cache[version] = Plan.from_json(data.decode())
        return self._cache[version]

    def plan_for(self, batch_id: int) -> Plan | None:
        """The plan with the largest version not after ``batch_id``."""
        usable = [v for v in self.versions() if v <= batch_id]
        return self.read(usable[-1]) if usable else None

    def latest(self) -> Plan | None:
        versions = self.versions()
        return self.read(versions[-1]) if versions else None


def _plan_file(version: int) -> str:
    return f"{PLANS}/{version:09d}.json"
