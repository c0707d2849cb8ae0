"""Moved to ``sluice.core.jsonlines`` (the leaf package both the runtime and the control plane
import); this path re-exports it for existing imports."""

from sluice.core.jsonlines import *  # noqa: F403
