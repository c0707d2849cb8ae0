"""Performance models of operator types on one resource slot (Shukla and Simmhan, Sec. 5).

A performance model P_i maps a thread count tau to what one slot (one core) sustains with tau
threads of one task: the peak stable input rate omega, and the *incremental* CPU and memory
(above the idle base load) at that rate. From the measured points we derive the paper's
functions (Fig. 1):

    I(q)      peak input rate supported by q threads on one slot
    C(q)      incremental CPU of q threads on one slot, as a fraction of the slot (1.0 = 100 %)
    M(q)      incremental memory of q threads on one slot, as a fraction of the slot
    T(omega)  the smallest thread count q with I(q) >= omega (the inverse of I, Sec. 6)
    omega_bar = I(1), c_bar = C(1), m_bar = M(1)          (single thread)
    omega_hat = max_q I(q),  tau_hat = T(omega_hat)        (best bundle: MBA's "full slot")

Between measured thread counts the functions interpolate linearly (the paper does the same
when it predicts 3 Table threads from the 2- and 4-thread points, Sec. 8.5.1). Asking for a
thread count beyond the measured range is an error unless the caller explicitly opts to hold
the last measured value (the profiler stops adding threads once the rate stops rising, so
holding the last value is the documented assumption the predictor uses).

Models are plain JSON (see ``to_dict``); the library of paper-like models lives in
``sluice/models/library/*.json`` and is loaded by name with :func:`load_model`.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from sluice.errors import ModelError

LIBRARY_DIR = Path(__file__).with_name("library")

# Tolerance for comparing rates: T(omega) must not add a thread because of float noise.
_RATE_EPS = 1e-9


@dataclass(frozen=True)
class ModelPoint:
    """One measured point of Algorithm 1: tau threads on one slot sustain ``rate`` tuples/s."""

    threads: int
    rate: float
    cpu: float  # incremental CPU at that rate, fraction of one slot
    memory: float  # incremental memory at that rate, fraction of one slot


@dataclass(frozen=True)
class PerformanceModel:
    """The measured profile of one operator type on one slot, with the paper's derived functions.

    Construction validates the points: at least the 1-thread point (LSA and MBA both need
    omega_bar, c_bar, m_bar), thread counts strictly increasing (a shuffled or duplicated
    profile is a corrupted file, not something to guess about), positive finite rates,
    CPU and memory in [0, 1] of a slot.
    """

    name: str
    points: tuple[ModelPoint, ...]
    description: str = ""
    source: str = ""
    unit: str = "tuples/s"
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        where = f"performance model {self.name!r}"
        if not self.points:
            raise ModelError(f"{where} has no measured points")
        threads = [p.threads for p in self.points]
        if any(int(t) != t or t < 1 for t in threads):
            raise ModelError(f"{where}: thread counts must be positive integers, got {threads}")
        if any(b <= a for a, b in itertools.pairwise(threads)):
            raise ModelError(f"{where}: thread counts must be strictly increasing (non-monotone or duplicated), got {threads}")
        if threads[0] != 1:
            raise ModelError(
                f"{where}: the 1-thread point is missing (first measured thread count is "
                f"{threads[0]}); LSA and MBA need the single-thread rate, CPU and memory"
            )
        for p in self.points:
            if not (math.isfinite(p.rate) and p.rate > 0):
                raise ModelError(f"{where}: rate at {p.threads} threads must be > 0, got {p.rate}")
            for what, value in (("cpu", p.cpu), ("memory", p.memory)):
                if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                    raise ModelError(
                        f"{where}: {what} at {p.threads} threads must be a fraction of one slot in [0, 1], got {value}"
                    )

    # ---- the measured grid, as arrays -------------------------------------------------------

    @cached_property
    def _grid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        t = np.array([p.threads for p in self.points], dtype=float)
        return (
            t,
            np.array([p.rate for p in self.points], dtype=float),
            np.array([p.cpu for p in self.points], dtype=float),
            np.array([p.memory for p in self.points], dtype=float),
        )

    @property
    def max_threads(self) -> int:
        return self.points[-1].threads

    @cached_property
    def _rate_per_integer_q(self) -> np.ndarray:
        """I(q) for q = 1 .. max_threads (index q-1), for the vectorised inverse T."""
        t, rate, _, _ = self._grid
        return np.interp(np.arange(1, self.max_threads + 1, dtype=float), t, rate)

    def _interp(self, q: float, column: int, beyond: bool) -> float:
        if not math.isfinite(q) or q < 1:
            raise ModelError(f"performance model {self.name!r}: thread count {q} is below 1")
        if q > self.max_threads and not beyond:
            raise ModelError(f"performance model {self.name!r}: {q} threads is out of the measured range 1..{self.max_threads}")
        grid = self._grid
        return float(np.interp(min(q, self.max_threads), grid[0], grid[column]))

    # ---- the paper's functions ---------------------------------------------------------------

    def rate(self, q: float, *, beyond: bool = False) -> float:
        """I(q): peak input rate q threads sustain on one slot (linear interpolation)."""
        return self._interp(q, 1, beyond)

    def cpu(self, q: float, *, beyond: bool = False) -> float:
        """C(q): incremental CPU (fraction of a slot) of q threads at their peak rate."""
        return self._interp(q, 2, beyond)

    def memory(self, q: float, *, beyond: bool = False) -> float:
        """M(q): incremental memory (fraction of a slot) of q threads at their peak rate."""
        return self._interp(q, 3, beyond)

    def threads_for(self, omega: float) -> int:
        """T(omega): the smallest integer q with I(q) >= omega on one slot.

        Raises ModelError when no thread count reaches omega (omega > omega_hat): a single slot
        cannot carry that rate, the caller must split it (MBA does, in full bundles).
        """
        if not math.isfinite(omega) or omega < 0:
            raise ModelError(f"performance model {self.name!r}: rate {omega} is not a valid rate")
        reach = self._rate_per_integer_q >= omega - _RATE_EPS * max(1.0, omega)
        if not reach.any():
            raise ModelError(
                f"performance model {self.name!r}: rate {omega:g} {self.unit} is above the peak "
                f"{self.peak_rate:g} any thread count sustains on one slot"
            )
        return int(np.argmax(reach)) + 1

    # ---- named values of Fig. 1 --------------------------------------------------------------

    @property
    def single_thread_rate(self) -> float:  # omega_bar = I(1)
        return self.points[0].rate

    @property
    def single_thread_cpu(self) -> float:  # c_bar = C(1)
        return self.points[0].cpu

    @property
    def single_thread_memory(self) -> float:  # m_bar = M(1)
        return self.points[0].memory

    @property
    def peak_rate(self) -> float:  # omega_hat = max_q I(q)
        return float(self._grid[1].max())

    @property
    def peak_threads(self) -> int:  # tau_hat = T(omega_hat), the size of a full bundle
        return self.threads_for(self.peak_rate)

    # ---- JSON round trip ---------------------------------------------------------------------

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "unit": self.unit,
            "cpu_memory_unit": "fraction of one slot (1.0 = 100 %), incremental over idle",
            "points": [{"threads": p.threads, "rate": p.rate, "cpu": p.cpu, "memory": p.memory} for p in self.points],
            **({"meta": self.meta} if self.meta else {}),
        }

    @classmethod
    def from_dict(cls, data: dict, origin: str = "<dict>") -> PerformanceModel:
        try:
            points = tuple(
                ModelPoint(
                    threads=int(p["threads"]),
                    rate=float(p["rate"]),
                    cpu=float(p["cpu"]),
                    memory=float(p["memory"]),
                )
                for p in data["points"]
            )
            return cls(
                name=str(data["name"]),
                points=points,
                description=str(data.get("description", "")),
                source=str(data.get("source", "")),
                unit=str(data.get("unit", "tuples/s")),
                meta=dict(data.get("meta", {})),
            )
        except ModelError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"malformed performance model in {origin}: {exc!r}") from exc

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path


def read_model(path: str | Path) -> PerformanceModel:
    """Load a model JSON file; ModelError if it is missing or malformed."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ModelError(f"performance model file {str(path)!r} does not exist") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelError(f"performance model file {str(path)!r} is not valid JSON: {exc}") from exc
    return PerformanceModel.from_dict(data, origin=str(path))


def library_names() -> list[str]:
    """Names of the models shipped in the library (file stems)."""
    return sorted(p.stem for p in LIBRARY_DIR.glob("*.json"))


def load_model(ref: str | Path | PerformanceModel) -> PerformanceModel:
    """Resolve a model reference: a model, a library name (``"blob"``), or a path to a JSON file."""
    if isinstance(ref, PerformanceModel):
        return ref
    text = str(ref)
    candidate = LIBRARY_DIR / f"{text}.json"
    if candidate.exists():
        return read_model(candidate)
    if text.endswith(".json") or Path(text).exists():
        return read_model(text)
    raise ModelError(
        f"no performance model named {text!r}: not in the library ({', '.join(library_names())}) "
        "and not a path to a model JSON file"
    )
