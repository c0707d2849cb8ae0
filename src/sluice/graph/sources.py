"""Sources: pure descriptions of where a pipeline's records come from.

A source spec says *what* the input is (its columns, its event-time column, how fast it
arrives, how many rows a micro-batch may admit); ``sluice.runtime.sources.open_stream``
turns a spec into a Spark streaming DataFrame. Nothing here imports pyspark.

Four kinds:

- ``GeneratorSource``: synthetic rows from per-column value generators (``Keys``, ``Sequence``,
  ``Uniform``, ``Normal``, ``Choice``, ``EventTime``, ``Text``), at a given rate, fully
  deterministic by (seed, row index) so a batch replayed after a crash is identical.
- ``DirectorySource``: files (JSON lines, CSV, Parquet) dropped into a directory.
- ``ReplaySource``: a recorded file (or a small directory) replayed at a given rate.
- ``SparkSource``: any Spark streaming DataFrame, built by a user factory.

Every stream Sluice opens also carries the hidden column ``INGEST_TS``: the time a record
became available at the source. End-to-end latency measured from it includes the wait at
the source before admission, which is Nephele's output-buffer latency (docs/architecture.md, section 3).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping
from collections.abc import Sequence as SequenceOf
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.core.columns import INGEST
from sluice.errors import SourceError
from sluice.graph.rates import Rate, RateSchedule, arrival_us, as_rate, rows_arrived  # noqa: F401 (re-exported)
from sluice.graph.schemas import as_schema

INGEST_TS = INGEST  # the hidden ingest-time column (core.columns)

TIMESTAMP = pa.timestamp("us", tz="UTC")
"""The one timestamp type Sluice sources produce (Spark's TimestampType)."""

GENERATOR_BLOCK_ROWS = 16384
"""Rows are generated in fixed blocks, each from its own random stream seeded by
(seed, field, block), so any row range gives the same rows whatever the batch boundaries."""

DEFAULT_EVENT_STEP = 0.001
"""Seconds of event time between consecutive rows when the generator has no rate."""

FILE_FORMATS = ("json", "csv", "parquet")


# --------------------------------------------------------------------------------------------
# Field generators: one column of a GeneratorSource each.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowClock:
    """Nominal time of rows: row i is due at ``start_us + i * interval_us`` (microseconds),
    or at its time in ``schedule`` when the source's rate steps."""

    start_us: int
    interval_us: float
    schedule: RateSchedule | None = None

    def due_us(self, rows: np.ndarray, interval_us: float | None = None) -> np.ndarray:
        """When rows ``rows`` are due; ``interval_us`` overrides the clock's own spacing."""
        if interval_us is None and self.schedule is not None:
            return arrival_us(self.start_us, self.schedule, rows)
        step = self.interval_us if interval_us is None else interval_us
        return self.start_us + np.floor(rows * step).astype(np.int64)


class FieldGenerator:
    """Makes the values of one column for a block of rows, vectorized with numpy.

    ``generate`` receives the block's own random generator and the row indices of the whole
    block; it must draw a fixed amount of randomness per block, so values depend only on
    (seed, field, block) and not on how the rows are later cut into batches.
    """

    def arrow_type(self) -> pa.DataType:
        raise NotImplementedError

    def validate(self, where: str) -> None:
        """Raise SourceError (prefixed by ``where``) if the parameters are unusable."""

    def generate(self, rng: np.random.Generator, rows: np.ndarray, clock: RowClock) -> pa.Array:
        raise NotImplementedError


@functools.lru_cache(maxsize=4)
def _zipf_cdf(n: int, skew: float) -> np.ndarray:
    """Cumulative probabilities of ranks 1..n with p(k) proportional to k^-skew (Zipf)."""
    weights = np.arange(1, n + 1, dtype=np.float64) ** -skew
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def _draw_ranks(rng: np.random.Generator, n: int, size: int, skew: float) -> np.ndarray:
    """``size`` ranks in [0, n): uniform when skew == 0, else Zipf with exponent ``skew``."""
    if skew == 0:
        return rng.integers(0, n, size=size, dtype=np.int64)
    ranks = np.searchsorted(_zipf_cdf(n, float(skew)), rng.random(size), side="right")
    return np.minimum(ranks, n - 1).astype(np.int64)


def _check_number(where: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SourceError(f"{where}: {name} must be a finite number, got {value!r}")


@dataclass(frozen=True)
class Keys(FieldGenerator):
    """Keys drawn from ``n`` distinct keys, uniformly or Zipf-skewed.

    ``distribution="zipf"`` gives key of rank k (k = 1..n) probability proportional to
    k^-skew: key 0 is the hottest. Keys are int64 0..n-1, or strings ``prefix + str(k)`` when
    ``prefix`` is a string (``prefix=""`` gives plain digit strings).

    >>> from sluice import sources as S
    >>> S.generator(fields={"meter": S.Keys(1000, distribution="zipf", skew=1.1)}).schema().names
    ['meter']
    """

    n: int
    distribution: str = "uniform"
    skew: float = 1.0
    prefix: str | None = None

    def arrow_type(self) -> pa.DataType:
        return pa.int64() if self.prefix is None else pa.string()

    def validate(self, where: str) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise SourceError(f"{where}: Keys n must be a positive integer, got {self.n!r}")
        if self.distribution not in ("uniform", "zipf"):
            raise SourceError(f"{where}: unknown key distribution {self.distribution!r} (use 'uniform' or 'zipf')")
        _check_number(where, "Keys skew", self.skew)
        if self.distribution == "zipf" and self.skew <= 0:
            raise SourceError(f"{where}: Zipf skew must be > 0, got {self.skew!r}")
        if self.prefix is not None and not isinstance(self.prefix, str):
            raise SourceError(f"{where}: Keys prefix must be a string or None, got {self.prefix!r}")

    def generate(self, rng: np.random.Generator, rows: np.ndarray, clock: RowClock) -> pa.Array:
        skew = self.skew if self.distribution == "zipf" else 0.0
        keys = pa.array(_draw_ranks(rng, self.n, len(rows), skew))
        if self.prefix is None:
            return keys
        return pc.binary_join_element_wise(self.prefix, pc.cast(keys, pa.string()), "")


@dataclass(frozen=True)
class Sequence(FieldGenerator):
    """The row number: ``start + step * row`` (int64). Unique, handy to check exactly-once.

    >>> from sluice import sources as S
    >>> S.generator(fields={"id": S.Sequence()}).schema().field("id").type
    DataType(int64)
    """

    start: int = 0
    step: int = 1

    def arrow_type(self) -> pa.DataType:
        return pa.int64()

    def validate(self, where: str) -> None:
        for name in ("start", "step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise SourceError(f"{where}: Sequence {name} must be an integer, got {value!r}")

    def generate(self, rng: np.random.Generator, rows: np.ndarray, clock: RowClock) -> pa.Array:
        return pa.array(self.start + self.step * rows.astype(np.int64))


@dataclass(frozen=True)
class Uniform(FieldGenerator):
    """Floats uniform in [low, high).

    >>> from sluice import sources as S
    >>> S.generator(fields={"load": S.Uniform(0.0, 1.0)}).schema().field("load").type
    DataType(double)
    """

    low: float = 0.0
    high: float = 1.0

    def arrow_type(self) -> pa.DataType:
        return pa.float64()

    def validate(self, where: str) -> None:
        _check_number(where, "Uniform low", self.low)
        _check_number(where, "Uniform high", self.high)
        if self.high < self.low:
            raise SourceError(f"{where}: Uniform high {self.high} is below low {self.low}")

    def generate(self, rng: np.random.Generator, rows: np.ndarray, clock: RowClock) -> pa.Array:
        return pa.array(rng.uniform(self.low, self.high, size=len(rows)))


@dataclass(frozen=True)
class Normal(FieldGenerator):
    """Floats from a normal distribution N(mean, std^2).

    >>> from sluice import sources as S
    >>> S.generator(fields={"kwh": S.Normal(0.4, 0.15)}).schema().field("kwh").type
    DataType(double)
    """

    mean: float = 0.0
    std: float = 1.0

    def arrow_type(self) -> pa.DataType:
        return pa.float64()

    def validate(self, where: str) -> None:
        _check_number(where, "Normal mean", self.mean)
        _check_number(where, "Normal std", self.std)
        if self.std < 0:
            raise SourceError(f"{where}: Normal std must be >= 0, got {self.std}")

    def generate(self, rng: np.random.Generator, rows: np.ndarray, clock: RowClock) -> pa.Array:
        return pa.array(rng.normal(self.mean, self.std, size=len(rows)))


@dataclass(frozen=True)
class Choice(FieldGenerator):
    """A categorical column: one of ``values`` (strings, ints, floats or bools), with optional
    ``weights`` (relative, normalized here).

    >>> from sluice import sources as S
    >>> S.generator(fields={"status": S.Choice(("ok", "corrupt"), weights=(0.99, 0.01))}).schema().names
    ['status']
    """

    values: tuple
    weights: tuple | None = None

    def __post_init__(self):
        # Accept lists from users but keep the spec hashable and immutable.
        object.__setattr__(self, "values", tuple(self.values))
        if self.weights is not None:
            object.__setattr__(self, "weights", tuple(self.weights))

    def arrow_type(self) -> pa.DataType:
        return pa.array(list(self.values)).type

    def validate(self, where: str) -> None:
        if not self.values:
            raise SourceError(f"{where}: Choice needs at least one value")
        try:
            kind = pa.array(list(self.values)).type
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise SourceError(f"{where}: Choice values must share one type: {e}") from None
        if pa.types.is_null(kind):
            raise SourceError(f"{where}: Choice values must not all be None")
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise SourceError(f"{where}: Choice has {len(self.values)} values but {len(self.weights)} weights")
            for w in self.weights:
                _check_number(where, "Choice weight", w)
            if min(self.weights) < 0 or sum(self.weights) <= 0:
                raise SourceError(f"{where}: Choice weights must be >= 0 with a positive sum")

    def generate(self, rng: np.random.Generator, rows: np.ndarray, clock: RowClock) -> pa.Array:
        if self.weights is None:
            picks = rng.integers(0, len(self.values), size=len(rows))
        else:
            p = np.asarray(self.weights, dtype=np.float64)
            cdf = np.cumsum(p / p.sum())
            picks = np.minimum(np.searchsorted(cdf, rng.random(len(rows)), side="right"), len(self.values) - 1)
        return pa.array(list(self.values)).take(pa.array(picks))


@dataclass(frozen=True)
class EventTime(FieldGenerator):
    """An event-time column (timestamp, UTC, microseconds).

    Row i's event time is ``start + i * step`` minus a uniform delay in [0, jitter) seconds:
    records arrive up to ``jitter`` seconds out of order (bounded out-of-orderness, so a
    watermark delay of ``jitter`` is exact). ``step`` defaults to the source's 1/rate, so
    without jitter the event time equals the arrival time; with no rate it is
    ``DEFAULT_EVENT_STEP``.

    >>> from sluice import sources as S
    >>> S.generator(fields={"ts": S.EventTime()}, rate=100).event_time
    'ts'
    """

    jitter: float = 0.0
    step: float | None = None

    def arrow_type(self) -> pa.DataType:
        return TIMESTAMP

    def validate(self, where: str) -> None:
        _check_number(where, "EventTime jitter", self.jitter)
        if self.jitter < 0:
            raise SourceError(f"{where}: EventTime jitter must be >= 0, got {self.jitter}")
        if self.step is not None:
            _check_number(where, "EventTime step", self.step)
            if self.step <= 0:
                raise SourceError(f"{where}: EventTime step must be > 0, got {self.step}")

    def generate(self, rng: np.random.Generator, rows: np.ndarray, clock: RowClock) -> pa.Array:
        due = clock.due_us(rows, None if self.step is None else self.step * 1e6)
        late = np.floor(rng.random(len(rows)) * (self.jitter * 1e6)).astype(np.int64)
        return pa.array(due - late, type=TIMESTAMP)


@dataclass(frozen=True)
class Text(FieldGenerator):
    """A string of ``min_words``..``max_words`` words from a vocabulary (words ``w0``, ``w1``,
    ... when ``vocabulary`` is a number), uniform or Zipf-skewed (``skew`` > 0) like natural
    text.

    >>> from sluice import sources as S
    >>> S.generator(fields={"line": S.Text()}).schema().field("line").type
    DataType(string)
    """

    vocabulary: int | tuple = 1000
    min_words: int = 1
    max_words: int = 10
    skew: float = 0.0

    def __post_init__(self):
        if not isinstance(self.vocabulary, (int, str)):
            object.__setattr__(self, "vocabulary", tuple(self.vocabulary))

    def arrow_type(self) -> pa.DataType:
        return pa.string()

    def _words(self) -> pa.Array:
        if isinstance(self.vocabulary, int):
            return _numbered_words(self.vocabulary)
        return pa.array(list(self.vocabulary), type=pa.string())

    def validate(self, where: str) -> None:
        if isinstance(self.vocabulary, int):
            if isinstance(self.vocabulary, bool) or self.vocabulary < 1:
                raise SourceError(f"{where}: Text vocabulary size must be >= 1")
        elif not self.vocabulary or not all(isinstance(w, str) for w in self.vocabulary):
            raise SourceError(f"{where}: Text vocabulary must be a size or non-empty strings")
        if not (isinstance(self.min_words, int) and isinstance(self.max_words, int)) or not (
            0 <= self.min_words <= self.max_words
        ):
            raise SourceError(
                f"{where}: Text needs integers 0 <= min_words <= max_words, got {self.min_words!r}, {self.max_words!r}"
            )
        _check_number(where, "Text skew", self.skew)
        if self.skew < 0:
            raise SourceError(f"{where}: Text skew must be >= 0, got {self.skew}")

    def generate(self, rng: np.random.Generator, rows: np.ndarray, clock: RowClock) -> pa.Array:
        words = self._words()
        counts = rng.integers(self.min_words, self.max_words + 1, size=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int32)
        np.cumsum(counts, out=offsets[1:])
        picks = _draw_ranks(rng, len(words), int(offsets[-1]), self.skew)
        lists = pa.ListArray.from_arrays(pa.array(offsets), words.take(pa.array(picks)))
        return pc.binary_join(lists, " ")


@functools.lru_cache(maxsize=8)
def _numbered_words(n: int) -> pa.Array:
    return pc.binary_join_element_wise("w", pc.cast(pa.array(np.arange(n)), pa.string()), "")


# --------------------------------------------------------------------------------------------
# Source specs
# --------------------------------------------------------------------------------------------


def _check_optional_positive(where: str, name: str, value: Any, integer: bool) -> None:
    if value is None:
        return
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0 or (not integer and not math.isfinite(value)):
        what = "a positive integer" if integer else "a positive number"
        raise SourceError(f"{where}: {name} must be {what} or None, got {value!r}")


def spark_compatible(schema: pa.Schema) -> pa.Schema:
    """The schema with types Spark can hold: timestamps as UTC microseconds, unsigned ints
    widened to int64, large strings as strings, dictionaries as their values."""

    def convert(t: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(t):
            return TIMESTAMP
        if pa.types.is_unsigned_integer(t):
            return pa.int64()
        if pa.types.is_large_string(t):
            return pa.string()
        if pa.types.is_large_binary(t):
            return pa.binary()
        if pa.types.is_float16(t):
            return pa.float32()
        if pa.types.is_dictionary(t):
            return convert(t.value_type)
        if pa.types.is_null(t):
            return pa.string()
        return t

    return pa.schema([pa.field(f.name, convert(f.type), nullable=True) for f in schema])


@dataclass(frozen=True, kw_only=True)
class SourceSpec:
    """What every source says about itself.

    ``event_time`` names the event-time column (a timestamp), if any; ``watermark_delay`` is
    the bounded out-of-orderness in seconds; ``max_rows_per_batch`` is the default admission
    limit (the runtime can change it while running, see ``runtime.sources.set_max_rows``).
    """

    event_time: str | None = None
    watermark_delay: float = 0.0
    max_rows_per_batch: int | None = None

    @property
    def kind(self) -> str:
        return type(self).__name__

    @property
    def finite(self) -> bool:
        """True if the source ends by itself (then ``runtime.sources.is_exhausted`` tells when
        its last row has been admitted)."""
        return False

    def schema(self) -> pa.Schema:
        """The user-visible columns (the hidden INGEST_TS column is not among them)."""
        raise NotImplementedError

    def _validate_common(self, where: str) -> None:
        _check_optional_positive(where, "max_rows_per_batch", self.max_rows_per_batch, True)
        _check_number(where, "watermark_delay", self.watermark_delay)
        if self.watermark_delay < 0:
            raise SourceError(f"{where}: watermark_delay must be >= 0, got {self.watermark_delay}")

    def _validate_event_time(self, where: str, schema: pa.Schema) -> None:
        if self.event_time is None:
            return
        if self.event_time not in schema.names:
            raise SourceError(f"{where}: event_time column {self.event_time!r} is not among the columns {schema.names}")
        if not pa.types.is_timestamp(schema.field(self.event_time).type):
            raise SourceError(
                f"{where}: event_time column {self.event_time!r} must be a timestamp, it is {schema.field(self.event_time).type}"
            )


def _check_column_names(where: str, names: SequenceOf[str]) -> None:
    for name in names:
        if not isinstance(name, str) or not name:
            raise SourceError(f"{where}: column names must be non-empty strings, got {name!r}")
        if name.startswith("__"):
            raise SourceError(f"{where}: column {name!r}: names starting with '__' are reserved for Sluice")


@dataclass(frozen=True, kw_only=True)
class GeneratorSource(SourceSpec):
    """Synthetic rows: ``fields`` maps column names to FieldGenerators.

    ``rate`` rows/s, or a schedule of steps ``[(seconds after the start, rows/s), ...]``
    (a ``RateSchedule``: one source whose rate steps up and down, replayable like a constant
    rate), or None: as fast as admission control lets in; ``seed`` fixes the
    values; ``total_rows`` ends the source after that many rows (None: endless);
    ``start_time`` (epoch seconds) fixes the clock of row 0, else it is the query's first
    start, recorded in Spark's offsets so a restart replays identical rows.

    ``event_time`` defaults to the only EventTime field, if there is exactly one, and
    ``watermark_delay`` to its jitter.

    >>> from sluice import sources as S
    >>> readings = S.generator(fields={"meter": S.Keys(100, prefix="m-"), "kwh": S.Normal(0.4, 0.1),
    ...                                "ts": S.EventTime()}, rate=1000)
    >>> readings.schema().names, readings.event_time
    (['meter', 'kwh', 'ts'], 'ts')
    """

    fields: Mapping[str, FieldGenerator]
    rate: Rate | None = None
    seed: int = 0
    total_rows: int | None = None
    start_time: float | None = None
    watermark_delay: float | None = None  # type: ignore[assignment]

    def __post_init__(self):
        where = "GeneratorSource"
        if not isinstance(self.fields, Mapping) or not self.fields:
            raise SourceError(f"{where}: fields must be a non-empty mapping of name -> generator")
        object.__setattr__(self, "fields", dict(self.fields))
        _check_column_names(where, list(self.fields))
        for name, gen in self.fields.items():
            if not isinstance(gen, FieldGenerator):
                raise SourceError(
                    f"{where} field {name!r}: {gen!r} is not a field generator "
                    "(Keys, Sequence, Uniform, Normal, Choice, EventTime, Text)"
                )
            gen.validate(f"{where} field {name!r}")
        object.__setattr__(self, "rate", as_rate(where, self.rate))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise SourceError(f"{where}: seed must be an integer >= 0, got {self.seed!r}")
        if self.total_rows is not None and (
            isinstance(self.total_rows, bool) or not isinstance(self.total_rows, int) or self.total_rows < 0
        ):
            raise SourceError(f"{where}: total_rows must be an integer >= 0 or None, got {self.total_rows!r}")
        if self.start_time is not None:
            _check_number(where, "start_time", self.start_time)
        clocks = [n for n, g in self.fields.items() if isinstance(g, EventTime)]
        if self.event_time is None and len(clocks) == 1:
            object.__setattr__(self, "event_time", clocks[0])
        if self.watermark_delay is None:
            clock = self.fields.get(self.event_time) if self.event_time else None
            delay = clock.jitter if isinstance(clock, EventTime) else 0.0
            object.__setattr__(self, "watermark_delay", float(delay))
        self._validate_common(where)
        self._validate_event_time(where, self.schema())

    def __hash__(self) -> int:
        # ``fields`` is a dict (friendly to write), so hash its items.
        return hash(
            (
                tuple(self.fields.items()),
                self.rate,
                self.seed,
                self.total_rows,
                self.start_time,
                self.event_time,
                self.watermark_delay,
                self.max_rows_per_batch,
            )
        )

    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(n, g.arrow_type()) for n, g in self.fields.items()])

    @property
    def finite(self) -> bool:
        return self.total_rows is not None

    def clock(self, start_us: int) -> RowClock:
        if isinstance(self.rate, RateSchedule):
            return RowClock(int(start_us), 1e6 / self.rate.steps[0][1], self.rate)
        interval = 1e6 / self.rate if self.rate else DEFAULT_EVENT_STEP * 1e6
        return RowClock(start_us=int(start_us), interval_us=interval)

    def generate(self, first: int, stop: int, start_us: int) -> list[pa.RecordBatch]:
        """Rows ``first`` (inclusive) to ``stop`` (exclusive), user columns only.

        Deterministic in (seed, row index): block b of GENERATOR_BLOCK_ROWS rows is drawn as
        a whole from ``default_rng([seed, field, b])`` and then sliced, so the same row gets
        the same values whichever range it is asked in.
        """
        if self.total_rows is not None:
            stop = min(stop, self.total_rows)
        if stop <= first:
            return []
        clock = self.clock(start_us)
        schema = self.schema()
        block_rows = GENERATOR_BLOCK_ROWS
        batches = []
        for block in range(first // block_rows, (stop - 1) // block_rows + 1):
            rows = np.arange(block * block_rows, (block + 1) * block_rows, dtype=np.int64)
            columns = [
                gen.generate(np.random.default_rng([self.seed, j, block]), rows, clock)
                for j, gen in enumerate(self.fields.values())
            ]
            batch = pa.RecordBatch.from_arrays(columns, schema=schema)
            lo = max(first - block * block_rows, 0)
            hi = min(stop - block * block_rows, block_rows)
            batches.append(batch.slice(lo, hi - lo))
        return batches


def data_files(path: str) -> list[str]:
    """Visible regular files under a directory, sorted by name (hidden '.x' and '_x' are
    work-in-progress or metadata files by convention, e.g. Spark's _SUCCESS)."""
    names = sorted(n for n in os.listdir(path) if not n.startswith((".", "_")) and os.path.isfile(os.path.join(path, n)))
    return [os.path.join(path, n) for n in names]


SCHEMA_SAMPLE_BYTES = 1 << 20
"""Schema inference of JSON lines and CSV looks at (about) the first MiB of the file."""


def _head(path: str) -> pa.BufferReader:
    """The file's first SCHEMA_SAMPLE_BYTES, cut after the last whole line."""
    with open(path, "rb") as f:
        data = f.read(SCHEMA_SAMPLE_BYTES)
        if f.read(1):
            data = data[: data.rfind(b"\n") + 1] or data
    return pa.BufferReader(data)


def read_file_schema(path: str, fmt: str) -> pa.Schema:
    """The schema pyarrow infers for one data file (from its first MiB for JSON and CSV)."""
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_schema(path)
        if fmt == "csv":
            import pyarrow.csv as pacsv

            return pacsv.read_csv(_head(path)).schema
        import pyarrow.json as pajson

        return pajson.read_json(_head(path)).schema
    except (pa.ArrowException, OSError) as e:
        raise SourceError(f"cannot read the schema of {path!r} as {fmt}: {e}") from None


def _file_spec_schema(where: str, path: str, fmt: str, schema: pa.Schema | None, files: list[str]) -> pa.Schema:
    if fmt not in FILE_FORMATS:
        raise SourceError(f"{where}: unknown format {fmt!r} (use one of {', '.join(FILE_FORMATS)})")
    if isinstance(schema, dict):  # {"meter": "string", "kwh": "double"}, as schema= takes everywhere
        schema = as_schema(schema, f"{where}: ")
    if schema is not None:
        if not isinstance(schema, pa.Schema):
            raise SourceError(f"{where}: schema must be a dict of column to type name or a pyarrow.Schema, got {type(schema)}")
        given = schema
    elif files:
        given = read_file_schema(files[0], fmt)
    else:
        raise SourceError(f"{where}: no schema given and no file in {path!r} to infer it from; pass schema=")
    if len(given) == 0:
        raise SourceError(f"{where}: the schema has no columns")
    _check_column_names(where, given.names)
    return spark_compatible(given)


@dataclass(frozen=True, kw_only=True)
class DirectorySource(SourceSpec):
    """Files dropped into a directory; each new file is read once, whole.

    Files are taken in a deterministic order: new files found at one look are sorted by
    ``order`` ("name", or "mtime" then name) and appended to the source's file log. Write a
    file elsewhere (or under a hidden name, '.x' or '_x') and rename it into place, so
    that the source never sees it half-written. ``schema`` defaults to the first file's.

    ``available_now=True`` makes the source finite: it reads the files there when the job
    starts (a file added later is not read), then ends with the end-of-input batch that
    emits every window still open, and ``Pipeline.run`` returns (Spark's
    ``trigger(availableNow=True)`` for a file stream).

    >>> import tempfile, pyarrow as pa
    >>> from sluice import sources as S
    >>> inbox = S.directory(tempfile.mkdtemp(), schema=pa.schema([("meter", pa.string()), ("kwh", pa.float64())]),
    ...                     format="json")
    >>> inbox.schema().names
    ['meter', 'kwh']
    """

    path: str
    format: str = "json"
    schema_: pa.Schema | None = field(default=None, repr=False)
    order: str = "name"
    available_now: bool = False

    def __init__(
        self,
        path: str,
        format: str = "json",
        schema: pa.Schema | None = None,
        *,
        order: str = "name",
        event_time: str | None = None,
        watermark_delay: float = 0.0,
        max_rows_per_batch: int | None = None,
        available_now: bool = False,
    ):
        set_ = functools.partial(object.__setattr__, self)
        set_("path", os.fspath(path) if isinstance(path, os.PathLike) else path)
        set_("format", format)
        set_("order", order)
        set_("available_now", available_now)
        set_("event_time", event_time)
        set_("watermark_delay", watermark_delay)
        set_("max_rows_per_batch", max_rows_per_batch)
        where = f"DirectorySource({path!r})"
        if not isinstance(self.path, str) or not os.path.isdir(self.path):
            raise SourceError(f"{where}: no such directory")
        if order not in ("name", "mtime"):
            raise SourceError(f"{where}: order must be 'name' or 'mtime', got {order!r}")
        if not isinstance(available_now, bool):
            raise SourceError(f"{where}: available_now must be True or False, got {available_now!r}")
        set_("schema_", _file_spec_schema(where, self.path, format, schema, data_files(self.path)))
        self._validate_common(where)
        self._validate_event_time(where, self.schema_)

    @property
    def finite(self) -> bool:
        return self.available_now

    def schema(self) -> pa.Schema:
        return self.schema_


@dataclass(frozen=True, kw_only=True)
class ReplaySource(SourceSpec):
    """A recorded file (or a small directory of files, in name order) replayed at ``rate``
    rows/s: row i becomes available at start + i/rate (or by a schedule of steps, as for
    GeneratorSource). ``rate=None`` replays as fast as admitted. ``start_time`` as for
    GeneratorSource. The source ends after the last row.

    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> path = os.path.join(tempfile.mkdtemp(), "recorded.parquet")
    >>> pq.write_table(pa.table({"meter": ["m-1"], "kwh": [0.5]}), path)
    >>> from sluice import sources as S
    >>> S.replay(path, format="parquet", rate=100).schema().names
    ['meter', 'kwh']
    """

    path: str
    format: str = "json"
    rate: Rate | None = None
    schema_: pa.Schema | None = field(default=None, repr=False)
    start_time: float | None = None

    def __init__(
        self,
        path: str,
        format: str = "json",
        rate: Rate | None = None,
        schema: pa.Schema | None = None,
        *,
        start_time: float | None = None,
        event_time: str | None = None,
        watermark_delay: float = 0.0,
        max_rows_per_batch: int | None = None,
    ):
        set_ = functools.partial(object.__setattr__, self)
        set_("path", os.fspath(path) if isinstance(path, os.PathLike) else path)
        set_("format", format)
        set_("rate", rate)
        set_("start_time", start_time)
        set_("event_time", event_time)
        set_("watermark_delay", watermark_delay)
        set_("max_rows_per_batch", max_rows_per_batch)
        where = f"ReplaySource({path!r})"
        if not isinstance(self.path, str) or not os.path.exists(self.path):
            raise SourceError(f"{where}: no such file or directory")
        set_("rate", as_rate(where, rate))
        if start_time is not None:
            _check_number(where, "start_time", start_time)
        files = self.files()
        if not files:
            raise SourceError(f"{where}: no data file to replay")
        set_("schema_", _file_spec_schema(where, self.path, format, schema, files))
        self._validate_common(where)
        self._validate_event_time(where, self.schema_)

    def files(self) -> list[str]:
        return data_files(self.path) if os.path.isdir(self.path) else [self.path]

    @property
    def finite(self) -> bool:
        return True

    def schema(self) -> pa.Schema:
        return self.schema_


@dataclass(frozen=True, kw_only=True)
class SparkSource(SourceSpec):
    """Any Spark streaming DataFrame: ``factory(spark)`` builds it.

    Sluice cannot see its columns before Spark runs, so pass ``schema`` (a pyarrow.Schema)
    for the job graph to validate against. Admission control is the wrapped source's own
    (e.g. ``maxFilesPerTrigger``); ``INGEST_TS`` is the batch's processing time unless the
    DataFrame already has that column.

    >>> import pyarrow as pa
    >>> from sluice import sources as S
    >>> ticks = S.spark(lambda spark: spark.readStream.format("rate").load(),
    ...                 schema=pa.schema([("timestamp", pa.timestamp("us", tz="UTC")), ("value", pa.int64())]))
    >>> ticks.schema().names
    ['timestamp', 'value']
    """

    factory: Callable[[Any], Any]
    schema_: pa.Schema | None = field(default=None, repr=False)

    def __init__(
        self,
        factory: Callable[[Any], Any],
        schema: pa.Schema | None = None,
        *,
        event_time: str | None = None,
        watermark_delay: float = 0.0,
    ):
        set_ = functools.partial(object.__setattr__, self)
        set_("factory", factory)
        set_("event_time", event_time)
        set_("watermark_delay", watermark_delay)
        set_("max_rows_per_batch", None)
        where = "SparkSource"
        if not callable(factory):
            raise SourceError(f"{where}: factory must be callable (spark -> DataFrame), got {factory!r}")
        if schema is not None and not isinstance(schema, pa.Schema):
            raise SourceError(f"{where}: schema must be a pyarrow.Schema, got {type(schema)}")
        set_("schema_", schema)
        self._validate_common(where)
        if schema is not None:
            self._validate_event_time(where, schema)

    def schema(self) -> pa.Schema:
        if self.schema_ is None:
            raise SourceError(
                "SparkSource: its columns are unknown before Spark runs; pass schema= (a pyarrow.Schema) to SparkSource"
            )
        return self.schema_
