"""Ctrl-C as a request to stop between micro-batches.

PySpark's SparkContext installs a SIGINT handler that cancels every running Spark job and
raises KeyboardInterrupt wherever the main thread happens to be, often inside a Py4J call.
A running batch then dies half-way and Spark logs each cancelled job's Java stack trace
(hundreds of lines), although the restart would make the batch good anyway. While a job
runs, Sluice replaces that handler with one that only raises a flag: the run loop sees it,
lets the running batch finish and stops the query between batches, quietly. A second
Ctrl-C hands over to the previous handler (cancel now), for a batch that takes too long.
"""

from __future__ import annotations

import os
import signal
import threading


class StopOnSigint:
    """From construction until ``restore()``, the first Ctrl-C sets ``requested`` and
    nothing else. Only the main thread can handle signals: elsewhere this does nothing."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum, frame) -> None:
        if not self.requested.is_set():
            self.requested.set()
            # said at once, so a long batch does not look like an ignored Ctrl-C; os.write,
            # since the handler may have interrupted a print (sys.stderr is not reentrant)
            os.write(2, b"\nsluice: stopping after this batch (Ctrl-C again to stop now)\n")
            return
        previous = self._previous  # a second Ctrl-C: stop waiting
        self.restore()
        if callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt

    def restore(self) -> None:
        """Put back the handler that was there before."""
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
