"""Pi Computation (Sec. 5.2): Viete's infinite product, evaluated for a fixed 15 iterations.

    2 / pi = sqrt(2)/2 * sqrt(2 + sqrt(2))/2 * sqrt(2 + sqrt(2 + sqrt(2)))/2 * ...

A floating-point CPU-bound task: more threads than one cannot help under Python's GIL, which is
what the profile should show (the paper's Pi also flattens after 2 threads).
"""

from __future__ import annotations

import math

ITERATIONS = 15


def viete_pi(iterations: int = ITERATIONS) -> float:
    product = 1.0
    term = 0.0
    for _ in range(iterations):
        term = math.sqrt(2.0 + term)
        product *= term / 2.0
    return 2.0 / product


class Pi:
    name = "pi"

    def __init__(self, iterations: int = ITERATIONS):
        self.iterations = iterations

    def setup(self) -> None:
        pass

    def process(self, key: int) -> float:
        return viete_pi(self.iterations)

    def close(self) -> None:
        pass
