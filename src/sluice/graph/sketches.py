"""The accumulators of Sluice's distinct-count, percentile and first/last aggregates.

Each is a user-defined aggregate's four functions (``create``, ``add``, ``merge``,
``result``) over a picklable accumulator, so it runs wherever a UDAF runs: keyed aggregates
(the accumulator lives in the key-group store) and windows (one accumulator per pane,
merged into windows). ``add`` receives one key's new values as a pyarrow Array and works on
them with Arrow and numpy, never a Python loop over records.

- :class:`DistinctSet`: the exact set of distinct values (memory grows with them).
- :class:`HyperLogLog`: Flajolet et al.'s HyperLogLog with ``2**precision`` one-byte
  registers and linear counting for small counts (Heule et al.); relative standard error
  1.04 / sqrt(2**precision) (1.6 % at the default precision 12, 4 KiB per key).
  Values are hashed with pandas' stable 64-bit hash, so the same value gets the same
  register in every process and after a restart.
- :class:`DDSketch`: Masson et al.'s DDSketch, buckets of logarithmic width: any quantile
  it returns is within ``relative_accuracy`` (relative) of the exact value of that rank.
  Merging two sketches adds their bucket counts, so panes and batches combine exactly as
  if every value had gone into one sketch.
- :class:`Extreme`: the first or last value seen.

``merge(a, b)`` may change and return ``a`` but never changes ``b`` (the windows' contract).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _present(values: pa.Array) -> pa.Array:
    """The non-null values (aggregates ignore nulls, as in SQL)."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    return values.drop_null() if values.null_count else values


# ---- exact distinct count ------------------------------------------------------------------


@dataclass
class DistinctSet:
    """The distinct non-null values seen, as one Arrow array."""

    values: pa.Array | None = None


def distinct_create() -> DistinctSet:
    return DistinctSet()


def distinct_add(acc: DistinctSet, values: pa.Array) -> DistinctSet:
    new = pc.unique(_present(values))
    acc.values = new if acc.values is None else pc.unique(pa.concat_arrays([acc.values, new.cast(acc.values.type)]))
    return acc


def distinct_merge(a: DistinctSet, b: DistinctSet) -> DistinctSet:
    if b.values is None:
        return a
    if a.values is None:
        return DistinctSet(b.values)
    return DistinctSet(pc.unique(pa.concat_arrays([a.values, b.values.cast(a.values.type)])))


def distinct_result(acc: DistinctSet) -> int:
    return 0 if acc.values is None else len(acc.values)


# ---- HyperLogLog -----------------------------------------------------------------------------


def hash64(values: pa.Array) -> np.ndarray:
    """A stable 64-bit hash of each value (the same in every process and run)."""
    from pandas.util import hash_array

    if pa.types.is_decimal(values.type):  # exact text of each decimal: equal values, equal text
        array = np.asarray(values.cast(pa.string()).to_numpy(zero_copy_only=False), dtype=object)
    elif pa.types.is_string(values.type) or pa.types.is_large_string(values.type) or pa.types.is_binary(values.type):
        array = np.asarray(values.to_numpy(zero_copy_only=False), dtype=object)
    elif pa.types.is_timestamp(values.type) or pa.types.is_date(values.type) or pa.types.is_boolean(values.type):
        array = np.asarray(values.cast(pa.int64()).to_numpy(zero_copy_only=False))
    else:
        array = np.asarray(values.to_numpy(zero_copy_only=False))
        if array.dtype.kind == "f":
            array = np.where(array == 0, 0.0, array)  # -0.0 and 0.0 are one value
    return hash_array(array)


def _bit_length(x: np.ndarray) -> np.ndarray:
    """Number of significant bits of each uint64 (0 for 0), exactly: the two 32-bit halves
    are exact in float64, and log2 of an integer below 2**32 floors right."""
    hi = (x >> np.uint64(32)).astype(np.float64)
    lo = (x & np.uint64(0xFFFFFFFF)).astype(np.float64)
    with np.errstate(divide="ignore"):
        bits_hi = np.floor(np.log2(hi)) + 33
        bits_lo = np.floor(np.log2(lo)) + 1
    return np.where(hi > 0, bits_hi, np.where(lo > 0, bits_lo, 0)).astype(np.int64)


@dataclass
class HyperLogLog:
    precision: int = 12
    registers: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))

    def __post_init__(self) -> None:
        if len(self.registers) == 0:
            self.registers = np.zeros(1 << self.precision, np.uint8)


def hll_add(acc: HyperLogLog, values: pa.Array) -> HyperLogLog:
    values = _present(values)
    if len(values) == 0:
        return acc
    p = acc.precision
    h = hash64(values)
    index = (h >> np.uint64(64 - p)).astype(np.int64)
    rest = h & np.uint64((1 << (64 - p)) - 1)
    rank = (64 - p) - _bit_length(rest) + 1  # position of the first 1 bit after the index bits
    np.maximum.at(acc.registers, index, rank.astype(np.uint8))
    return acc


def hll_merge(a: HyperLogLog, b: HyperLogLog) -> HyperLogLog:
    if a.precision != b.precision:
        raise ValueError(f"cannot merge HyperLogLog sketches of precision {a.precision} and {b.precision}")
    np.maximum(a.registers, b.registers, out=a.registers)
    return a


def hll_result(acc: HyperLogLog) -> int:
    m = len(acc.registers)
    alpha = 0.7213 / (1 + 1.079 / m)
    estimate = alpha * m * m / float(np.sum(np.ldexp(1.0, -acc.registers.astype(np.int64))))
    zeros = int(np.count_nonzero(acc.registers == 0))
    if estimate <= 2.5 * m and zeros:
        estimate = m * math.log(m / zeros)  # linear counting: exact-ish for small counts
    return round(estimate)


# ---- DDSketch --------------------------------------------------------------------------------

_MIN_MAGNITUDE = 1e-12  # values closer to zero than this count as zero


@dataclass
class DDSketch:
    relative_accuracy: float = 0.01
    positive: dict[int, int] = field(default_factory=dict)  # bucket index -> count
    negative: dict[int, int] = field(default_factory=dict)  # of -value
    zeros: int = 0

    @property
    def gamma(self) -> float:
        return (1 + self.relative_accuracy) / (1 - self.relative_accuracy)

    @property
    def count(self) -> int:
        return self.zeros + sum(self.positive.values()) + sum(self.negative.values())


def _bucket_counts(magnitudes: np.ndarray, gamma: float) -> dict[int, int]:
    if len(magnitudes) == 0:
        return {}
    index = np.ceil(np.log(magnitudes) / math.log(gamma)).astype(np.int64)
    keys, counts = np.unique(index, return_counts=True)
    return dict(zip(keys.tolist(), counts.tolist()))


def _add_counts(into: dict[int, int], other: dict[int, int]) -> None:
    for k, n in other.items():  # per bucket (a few hundred at most), not per record
        into[k] = into.get(k, 0) + n


def ddsketch_add(acc: DDSketch, values: pa.Array) -> DDSketch:
    values = _present(values)
    if len(values) == 0:
        return acc
    if not pa.types.is_floating(values.type):
        values = values.cast(pa.float64())
    x = np.asarray(values.to_numpy(zero_copy_only=False), np.float64)
    x = x[~np.isnan(x)]
    magnitude = np.abs(x)
    small = magnitude < _MIN_MAGNITUDE
    acc.zeros += int(np.count_nonzero(small))
    _add_counts(acc.positive, _bucket_counts(x[(x > 0) & ~small], acc.gamma))
    _add_counts(acc.negative, _bucket_counts(-x[(x < 0) & ~small], acc.gamma))
    return acc


def ddsketch_merge(a: DDSketch, b: DDSketch) -> DDSketch:
    if a.relative_accuracy != b.relative_accuracy:
        raise ValueError("cannot merge DDSketches of different relative accuracy")
    _add_counts(a.positive, b.positive)
    _add_counts(a.negative, b.negative)
    a.zeros += b.zeros
    return a


def ddsketch_quantile(acc: DDSketch, q: float) -> float | None:
    """The smallest value with at least ``q`` of the n values at or below it (the nearest
    rank, ceil(q * n), as SQL's ``percentile_disc`` and Spark's ``percentile_approx`` define
    it), within the relative accuracy."""
    n = acc.count
    if n == 0:
        return None
    rank = max(math.ceil(q * n) - 1, 0)  # 0-based
    gamma = acc.gamma
    # buckets from the most negative value up: negatives by decreasing index, zeros, positives
    negative = sorted(acc.negative.items(), key=lambda kv: -kv[0])
    buckets = [(-2 * gamma**k / (gamma + 1), c) for k, c in negative]
    if acc.zeros:
        buckets.append((0.0, acc.zeros))
    buckets += [(2 * gamma**k / (gamma + 1), c) for k, c in sorted(acc.positive.items())]
    seen = 0
    for value, c in buckets:
        seen += c
        if seen > rank:
            return value
    return buckets[-1][0]


@dataclass(frozen=True)
class Percentile:
    """``result`` of an approximate percentile: picklable with its q."""

    q: float

    def __call__(self, acc: DDSketch) -> float | None:
        return ddsketch_quantile(acc, self.q)


@dataclass(frozen=True)
class SketchFactory:
    """``create`` of a sketch with parameters (picklable, unlike a lambda)."""

    kind: str
    parameter: float

    def __call__(self) -> Any:
        if self.kind == "hll":
            return HyperLogLog(int(self.parameter))
        return DDSketch(self.parameter)


# ---- first and last --------------------------------------------------------------------------


@dataclass
class Extreme:
    """The first or the last non-null value seen (``value`` an Arrow scalar; None: none yet)."""

    value: Any = None


def extreme_create() -> Extreme:
    return Extreme()


def first_add(acc: Extreme, values: pa.Array) -> Extreme:
    values = _present(values)
    if acc.value is None and len(values):
        acc.value = values[0]
    return acc


def last_add(acc: Extreme, values: pa.Array) -> Extreme:
    values = _present(values)
    if len(values):
        acc.value = values[len(values) - 1]
    return acc


def first_merge(a: Extreme, b: Extreme) -> Extreme:
    return a if a.value is not None else Extreme(b.value)


def last_merge(a: Extreme, b: Extreme) -> Extreme:
    return Extreme(b.value) if b.value is not None else a


def extreme_result(acc: Extreme) -> Any:
    return None if acc.value is None else acc.value.as_py()


# ---- arg_max and arg_min -----------------------------------------------------------------------


@dataclass
class Best(Extreme):
    """The value of the record with the best ``by`` so far (``by`` an Arrow scalar)."""

    by: Any = None


@dataclass(frozen=True)
class ArgBest:
    """``add`` of arg_max (``largest``) or arg_min: over a struct array of (value, by)."""

    largest: bool

    def __call__(self, acc: Extreme, values: pa.StructArray) -> Best:
        best = acc if isinstance(acc, Best) else Best()
        by = values.field("by")
        if by.null_count:
            keep = pc.is_valid(by)
            values, by = values.filter(keep), by.filter(keep)
        if len(by) == 0:
            return best
        extreme = pc.max(by) if self.largest else pc.min(by)
        if best.by is None or _better(extreme.as_py(), best.by.as_py(), self.largest):
            at = pc.index(by, extreme).as_py()  # the first record with it: ties keep the earliest
            best.by, best.value = extreme, values.field("value")[at]
        return best


def _better(new: Any, old: Any, largest: bool) -> bool:
    return new > old if largest else new < old


@dataclass(frozen=True)
class ArgBestMerge:
    """``merge`` of arg_max / arg_min: the better ``by``; on a tie, ``a`` (the earlier)."""

    largest: bool

    def __call__(self, a: Extreme, b: Extreme) -> Extreme:
        b_by = getattr(b, "by", None)
        if b_by is None:
            return a
        a_by = getattr(a, "by", None)
        if a_by is None or _better(b_by.as_py(), a_by.as_py(), self.largest):
            return Best(b.value, b_by)
        return a
