"""``<checkpoint>/decisions.jsonl``: every decision of the controller, one JSON object a line.

Four record types (key ``type``), all with ``batch_id`` (the batch after which it was
made; it applies from ``batch_id + 1``) and ``time`` (epoch s):

- ``decision``: ``id`` (a sequence number), ``policy``, ``action`` (``kind``, ``target``,
  ``value``, ``reason``, ``expected``), ``constraints`` (each constraint's window status
  when it was made);
- ``measured``: ``decision`` (the id it measures), ``measured`` (the same keys as the
  decision's ``expected``, as measured on the first batch that ran with it), ``batch_id``;
- ``escalation``: ``constraint``, ``state`` (``started`` / ``ended``), ``details``
  (``bottleneck``, ``max_rate``, ``offered_rate``, ...), ``reason``.
- ``rejected``: an accepted action that cannot apply (``action``), or new policies that did
  not load, with the ``reason``; nothing changed.

A swap of the policies while the job runs is a ``decision`` whose action kind is
``policies``, with ``policies`` and ``previous`` (each policy's settings; ``control.swap``).

Besides: ``held`` (a proposal the autopilot held back: ``member``, ``kind``, ``target``,
``reason``, ``proposal``), ``policy_failed`` (a policy that raised, disabled for the run)
and ``mode`` (the execution mode chosen for the job, ``sluice.plan.mode``).

Written through the job's ``Checkpoint`` (``pyarrow.fs``), so the checkpoint may be any URI.
A restart appends to the same file; the dashboard reads it as it grows.

:func:`read_decisions` gives the lines as written; :func:`read_records` and
:func:`parse_record` give them as typed records (:class:`Decision`, :class:`Measured`,
:class:`Escalation`, :class:`Rejected`, :class:`Held`, :class:`PolicyFailed`,
:class:`ModeChoice`; :class:`OtherRecord` for a line of another shape), read tolerantly:
a log written by an older Sluice, or by hand, reads with its missing fields as None.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sluice.core import jsonlines
from sluice.core.checkpoint import Checkpoint

FILE = "decisions.jsonl"


@dataclass(frozen=True)
class LoggedAction:
    """An action as the log keeps it (``sluice.control.actions.Action.to_dict``). ``raw``:
    the logged value when it was not an action object (free text, or a dict without a kind)."""

    kind: str | None
    target: str | None = None
    value: Any = None
    reason: str = ""
    expected: Mapping[str, Any] | None = None  # None: the line has none
    policy: str = ""
    raw: Any = None

    @classmethod
    def parse(cls, data: Any) -> LoggedAction | None:
        if data is None:
            return None
        if not isinstance(data, Mapping):
            return cls(kind=None, raw=data)
        kind = data.get("kind") or data.get("type")
        expected = data.get("expected")
        return cls(
            kind=None if kind is None else str(kind),
            target=data.get("target"),
            value=data.get("value"),
            reason=str(data.get("reason") or ""),
            expected=dict(expected) if isinstance(expected, Mapping) else None,
            policy=str(data.get("policy") or ""),
            raw=None if kind is not None else dict(data),
        )

    def to_dict(self) -> Any:
        """The logged form (``raw`` as it was when the line had no action object)."""
        if self.kind is None:
            return self.raw
        return {
            "kind": self.kind,
            "target": self.target,
            "value": self.value,
            "reason": self.reason,
            "expected": dict(self.expected or {}),
            "policy": self.policy,
        }

    def text(self) -> str:
        """``admission * -> 4000``; a rescale with its routing shows the count."""
        if self.kind is None:
            if isinstance(self.raw, Mapping):
                return json.dumps(self.raw, default=str)
            return "" if self.raw is None else str(self.raw)
        text = self.kind + (f" {self.target}" if self.target not in (None, "") else "")
        value = self.value
        if isinstance(value, Mapping) and "partitions" in value:
            value = value["partitions"]
        if value is not None and not isinstance(value, (Mapping, list)):
            text += f" -> {value}"
        return text


@dataclass(frozen=True, kw_only=True)
class LogRecord:
    """One line of ``decisions.jsonl``; ``raw``: the line as written."""

    type: ClassVar[str] = ""

    batch_id: int | None = None  # the batch after which it was made
    time: float | None = None
    policy: str = ""
    reason: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def _common(cls, data: Mapping[str, Any]) -> dict:
        batch = data.get("batch_id", data.get("batch"))
        when = data.get("time")
        return {
            "batch_id": batch if isinstance(batch, int) else None,
            "time": float(when) if isinstance(when, (int, float)) else None,
            "policy": str(data.get("policy") or ""),
            "reason": str(data.get("reason") or ""),
            "raw": dict(data),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LogRecord:
        return cls(**cls._common(data))

    def to_dict(self) -> dict:
        """The line as written (each record type that the controller writes says its own)."""
        return dict(self.raw)


@dataclass(frozen=True, kw_only=True)
class Decision(LogRecord):
    """An applied decision (a swap of the policies is one whose action kind is ``policies``)."""

    type: ClassVar[str] = "decision"
    id: int | None = None
    action: LoggedAction | None = None
    constraints: Mapping[str, Any] | None = None  # each constraint's window when it was made
    policies: list | None = None  # a swap: the policies put in force, and those before
    previous: list | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        common = cls._common(data)
        action = LoggedAction.parse(data.get("action"))
        if not common["reason"] and action is not None:
            common["reason"] = action.reason
        constraints, policies, previous = data.get("constraints"), data.get("policies"), data.get("previous")
        return cls(
            id=data["id"] if isinstance(data.get("id"), int) else None,
            action=action,
            constraints=constraints if isinstance(constraints, Mapping) else None,
            policies=policies if isinstance(policies, list) else None,
            previous=previous if isinstance(previous, list) else None,
            **common,
        )

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "type": self.type,
            "id": self.id,
            "batch_id": self.batch_id,
            "time": self.time,
            "policy": self.policy,
        }
        out["action"] = None if self.action is None else self.action.to_dict()
        if self.constraints is not None:
            out["constraints"] = dict(self.constraints)
        if self.policies is not None:
            out.update(policies=self.policies, previous=self.previous)
        return out

    @property
    def expected(self) -> Any:
        """The effect the policy expected (a line may carry it beside its action)."""
        if "expected" in self.raw:
            return self.raw["expected"]
        return None if self.action is None else self.action.expected


@dataclass(frozen=True, kw_only=True)
class Measured(LogRecord):
    """The effect of decision ``decision``, measured on the first batch that ran with it."""

    type: ClassVar[str] = "measured"
    decision: int | None = None
    expected: Mapping[str, Any] = field(default_factory=dict)
    measured: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measured:
        decision, expected, measured = data.get("decision"), data.get("expected"), data.get("measured")
        return cls(
            decision=decision if isinstance(decision, int) else None,
            expected=expected if isinstance(expected, Mapping) else {},
            measured=measured if isinstance(measured, Mapping) else {},
            **cls._common(data),
        )

    def to_dict(self) -> dict:
        return {
            "type": self.type,
            "decision": self.decision,
            "batch_id": self.batch_id,
            "time": self.time,
            "expected": dict(self.expected),
            "measured": dict(self.measured),
        }


@dataclass(frozen=True, kw_only=True)
class Escalation(LogRecord):
    """A constraint no countermeasure can meet (``state`` started), or that can hold again (ended)."""

    type: ClassVar[str] = "escalation"
    constraint: str = ""
    state: str = ""
    details: Mapping[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Escalation:
        details = data.get("details")
        return cls(
            constraint=str(data.get("constraint") or ""),
            state=str(data.get("state") or ""),
            details=details if isinstance(details, Mapping) else None,
            **cls._common(data),
        )

    def to_dict(self) -> dict:
        out: dict = {"type": self.type, "batch_id": self.batch_id, "time": self.time}
        out.update(constraint=self.constraint, state=self.state)
        if self.policy:
            out["policy"] = self.policy
        out.update(details=None if self.details is None else dict(self.details), reason=self.reason)
        return out


@dataclass(frozen=True, kw_only=True)
class Rejected(LogRecord):
    """An accepted action that could not apply, or new policies that did not load."""

    type: ClassVar[str] = "rejected"
    action: LoggedAction | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rejected:
        return cls(action=LoggedAction.parse(data.get("action")), **cls._common(data))

    def to_dict(self) -> dict:
        out = {"type": self.type, "batch_id": self.batch_id, "time": self.time, "policy": self.policy}
        if self.action is not None:
            out["action"] = self.action.to_dict()
        out["reason"] = self.reason
        return out


@dataclass(frozen=True, kw_only=True)
class Held(LogRecord):
    """A proposal held back, and why (``reason``): by the autopilot's arbiter, or by the
    controller's (a structural change waiting for the windows to flush, or for another)."""

    type: ClassVar[str] = "held"
    member: str = ""
    kind: str = ""
    target: str = ""
    proposal: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Held:
        return cls(
            member=str(data.get("member") or ""),
            kind=str(data.get("kind") or ""),
            target=str(data.get("target") or ""),
            proposal=str(data.get("proposal") or ""),
            **cls._common(data),
        )


@dataclass(frozen=True, kw_only=True)
class PolicyFailed(LogRecord):
    """A policy that raised: disabled for the rest of the run (``reason`` says how it failed)."""

    type: ClassVar[str] = "policy_failed"

    def to_dict(self) -> dict:
        return {"type": self.type, "batch_id": self.batch_id, "time": self.time, "policy": self.policy, "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class ModeChoice(LogRecord):
    """The execution mode chosen for the job (``sluice.plan.mode``)."""

    type: ClassVar[str] = "mode"
    mode: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModeChoice:
        return cls(mode=str(data.get("mode") or ""), **cls._common(data))


@dataclass(frozen=True, kw_only=True)
class OtherRecord(LogRecord):
    """A line of a type this version does not know (``kind``: its ``type``)."""

    kind: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OtherRecord:
        return cls(kind=str(data.get("type")), **cls._common(data))


RECORD_TYPES: dict[str, type[LogRecord]] = {
    cls.type: cls for cls in (Decision, Measured, Escalation, Rejected, Held, PolicyFailed, ModeChoice)
}


def parse_record(data: Mapping[str, Any]) -> LogRecord:
    """One line of the log as a typed record; a line without a ``type`` is a decision (the
    first logs had none)."""
    return RECORD_TYPES.get(str(data.get("type", Decision.type)), OtherRecord).from_dict(data)


class DecisionLog:
    def __init__(self, checkpoint: str | Checkpoint | None):
        self.checkpoint = None if checkpoint is None else Checkpoint.of(checkpoint)
        self.records: list[dict] = []  # this run's records, also when there is no checkpoint
        self._next: int | None = None

    def next_id(self) -> int:
        """Decision ids continue across restarts."""
        if self._next is None:
            self._next = 1 + max((r.get("id", 0) for r in self.read()), default=0)
        value = self._next
        self._next += 1
        return value

    def append(self, record: dict | LogRecord) -> None:
        """Append one line: a typed record (its ``to_dict``) or a dict as it is."""
        if isinstance(record, LogRecord):
            record = record.to_dict()
        self.records.append(record)
        if self.checkpoint is not None:
            self.checkpoint.append_line(FILE, json.dumps(record, default=str))

    def read(self) -> list[dict]:
        if self.checkpoint is None:
            return list(self.records)
        data = self.checkpoint.read_bytes(FILE) or b""
        return jsonlines.parse(data, self.checkpoint.location(FILE))  # a torn last line is skipped


def read_decisions(checkpoint: str | Checkpoint) -> list[dict]:
    """Every record of ``<checkpoint>/decisions.jsonl``, in order, as written."""
    return DecisionLog(checkpoint).read()


def read_records(checkpoint: str | Checkpoint) -> list[LogRecord]:
    """Every record of ``<checkpoint>/decisions.jsonl``, in order, typed."""
    return [parse_record(r) for r in read_decisions(checkpoint)]
