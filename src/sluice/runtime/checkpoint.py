"""Moved to ``sluice.core.checkpoint`` (the leaf package both the runtime and the control plane
import); this path re-exports it for existing imports."""

from sluice.core.checkpoint import *  # noqa: F403
