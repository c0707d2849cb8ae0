"""The decisions log lives in ``sluice.core.decisions`` (the controller and the real-time run
both write it; the dashboard and ``sluice status`` read it); re-exported here."""

from sluice.core.decisions import FILE, DecisionLog, read_decisions

__all__ = ["FILE", "DecisionLog", "read_decisions"]
