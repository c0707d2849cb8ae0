"""Running an asyncio client (nats-py) from the synchronous code Spark calls.

Spark calls a reader's methods from its own threads, in a Python worker that lives as long as
the query; a client connection is worth keeping across calls. ``Loop`` owns one event loop on
a daemon thread and runs coroutines on it, so one connection serves every call.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any


class Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="sluice-aio", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


_LOOP: Loop | None = None
_LOCK = threading.Lock()


def shared_loop() -> Loop:
    """The process's one background loop (made on first use)."""
    global _LOOP  # noqa: PLW0603 - one loop per process, made on first use
    with _LOCK:
        if _LOOP is None or not _LOOP.thread.is_alive():
            _LOOP = Loop()
        return _LOOP
