"""The Plan log: every Plan is written to the checkpoint before the first batch that uses it,
so a batch replayed after a crash runs with the plan it ran with before."""

from __future__ import annotations

from sluice.plan.physical import Plan
from sluice.runtime.files import filesystem, list_files, read_bytes, write_atomic


class PlanLog:
    def __init__(self, checkpoint: str):
        self.fs, base = filesystem(checkpoint)
        self.dir = f"{base}/plans"
        self._cache: dict[int, Plan] = {}

    def versions(self) -> list[int]:
        return sorted(int(p.rsplit("/", 1)[1].split(".")[0]) for p in list_files(self.fs, self.dir) if p.endswith(".json"))

    def write(self, plan: Plan) -> None:
        write_atomic(self.fs, f"{self.dir}/{plan.version:09d}.json", plan.to_json().encode())
        self._cache[plan.version] = plan

    def read(self, version: int) -> Plan:
        if version not in self._cache:
            self._cache[version] = Plan.from_json(read_bytes(self.fs, f"{self.dir}/{version:09d}.json").decode())
        return self._cache[version]

    def plan_for(self, batch_id: int) -> Plan | None:
        """The plan with the largest version not after ``batch_id``."""
        usable = [v for v in self.versions() if v <= batch_id]
        return self.read(usable[-1]) if usable else None

    def latest(self) -> Plan | None:
        versions = self.versions()
        return self.read(versions[-1]) if versions else None
