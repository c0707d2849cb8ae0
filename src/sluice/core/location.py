"""Where in the user's code a pipeline element was made: the line an error names."""

from __future__ import annotations

import os
import sys
from types import FrameType

_SLUICE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_location() -> str | None:
    """'file.py:line' of the first caller outside the sluice package."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_SLUICE_DIR):
            return f"{os.path.basename(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None
