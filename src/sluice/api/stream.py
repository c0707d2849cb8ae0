"""The fluent user API: a :class:`Stream` reads like the pipeline it builds.

Every method adds one operator to the pipeline's job graph and returns a new stream, so
nothing runs until :meth:`Pipeline.run`. Errors in use are raised here, naming the user's
line, rather than later inside Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sluice.api.joins import add_join, add_lookup
from sluice.api.windows import WindowedStream, add_window_operator, resolve_time, window_of_stream
from sluice.core.location import user_location
from sluice.errors import PipelineError
from sluice.graph import aggregates as agg_mod
from sluice.graph.alternates import Alt, check_alternates
from sluice.graph.identity import NAMED, auto_identity
from sluice.graph.operators import Operator
from sluice.graph.schemas import as_schema
from sluice.graph.sinks import SinkSpec
from sluice.graph.specs import (
    AggregateOp,
    DeduplicateOp,
    FilterExprOp,
    FilterFnOp,
    FlatMapOp,
    JoinOp,
    KeyByOp,
    KeyedSpec,
    MapBatchesOp,
    MapOp,
    OperatorSpec,
    ProcessOp,
    ReduceOp,
    SelectOp,
    SinkOp,
    TopOp,
    UnionOp,
    WithColumnsOp,
)
from sluice.graph.state_schema import parse_state_schema
from sluice.graph.ttl import parse_ttl
from sluice.graph.windows import parse_duration

if TYPE_CHECKING:
    from sluice.api.pipeline import Pipeline


def _require_callable(fn: Any, what: str, name: str | None) -> None:
    if not callable(fn):
        raise PipelineError(f"{what} needs a function, got {fn!r}", name or what, user_location())


def _function_params(
    fn: Callable | None, alternates: Mapping[str, Alt | Callable] | None, active: str | None, what: str, name: str | None
) -> dict[str, Any]:
    """The fields of an operator's function spec (``graph.specs.FunctionSpec``):
    ``{"fn": fn}``, or with ``alternates=`` (see
    :mod:`sluice.graph.alternates`) the default alternate's function, the alternates and
    which one runs first."""
    fn, alts, default = check_alternates(fn, alternates, active, what, name, user_location())
    return {"fn": fn, "alternates": alts, "active": default} if alts else {"fn": fn}


class Stream:
    """A stream of records (rows with a schema) flowing out of one operator."""

    def __init__(self, pipeline: Pipeline, op: Operator):
        self.pipeline = pipeline
        self.op = op

    @property
    def schema(self):
        return self.op.schema

    def _then(self, spec: OperatorSpec, name: str | None, inputs: tuple[str, ...] | None = None, **fields) -> Operator:
        graph = self.pipeline.graph
        inputs = inputs or (self.op.id,)
        identity = None
        if name is not None:
            op_id = name
            identity = NAMED + name if isinstance(spec, KeyedSpec) else None
        elif isinstance(spec, KeyedSpec):  # state is kept under the id: one that survives unrelated changes
            op_id, identity = auto_identity(graph, spec.kind, inputs, spec.keys)
        else:
            op_id = graph.new_id(spec.kind)
        op = Operator(
            id=op_id,
            kind=spec.kind,
            name=name or op_id,
            inputs=inputs,
            spec=spec,
            location=user_location(),
            identity=identity,
            **fields,
        )
        return graph.add(op)

    # ---- stateless, Python ---------------------------------------------------------------
    def map_batches(
        self,
        fn: Callable | None = None,
        schema=None,
        *,
        format: str = "arrow",
        name: str | None = None,
        threads: int = 1,
        perf_model: str | None = None,
        chain: bool = True,
        alternates: Mapping[str, Alt | Callable] | None = None,
        active: str | None = None,
    ) -> Stream:
        """Apply ``fn`` to whole batches: a ``pyarrow.RecordBatch`` (or a pandas DataFrame
        with ``format="pandas"``) in, the same kind out. The fast path for Python logic.

        ``schema`` is the output's columns, as a dict of column name to type name
        (``{"meter": "string", "kwh": "double", "ts": "timestamp"}``; type names: ``int``/
        ``int64``/``long``, ``int32``, ``double``/``float``, ``float32``, ``string``, ``bool``,
        ``timestamp`` (microseconds, UTC), ``binary``; Python types ``int``, ``float``,
        ``str``, ``bool``, ``bytes`` work too) or a ``pyarrow.Schema``. Without it the output
        is assumed to have exactly the input's columns: give it whenever ``fn`` adds, drops,
        renames or retypes a column.

        ``chain=False`` keeps the operator in a Python pass of its own: neither the initial
        plan nor the chaining policy fuses it with its neighbours.

        ``alternates``: instead of ``fn``, several implementations, of which the controller
        runs one at a time and may switch between batches:
        ``alternates={"arima": Alt(arima, value=0.95, cost=2e-4), "mean": Alt(mean, value=0.7)}``
        (``value``: quality relative to the best, in (0, 1]; ``cost``: CPU seconds per record,
        measured when not given). Every alternate returns this operator's ``schema``.
        ``active``: the one to start with (default: the highest value). See docs/dynamic.md.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> import pyarrow.compute as pc
        >>> def to_wh(batch):
        ...     return batch.set_column(1, "kwh", pc.multiply(batch.column("kwh"), 1000.0))
        >>> readings.map_batches(to_wh).op.kind
        'map_batches'
        """
        if format not in ("arrow", "pandas"):
            raise PipelineError(f"format must be 'arrow' or 'pandas', not {format!r}", name or "map_batches", user_location())
        function = _function_params(fn, alternates, active, "map_batches", name)
        op = self._then(
            MapBatchesOp(**function, format=format),
            name,
            schema=as_schema(schema),
            threads=threads,
            perf_model=perf_model,
            chain=chain,
        )
        return Stream(self.pipeline, op)

    def map(
        self,
        fn: Callable[[dict], dict] | None = None,
        schema=None,
        *,
        name: str | None = None,
        threads: int = 1,
        perf_model: str | None = None,
        chain: bool = True,
        alternates: Mapping[str, Alt | Callable] | None = None,
        active: str | None = None,
    ) -> Stream:
        """Apply ``fn`` to each record (a dict); it returns the new record (a dict).

        ``schema``: the output's columns, as for :meth:`map_batches` (a dict such as
        ``{"word": "string", "n": "int"}`` or a ``pyarrow.Schema``); without it the output is
        assumed to have the input's columns. A record that raises, or whose output does not
        fit the schema, goes to the dead-letter sink with the reason.

        ``chain=False`` keeps the operator in a Python pass of its own: neither the initial
        plan nor the chaining policy fuses it with its neighbours. ``alternates``, ``active``:
        several implementations instead of ``fn``, as for :meth:`map_batches`.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> wh = readings.map(lambda r: {"meter": r["meter"], "wh": r["kwh"] * 1000}, schema={"meter": "string", "wh": "double"})
        >>> wh.schema.names
        ['meter', 'wh']
        """
        function = _function_params(fn, alternates, active, "map", name)
        op = self._then(MapOp(**function), name, schema=as_schema(schema), threads=threads, perf_model=perf_model, chain=chain)
        return Stream(self.pipeline, op)

    def flat_map(
        self,
        fn: Callable[[dict], Any] | None = None,
        schema=None,
        *,
        name: str | None = None,
        perf_model: str | None = None,
        chain: bool = True,
        alternates: Mapping[str, Alt | Callable] | None = None,
        active: str | None = None,
    ) -> Stream:
        """Apply ``fn`` to each record; it returns an iterable of records (zero or more).

        ``schema``: the output's columns, as for :meth:`map_batches` (a dict of column name to
        type name, or a ``pyarrow.Schema``), e.g.
        ``lines.flat_map(lambda r: ({"word": w} for w in r["text"].split()), schema={"word": "string"})``.
        Without it the output is assumed to have the input's columns, which is rarely true of
        a flat_map: if a later operator then names a column the input lacks, the error says
        this flat_map's schema is probably missing.

        ``chain=False`` keeps the operator in a Python pass of its own: neither the initial
        plan nor the chaining policy fuses it with its neighbours. ``alternates``, ``active``:
        several implementations instead of ``fn``, as for :meth:`map_batches`.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> halves = readings.flat_map(lambda r: [{**r, "kwh": r["kwh"] / 2}] * 2)
        >>> halves.op.kind
        'flat_map'
        """
        function = _function_params(fn, alternates, active, "flat_map", name)
        op = self._then(FlatMapOp(**function), name, schema=as_schema(schema), perf_model=perf_model, chain=chain)
        return Stream(self.pipeline, op)

    def filter(self, condition: str | Callable[[dict], bool], *, name: str | None = None, chain: bool = True) -> Stream:
        """Keep records matching a Spark SQL condition (runs natively) or a Python predicate.
        ``chain=False`` (Python predicates): never fused with its neighbours.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> readings.filter("kwh > 0").op.kind, readings.filter(lambda r: r["kwh"] > 0).op.kind
        ('filter_expr', 'filter_fn')
        """
        if isinstance(condition, str):
            op = self._then(FilterExprOp(expr=condition), name)
        else:
            _require_callable(condition, "filter", name)
            op = self._then(FilterFnOp(fn=condition), name, chain=chain)
        return Stream(self.pipeline, op)

    # ---- stateless, native Spark SQL -----------------------------------------------------
    def select(self, *exprs: str, name: str | None = None) -> Stream:
        """Project with Spark SQL expressions, e.g. ``select("meter", "kwh * 1000 AS wh")``.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> readings.select("meter", "kwh * 1000 AS wh").op.spec.exprs
        ['meter', 'kwh * 1000 AS wh']
        """
        if not exprs or not all(isinstance(e, str) for e in exprs):
            raise PipelineError("select needs one or more SQL expression strings", name or "select", user_location())
        return Stream(self.pipeline, self._then(SelectOp(exprs=list(exprs)), name))

    def with_columns(self, name: str | None = None, **columns: str) -> Stream:
        """Add or replace columns from Spark SQL expressions: ``with_columns(wh="kwh * 1000")``.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> readings.with_columns(wh="kwh * 1000").op.spec.columns
        {'wh': 'kwh * 1000'}
        """
        if not columns or not all(isinstance(e, str) for e in columns.values()):
            raise PipelineError("with_columns needs name=SQL-expression pairs", name or "with_columns", user_location())
        return Stream(self.pipeline, self._then(WithColumnsOp(columns=dict(columns)), name))

    def union(self, *others: Stream, name: str | None = None) -> Stream:
        """Interleave this stream with others of the same schema.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> more = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> readings.union(more).op.inputs == (readings.op.id, more.op.id)
        True
        """
        for other in others:
            if not isinstance(other, Stream) or other.pipeline is not self.pipeline:
                raise PipelineError("union needs streams of the same pipeline", name or "union", user_location())
        inputs = (self.op.id, *tuple(o.op.id for o in others))
        return Stream(self.pipeline, self._then(UnionOp(), name, inputs=inputs))

    # ---- keyed -----------------------------------------------------------------------------
    def key_by(self, *keys: str, name: str | None = None) -> KeyedStream:
        """Partition the stream by key columns: records of one key meet in one place, with state.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> readings.key_by("meter").keys
        ['meter']
        """
        if not keys or not all(isinstance(k, str) for k in keys):
            raise PipelineError("key_by needs one or more column names", name or "key_by", user_location())
        op = self._then(KeyByOp(keys=list(keys)), name)
        return KeyedStream(self.pipeline, op, list(keys))

    # ---- windows (see sluice.api.windows) ------------------------------------------------
    def window(self, window, *, time=None, allowed_lateness=0, mode: str = "append"):
        """Windows over the whole stream (one global key): ``.window(sluice.windows.tumbling("1m"))
        .aggregate(n=agg.count())``. ``time``: the sources' event-time column (default when
        declared), or ``"processing"``.

        >>> import sluice
        >>> from sluice import agg, sources as S, windows as W
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> readings.window(W.tumbling("1m")).aggregate(n=agg.count()).op.kind
        'window'
        """
        return window_of_stream(self, window, time, allowed_lateness, mode)

    # ---- sinks -----------------------------------------------------------------------------
    def sink(self, spec: SinkSpec, *, name: str | None = None) -> Stream:
        """Write the stream to a sink. Call several times (or keep using the stream) to fan out.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> readings.sink(sluice.sinks.files("out/readings")) is readings  # it returns the stream
        True
        >>> [op.kind for op in p.graph.operators]
        ['source', 'sink']
        """
        if not isinstance(spec, SinkSpec):
            raise PipelineError(f"sink needs a sink spec (sluice.sinks.*), got {spec!r}", name or "sink", user_location())
        self._then(SinkOp(connector=spec), name)
        return self

    to = sink


class KeyedStream:
    """A stream partitioned by key: the place for per-key state."""

    def __init__(self, pipeline: Pipeline, op: Operator, keys: list[str]):
        self.pipeline = pipeline
        self.op = op
        self.keys = keys

    def _then(self, spec: OperatorSpec, name: str | None, **fields) -> Stream:
        return Stream(self.pipeline, Stream(self.pipeline, self.op)._then(spec, name, **fields))

    def aggregate(self, name: str | None = None, ttl=None, ttl_time: str = "event", initial_state=None, **aggregates) -> Stream:
        """Running aggregates per key; emits the updated row of every key a batch touched.

        ``aggregate(n=agg.count(), total=agg.sum("kwh"), avg=agg.mean("kwh"))``

        ``ttl`` (e.g. ``"1d"``): a key no record has updated for that long is forgotten, and
        its next record starts from nothing; measured in event time (the watermark) unless
        ``ttl_time="processing"`` (``sluice.graph.ttl``, docs/state.md). ``name``, ``ttl``,
        ``ttl_time`` and ``initial_state`` cannot name aggregates.

        ``initial_state``: each key's values before the first batch (a ``pyarrow.Table``, a
        pandas DataFrame or a Parquet path, with the key columns and one column per
        aggregate's stored partials, as :func:`sluice.state.read` shows them), applied once,
        when the checkpoint first runs this operator (docs/state.md, "Initial state").

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> per_meter = readings.key_by("meter").aggregate(n=sluice.agg.count(), avg=sluice.agg.mean("kwh"))
        >>> per_meter.op.kind, sorted(per_meter.op.spec.aggregates)
        ('aggregate', ['avg', 'n'])
        """
        if not aggregates:
            raise PipelineError(
                "aggregate needs at least one aggregate, e.g. n=sluice.agg.count()", name or "aggregate", user_location()
            )
        parsed = {out: agg_mod.parse(spec, out) for out, spec in aggregates.items()}
        ttl_fields = _ttl_params(ttl, ttl_time, name or "aggregate")
        spec = AggregateOp(keys=self.keys, aggregates=parsed, initial_state=initial_state, **ttl_fields)
        return self._then(spec, name)

    def reduce(
        self,
        fn: Callable[[dict, dict], dict] | None = None,
        *,
        name: str | None = None,
        alternates: Mapping[str, Alt | Callable] | None = None,
        active: str | None = None,
        ttl=None,
        ttl_time: str = "event",
    ) -> Stream:
        """Fold records of a key pairwise, ``fn(accumulated, record) -> accumulated``; emits
        the accumulated record of every key a batch touched. ``alternates``, ``active``:
        several implementations instead of ``fn`` (:meth:`process` says what happens to the
        state on a switch). ``ttl``, ``ttl_time``: as for :meth:`aggregate`.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> latest = readings.key_by("meter").reduce(lambda acc, r: r if r["ts"] >= acc["ts"] else acc)
        >>> latest.op.kind
        'reduce'
        """
        function = _function_params(fn, alternates, active, "reduce", name)
        return self._then(ReduceOp(keys=self.keys, **function, **_ttl_params(ttl, ttl_time, name or "reduce")), name)

    def process(
        self,
        fn: Callable | None = None,
        schema=None,
        *,
        name: str | None = None,
        alternates: Mapping[str, Alt | Callable] | None = None,
        active: str | None = None,
        ttl=None,
        ttl_time: str = "event",
        on_timer: Callable | None = None,
        state_schema=None,
        initial_state=None,
    ) -> Stream:
        """Run ``fn(key, rows, state)`` once per key and batch, with per-key state.

        ``state_schema`` (a dict of field name to type name, or a ``pyarrow.Schema``): the
        state is a record, a dict of those fields (a field left out is None), stored as typed
        columns and recorded in the checkpoint, so a restart that adds nullable fields or
        removes fields migrates it and any other change stops with the pipeline-change
        message (``sluice.graph.state_schema``). Without it the state is any picklable value.
        ``initial_state``: each key's state before the first batch (a ``pyarrow.Table``, a
        pandas DataFrame or a Parquet path with the key columns and the state's fields),
        applied once, when the checkpoint first runs this operator (docs/state.md).

        ``on_timer(key, timestamp, state)``: with it, ``fn`` and ``on_timer`` may call
        ``state.register_event_timer(ts)`` / ``register_processing_timer(ts)`` (a datetime
        or microseconds since the epoch) and ``delete_...``; a timer fires once, in the
        batch whose watermark (event time) or clock (processing time) has reached it, also
        for a key without new records; ``on_timer`` returns records to emit, as ``fn`` does
        (``sluice.runtime.kernels.process``, docs/state.md).

        ``ttl``, ``ttl_time``: a key's state expires as for :meth:`aggregate` (``fn`` then
        sees ``state.value`` None again).

        ``key`` is a tuple of key values, ``rows`` a ``pyarrow.Table`` of the key's records in
        this batch, ``state`` a :class:`sluice.runtime.kernels.process.KeyState` (``.value``,
        ``.update(v)``, ``.clear()``). ``fn`` returns records to emit (a list of dicts, a
        ``pyarrow.Table``, or None).

        ``schema``: the columns of the records ``fn`` emits, as a dict of column name to type
        name (``{"meter": "string", "alerts": "int", "ts": "timestamp"}``) or a
        ``pyarrow.Schema`` (see :meth:`Stream.map_batches` for the type names). Without it the
        output is assumed to have the input's columns.

        ``alternates``, ``active``: several implementations instead of ``fn``, as for
        :meth:`Stream.map_batches`. Alternates of a keyed operator **share its state**: a
        key's ``state`` is the one value whichever alternate runs, so a switch between
        batches carries it over (the alternate switched to reads what the other wrote, so
        they must agree on what the state holds), and a switch never loses or resets state.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> def spikes(key, rows, state):
        ...     seen = state.value or 0
        ...     state.update(seen + rows.num_rows)
        ...     return None
        >>> readings.key_by("meter").process(spikes).op.kind
        'process'
        """
        function = _function_params(fn, alternates, active, "process", name)
        if on_timer is not None and not callable(on_timer):
            raise PipelineError(
                f"process: on_timer must be a function (key, timestamp, state), got {on_timer!r}",
                name or "process",
                user_location(),
            )
        ttl_fields = _ttl_params(ttl, ttl_time, name or "process")
        try:
            typed = parse_state_schema(state_schema, self.keys, name or "process")
        except PipelineError as exc:
            raise PipelineError(str(exc), name or "process", user_location()) from None
        spec = ProcessOp(
            keys=self.keys, **function, on_timer=on_timer, state_schema=typed, initial_state=initial_state, **ttl_fields
        )
        return self._then(spec, name, schema=as_schema(schema))

    def deduplicate(self, within, *, time=None, name: str | None = None) -> Stream:
        """Drop the records of a key that follow its first one within ``within`` (seconds or
        a string like ``"10m"``): Spark's ``dropDuplicatesWithinWatermark``. A key's window
        opens at its first record's time and closes when the watermark passes it plus
        ``within`` (``time``: the sources' event-time column by default, or
        ``"processing"``); then its state is gone and its next record passes again. A
        record older than the watermark minus ``within`` is late (the ``late`` side output).

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> events = p.source(S.generator(fields={"id": S.Keys(100), "ts": S.EventTime()}, event_time="ts"))
        >>> events.key_by("id").deduplicate(within="10m").op.spec.within
        600000000
        """
        try:
            spec = DeduplicateOp(
                keys=self.keys, within=parse_duration(within, "deduplicate: within"), time=resolve_time(self, time)
            )
        except PipelineError as exc:
            raise PipelineError(str(exc), name or "deduplicate", user_location()) from None
        return self._then(spec, name)

    def top(self, n: int, by, *, ascending: bool = False, name: str | None = None) -> Stream:
        """The ``n`` records with the largest ``by`` (a column or a list of columns;
        ``ascending=True``: the smallest) per key, over everything seen so far. Each batch
        emits the whole current top of every key whose top it changed, with ``rank`` (1 is
        first); a ``sinks.read_latest(path, keys=[*keys, "rank"])`` gives the tops.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> bids = p.source(S.generator(fields={"item": S.Keys(10), "price": S.Uniform(1, 100)}))
        >>> bids.key_by("item").top(3, by="price").op.spec.by
        ['price']
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise PipelineError(f"top: n must be a positive integer, got {n!r}", name or "top", user_location())
        columns = [by] if isinstance(by, str) else list(by)
        if not columns or not all(isinstance(c, str) for c in columns):
            raise PipelineError(f"top: by must name a column or a list of columns, got {by!r}", name or "top", user_location())
        return self._then(TopOp(keys=self.keys, n=n, by=columns, ascending=bool(ascending)), name)

    def window(self, window, *, time=None, allowed_lateness=0, mode: str = "append", ttl=None, ttl_time: str = "event"):
        """Windows per key: ``.window(sluice.windows.sliding("15m", "1m")).aggregate(avg=agg.mean("kwh"))``.

        ``window``: ``tumbling(size)``, ``sliding(size, slide)`` or ``session(gap)`` from
        :mod:`sluice.windows`; ``time``: the sources' event-time column (the default when they
        declare one) or ``"processing"``; ``allowed_lateness``: how long a window stays open
        after the watermark passes its end; ``mode``: ``"append"`` (emit when the watermark
        passes the end) or ``"update"`` (early results every batch). ``ttl``, ``ttl_time``: a
        key's open windows are dropped, unemitted, once no record of it came for that long
        (as for :meth:`aggregate`; e.g. a session that never ends).

        >>> import sluice
        >>> from sluice import agg, sources as S, windows as W
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> hourly = readings.key_by("meter").window(W.sliding("1h", "5m")).aggregate(avg=agg.mean("kwh"))
        >>> hourly.op.spec.queries[0].window.label
        'sliding(1h,5m)'
        """
        return WindowedStream(self, window, time, allowed_lateness, mode, ttl=_ttl_params(ttl, ttl_time, "window").get("ttl"))

    def windows(self, *queries, time=None, name: str | None = None) -> Stream:
        """Several window queries (``sluice.windows.query(...)``) over this stream sharing one
        set of panes, so each record is processed once; rows carry the query's name in ``query``.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> readings = p.source(S.generator(fields={"meter": S.Keys(10), "kwh": S.Normal(0.4, 0.1), "ts": S.EventTime()}))
        >>> from sluice import agg, windows as W
        >>> both = readings.key_by("meter").windows(W.query(W.tumbling("1m"), n=agg.count()),
        ...                                         W.query(W.sliding("5m", "1m"), avg=agg.mean("kwh")))
        >>> len(both.op.spec.queries)
        2
        """
        return add_window_operator(self, list(queries), time, name)

    # ---- joins (see sluice.api.joins) -----------------------------------------------------
    def join(
        self,
        other: KeyedStream,
        *,
        window=None,
        between=None,
        how: str = "inner",
        time: str | None = None,
        right_time: str | None = None,
        allowed_lateness=0,
        suffixes: tuple[str, str] = ("_left", "_right"),
        name: str | None = None,
        ttl=None,
        ttl_time: str = "event",
    ) -> Stream:
        """Join with another keyed stream on event time, key by key (NULL keys never match).

        ``window``: ``tumbling(size)`` or ``sliding(size, slide)`` from :mod:`sluice.windows`:
        records of the same key in the same window pair up (once per window they share), and
        rows carry ``window_start``/``window_end``; or ``between=(lower, upper)``, e.g.
        ``("-5m", "+1m")``: ``other.t - self.t`` within the bounds (an interval join).
        ``how``: ``"inner"``, ``"left"``, ``"right"`` or ``"outer"``; unmatched records are
        emitted, padded with nulls, when their window (interval) closes. Matches are emitted
        as soon as both records have arrived. ``time``/``right_time``: the sides' event-time
        columns (default: the sources' declared ones). Records later than the watermark (plus
        ``allowed_lateness``) go to the operator's ``late`` side output. Output columns: the
        keys (this side's names), the window columns, this side's other columns, then the
        other side's; a name both sides have gets ``suffixes``. ``ttl``, ``ttl_time``: a
        key's buffered records are dropped once no record of that key has come for that
        long, as for :meth:`aggregate` (with ``ttl_time="processing"`` the buffer stays
        bounded also while the watermark stands still); dropped records are not emitted as
        unmatched. See docs/joins.md and docs/state.md.

        >>> import sluice
        >>> from sluice import sources as S, windows as W
        >>> p = sluice.Pipeline("example")
        >>> clicks = p.source(S.generator(fields={"user": S.Keys(10), "ts": S.EventTime()})).key_by("user")
        >>> views = p.source(S.generator(fields={"user": S.Keys(10), "ts": S.EventTime()})).key_by("user")
        >>> clicks.join(views, window=W.tumbling("1m"), how="left").op.kind
        'join'
        """
        _check_keyed(other, "join", name)
        spec = add_join(
            self,
            other,
            window=window,
            between=between,
            how=how,
            time=time,
            right_time=right_time,
            allowed_lateness=allowed_lateness,
            suffixes=suffixes,
            name=name,
            ttl=_ttl_params(ttl, ttl_time, name or "join").get("ttl"),
        )
        return self._joined(spec, other, name)

    def lookup(
        self,
        table: KeyedStream,
        *,
        version: str,
        how: str = "left",
        deleted: str | None = None,
        suffixes: tuple[str, str] = ("_left", "_right"),
        name: str | None = None,
        ttl=None,
        ttl_time: str = "event",
    ) -> Stream:
        """Enrich each record with the row of its key in a table that changes, given as a
        changelog stream (``table``: e.g. a PostgreSQL table read by a ``version`` column
        that every insert and update raises). The latest row per key (by ``version``) is
        kept in the key-group store, so it moves with the stream's key groups. A record sees
        the table as of its batch (the batch's changes first). ``how``: ``"left"`` (records
        without a row get nulls) or ``"inner"``; ``deleted``: a boolean column of the table
        marking a deletion. See docs/joins.md.

        >>> import sluice
        >>> from sluice import sources as S
        >>> p = sluice.Pipeline("example")
        >>> orders = p.source(S.generator(fields={"customer": S.Keys(10), "amount": S.Normal(50, 10)}))
        >>> customers = p.source(S.generator(fields={"id": S.Keys(10), "seq": S.Sequence(), "tier": S.Choice(("a", "b"))}))
        >>> orders.key_by("customer").lookup(customers.key_by("id"), version="seq").op.kind
        'join'
        """
        _check_keyed(table, "lookup", name)
        ttl_spec = _ttl_params(ttl, ttl_time, name or "lookup").get("ttl")
        spec = add_lookup(self, table, version=version, how=how, deleted=deleted, suffixes=suffixes, name=name, ttl=ttl_spec)
        return self._joined(spec, table, name)

    def _joined(self, spec: JoinOp, other: KeyedStream, name: str | None) -> Stream:
        op = Stream(self.pipeline, self.op)._then(spec, name, inputs=(self.op.id, other.op.id))
        return Stream(self.pipeline, op)


def _ttl_params(ttl, ttl_time: str, where: str) -> dict:
    """``{"ttl": StateTTL}`` for a keyed operator's spec, or {} without a TTL."""
    try:
        parsed = parse_ttl(ttl, ttl_time, where)
    except PipelineError as exc:
        raise PipelineError(str(exc), where, user_location()) from None
    return {} if parsed is None else {"ttl": parsed}


def _check_keyed(other: Any, what: str, name: str | None) -> None:
    if not isinstance(other, KeyedStream):
        raise PipelineError(f"{what} needs a keyed stream (other.key_by(...)), got {other!r}", name or what, user_location())
