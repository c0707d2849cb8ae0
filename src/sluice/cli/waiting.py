"""The line ``sluice run`` prints while a source waits for its broker: a source that cannot
reach its server keeps retrying for its patience (30 s by default) before the job fails with
the error; meanwhile the terminal says so instead of staying silent."""

from __future__ import annotations

import sys
import threading
import time


class BrokerWaitLines:
    """A thread that reads the sources' control files every second and prints
    ``sluice: waiting for NATS JetStream at ... (12 s of 30): <error>`` every few seconds
    while a source reports its broker unreachable, and a line when it is back."""

    def __init__(self, control_dir: str, sources: list[str], stream=None, every_s: float = 3.0, poll_s: float = 1.0):
        self.control_dir = control_dir
        self.sources = sources
        self.stream = stream or sys.stderr
        self.every_s = every_s
        self.poll_s = poll_s
        self.last_said: dict[str, float] = {}  # source -> when its waiting line was printed
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="sluice-broker-wait", daemon=True)

    def start(self) -> BrokerWaitLines:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()

    def _loop(self) -> None:
        while not self.stop_event.wait(self.poll_s):
            try:
                self.check()
            except Exception:  # a half-written control file: read again next time
                continue

    def check(self, now: float | None = None) -> list[str]:
        from sluice.runtime.sources.control import read_backlog

        now = time.time() if now is None else now
        said = []
        for name in self.sources:
            status = read_backlog(self.control_dir, name) or {}
            fresh = now - float(status.get("time") or 0) < 5 * self.poll_s + 5
            if status.get("error") and fresh:
                if now - self.last_said.get(name, 0.0) >= self.every_s:
                    self.last_said[name] = now
                    broker = status.get("broker") or f"source {name!r}'s server"
                    reason = str(status["error"]).removeprefix(f"{broker} is unreachable: ")
                    said.append(
                        f"sluice: waiting for {broker} ({status.get('down_s', 0):.0f} s of "
                        f"{status.get('patience_s', 0):g}): {reason}"
                    )
            elif name in self.last_said and not status.get("error"):
                del self.last_said[name]
                said.append(f"sluice: source {name!r} reached its broker again")
        for line in said:
            print(line, file=self.stream, flush=True)
        return said
