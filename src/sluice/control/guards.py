"""Guards: rules that pick operators' alternates from what the job measures (thesis 3.2.4).

A guard is a condition over the last batch's measurements and the actions to take while it
holds::

    policies:
      - guards:
          rules:
            - when: "metric('forecast', 'forecast_error') > 0.15"
              use: {forecast: regression}          # the accurate alternate
            - when: "latency_ms > 0.9 * bound_ms"
              use: {forecast: moving_average}      # the cheap one
          otherwise: {forecast: regression}

Rules are tried in order after every batch; for each operator the first rule that holds and
names it decides its alternate. ``otherwise`` (optional) applies to operators no rule
decided; without it they keep what runs. ``for_batches`` (default 1): a rule must hold that
many batches in a row before it acts (no flapping on one noisy batch).

A condition is a Python expression over numbers, comparisons, ``and``/``or``/``not``,
arithmetic and these names (``None`` when not measured; a comparison with ``None`` is false):

- ``batch_id``, ``rows`` (admitted by the last batch), ``batch_s`` (its duration),
  ``rate`` (rows/s offered at the sources, else admitted), ``backlog`` (rows waiting);
- ``latency_ms``, ``p95_ms``: the worst constraint window's mean and p95 (else the worst
  sink's latency in the last batch); ``bound_ms``: the tightest latency bound;
- ``value``, ``omega``, ``cost``, ``profit``, ``executors``: the last batch's economics
  (``BatchMetrics.dynamics``, docs/dynamic.md);
- ``metric(op, name)``: an operator's metric in the last batch (a user metric reported with
  ``sluice.report(name, x)`` is the mean of what its tasks reported); ``active(op)``: the
  alternate running now.

Pure: no Spark.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.control.actions import Action, SwitchAlternate
from sluice.control.policy import Policy
from sluice.control.view import ControlView
from sluice.errors import ConfigError

NAMES = (
    "batch_id",
    "rows",
    "batch_s",
    "rate",
    "backlog",
    "latency_ms",
    "p95_ms",
    "bound_ms",
    "value",
    "omega",
    "cost",
    "profit",
    "executors",
)
FUNCTIONS = ("metric", "active", "min", "max", "abs")
_ALLOWED = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.BinOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.Call,
)


def compile_condition(text: str, where: str):
    """A guard's condition, checked to use only what guards may use; ConfigError otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{where}: 'when' must be a condition such as \"latency_ms > 800\", got {text!r}")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ConfigError(f"{where}: the condition {text!r} is not an expression: {e.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise ConfigError(f"{where}: the condition {text!r} uses {type(node).__name__}, which a guard may not")
        if isinstance(node, ast.Name) and node.id not in NAMES + FUNCTIONS:
            raise ConfigError(
                f"{where}: the condition {text!r} names {node.id!r}; a guard knows {', '.join(NAMES)} "
                f"and the functions {', '.join(FUNCTIONS)}"
            )
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS):
            raise ConfigError(f"{where}: the condition {text!r} calls something other than {', '.join(FUNCTIONS)}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str)):
            raise ConfigError(f"{where}: the condition {text!r} has the constant {node.value!r}")
    return compile(tree, where, "eval")


@dataclass(frozen=True)
class Rule:
    when: str
    use: dict[str, str]
    code: Any


class Guards(Policy):
    """Pick alternates by guard rules (see the module's docstring)."""

    name = "guards"

    def __init__(self, rules: list[Mapping[str, Any]], otherwise: Mapping[str, str] | None = None, for_batches: int = 1):
        if not isinstance(rules, list) or not rules:
            raise ConfigError("guards: 'rules' must be a non-empty list of {when: condition, use: {operator: alternate}}")
        if not isinstance(for_batches, int) or for_batches < 1:
            raise ConfigError(f"guards: for_batches must be a positive integer, got {for_batches!r}")
        self.rules: list[Rule] = []
        for i, rule in enumerate(rules):
            where = f"guards.rules[{i}]"
            if not isinstance(rule, Mapping) or set(rule) != {"when", "use"}:
                raise ConfigError(f"{where}: expected {{when: condition, use: {{operator: alternate}}}}, got {rule!r}")
            self.rules.append(Rule(rule["when"], _uses(rule["use"], where), compile_condition(rule["when"], where)))
        self.otherwise = _uses(otherwise, "guards.otherwise") if otherwise else {}
        self.for_batches = for_batches
        self._held = [0] * len(self.rules)  # batches in a row each rule has held

    def describe(self) -> dict:
        return {
            "policy": self.name,
            "rules": [{"when": r.when, "use": r.use} for r in self.rules],
            "otherwise": self.otherwise,
            "for_batches": self.for_batches,
        }

    def propose(self, view: ControlView) -> list[Action]:
        if view.latest is None:
            return []
        names = measurements(view)
        decided: dict[str, tuple[str, str]] = {}  # operator -> (alternate, why)
        for i, rule in enumerate(self.rules):
            self._held[i] = self._held[i] + 1 if evaluate(rule.code, names, view) else 0
            if self._held[i] >= self.for_batches:
                for op_id, alternate in rule.use.items():
                    decided.setdefault(op_id, (alternate, f"guard {rule.when!r} holds"))
        for op_id, alternate in self.otherwise.items():
            decided.setdefault(op_id, (alternate, "no guard holds (otherwise)"))
        actions: list[Action] = []
        for op_id, (alternate, why) in decided.items():
            if view.active_alternate(op_id) != alternate:
                shown = {k: _rounded(v) for k, v in names.items() if v is not None}
                actions.append(
                    SwitchAlternate(
                        target=op_id,
                        alternate=alternate,
                        reason=f"{why}: {op_id} {view.active_alternate(op_id)} -> {alternate} ({shown})",
                        expected={"alternate": alternate},
                    )
                )
        return actions


def _uses(use: Any, where: str) -> dict[str, str]:
    if not isinstance(use, Mapping) or not use or not all(isinstance(k, str) and isinstance(v, str) for k, v in use.items()):
        raise ConfigError(f"{where}: 'use' must map operator ids to alternate names, got {use!r}")
    return dict(use)


def _rounded(v: Any) -> Any:
    return round(v, 4) if isinstance(v, float) else v


def measurements(view: ControlView) -> dict[str, Any]:
    """The names a guard's condition may use, from the view (None where not measured)."""
    latest = view.latest
    latency: float | None
    p95: float | None
    statuses = [s for s in view.status.values() if getattr(s, "mean_ms", None) is not None]
    if statuses:
        latency = max(s.mean_ms for s in statuses if s.mean_ms is not None)
        p95s = [s.p95_ms for s in statuses if s.p95_ms is not None]
        p95 = max(p95s) if p95s else None
    else:
        sink_means = [float(v.latency_mean_ms) for v in latest.sinks.values() if v.latency_mean_ms is not None]
        sink_p95s = [float(v.latency_p95_ms) for v in latest.sinks.values() if v.latency_p95_ms is not None]
        latency, p95 = (max(sink_means) if sink_means else None), (max(sink_p95s) if sink_p95s else None)
    bounds = [c.bound_s * 1000.0 for c in view.constraints]
    rate = view.offered_rate()
    if rate is None and latest.duration_s > 0:
        rate = latest.rows_in / latest.duration_s
    dynamics = latest.dynamics or {}
    return {
        "batch_id": latest.batch_id,
        "rows": latest.rows_in,
        "batch_s": latest.duration_s,
        "rate": rate,
        "backlog": view.backlog(),
        "latency_ms": latency,
        "p95_ms": p95,
        "bound_ms": min(bounds) if bounds else None,
        "value": dynamics.get("value"),
        "omega": dynamics.get("omega"),
        "cost": dynamics.get("cost"),
        "profit": dynamics.get("profit"),
        "executors": dynamics.get("executors"),
    }


def operator_metric(view: ControlView, op_id: str, name: str) -> float | None:
    """An operator's metric in the last batch: a user metric (``sluice.report``) is the mean
    of what was reported; any other is as recorded (summed over tasks)."""
    values = (view.latest.operators.get(op_id) or {}) if view.latest is not None else {}
    total, count = values.get(f"user.{name}.sum"), values.get(f"user.{name}.count")
    if total is not None and count:
        return float(total) / float(count)
    value = values.get(name)
    return None if value is None else float(value)


def evaluate(code, names: Mapping[str, Any], view: ControlView) -> bool:
    """The condition's truth; False when a name it compares is unmeasured (None)."""
    env = dict(names)
    env.update(metric=lambda op, name: operator_metric(view, op, name), active=view.active_alternate, min=min, max=max, abs=abs)
    try:
        result = eval(code, {"__builtins__": {}}, env)  # the tree was checked: names, literals, operators
    except (TypeError, ZeroDivisionError, ValueError):
        return False  # a None compared, or a division by an unmeasured 0: the guard does not hold
    return bool(result) and not (isinstance(result, float) and math.isnan(result))
