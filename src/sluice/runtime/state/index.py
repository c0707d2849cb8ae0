"""What the driver knows about committed state: delta-file descriptors and the index over them.

Both classes are small, immutable and picklable, because the driver ships a ``StateIndex`` to
every task of a keyed stage inside the batch's closure, and tasks hand the ``DeltaFile`` they
wrote back to the driver (as JSON, through ``to_dict``/``from_dict``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DeltaFile:
    """One Arrow IPC file of state rows, sorted by ``__kg``.

    It is either the delta one (batch, partition) task wrote (upserts and deletions of the key
    groups it processed) or one part of a compacted snapshot (batch_id is then the batch the
    snapshot is "as of"). ``row_ranges[kg] = (start, stop)`` locates a key group's rows.
    """

    path: str  # relative to the operator's store root (<root>/state/<operator_id>/)
    batch_id: int
    key_groups: tuple[int, ...]
    row_ranges: dict[int, tuple[int, int]]
    rows: int
    bytes: int
    checksum: str  # "sha256:<hex>" of the whole file's bytes
    kind: str = field(default="delta")  # "delta" or "snapshot"

    # A dict field makes the generated hash fail; a file is identified by path + content.
    def __hash__(self) -> int:
        return hash((self.path, self.checksum))

    def kg_rows(self, kg: int) -> int:
        start, stop = self.row_ranges.get(kg, (0, 0))
        return stop - start

    def kg_bytes(self, kg: int) -> int:
        """Estimated bytes of one key group in this file (its share of the rows)."""
        if self.rows == 0:
            return 0
        return (self.bytes * self.kg_rows(kg)) // self.rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "batch_id": self.batch_id,
            "key_groups": list(self.key_groups),
            # JSON object keys are strings; from_dict turns them back into ints
            "row_ranges": {str(kg): [start, stop] for kg, (start, stop) in self.row_ranges.items()},
            "rows": self.rows,
            "bytes": self.bytes,
            "checksum": self.checksum,
            "kind": self.kind,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeltaFile:
        return cls(
            path=str(data["path"]),
            batch_id=int(data["batch_id"]),
            key_groups=tuple(int(kg) for kg in data["key_groups"]),
            row_ranges={int(kg): (int(r[0]), int(r[1])) for kg, r in data["row_ranges"].items()},
            rows=int(data["rows"]),
            bytes=int(data["bytes"]),
            checksum=str(data["checksum"]),
            kind=str(data.get("kind", "delta")),
        )


@dataclass(frozen=True)
class StateIndex:
    """The committed state visible to batch ``before_batch``: every commit with a smaller batch
    id, starting from the latest snapshot below it.

    ``files_by_kg[kg]`` lists the files holding rows of ``kg``, oldest first (the snapshot part,
    if any, then the deltas in batch order); a reader applies them in that order, so later
    rows override earlier rows of the same key.
    """

    operator_id: str
    before_batch: int
    files_by_kg: dict[int, tuple[DeltaFile, ...]]
    snapshot_batch: int | None = None  # batch the starting snapshot is as of (None: no snapshot)

    def key_groups_with_state(self) -> list[int]:
        """Key groups some committed file has rows for (rows may all be deletions)."""
        return sorted(self.files_by_kg)

    def files(self, key_groups: list[int] | None = None) -> list[DeltaFile]:
        """Distinct files a read of ``key_groups`` (default: all) opens, oldest first."""
        kgs = self.files_by_kg if key_groups is None else key_groups
        seen: dict[tuple[str, str], DeltaFile] = {}
        for kg in kgs:
            for f in self.files_by_kg.get(kg, ()):
                seen.setdefault((f.path, f.checksum), f)
        return sorted(seen.values(), key=lambda f: (f.batch_id, f.kind != "snapshot", f.path))
