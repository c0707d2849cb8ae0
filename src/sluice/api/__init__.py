"""The user API: build a :class:`Pipeline` with fluent :class:`Stream` s."""

from sluice.api.pipeline import Pipeline
from sluice.api.stream import KeyedStream, Stream

__all__ = ["KeyedStream", "Pipeline", "Stream"]
