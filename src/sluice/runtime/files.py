"""Moved to ``sluice.core.files`` (the leaf package both the runtime and the control plane
import); this path re-exports it for existing imports."""

from sluice.core.files import *  # noqa: F403
