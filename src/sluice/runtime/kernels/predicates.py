"""A SQL filter evaluated in Arrow, with Spark's semantics, for the subset where both agree.

A ``filter("wh >= 0")`` (kind ``filter_expr``) right after a fused Python chain is a Spark operator of its own: the
chain's records go from Python back to the JVM only to be filtered there. When the filter's
expression falls in the subset below, the chain evaluates it on its Arrow batches instead
(``runtime.batch.compile``), which also lets a map-side combine follow it in the same pass.

The subset, each part chosen because Arrow computes exactly what Spark does:

* ``AND``, ``OR``, ``NOT`` and parentheses: SQL's three-valued logic (Arrow's Kleene kernels);
* ``column IS [NOT] NULL`` on any column (a NaN is not NULL, in both);
* a comparison (``= == != <> < <= > >=``) between a column and a literal, either side:
  an integer column with an integer literal (exact in both); a double column with a number
  (Spark compares as doubles; NaN equals NaN and is above every other number there, which is
  applied explicitly, since IEEE comparisons say otherwise); a string column with a string
  literal (both compare the UTF-8 bytes); a boolean column with ``true`` or ``false``;
* a boolean column alone.

Anything else (functions, arithmetic, casts, ``IN``, ``LIKE``, ``float`` or decimal or time
columns, an integer column against a fraction, column against column, a ``NULL`` literal,
names that are not exactly a column's) is not compiled: :func:`arrow_predicate` returns None
and Spark runs the filter, as before. A row is kept where the predicate is true (NULL drops
it), as in SQL.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.graph.operators import Operator
from sluice.graph.specs import FilterExprOp
from sluice.runtime.kernels.stateless import Kernel

Predicate = Callable[[pa.RecordBatch], pa.Array]  # a boolean array, NULL where SQL says unknown

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>'[^'\\]*')
    | (?P<quoted>`[^`]+`)
    | (?P<number>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?[LlDd]?|\.\d+(?:[eE][-+]?\d+)?[Dd]?)
    | (?P<word>[A-Za-z_][A-Za-z_0-9]*)
    | (?P<op><=>|==|!=|<>|<=|>=|[=<>()\-])
    )""",
    re.VERBOSE,
)

_COMPARE = {
    "=": "equal",
    "==": "equal",
    "!=": "not_equal",
    "<>": "not_equal",
    "<": "less",
    "<=": "less_equal",
    ">": "greater",
    ">=": "greater_equal",
}
_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "==": "==", "!=": "!=", "<>": "<>"}
# Spark orders NaN above every other double: a NaN value is greater than any number
# literal. IEEE's comparisons say the same for = < <= (false) and != (true), not for > and >=
_ABOVE = (">", ">=")


class _Unsupported(Exception):
    """The expression is outside the subset: Spark evaluates it."""


@dataclass(frozen=True)
class _Literal:
    kind: str  # "int", "number" (a fraction or a double), "string", "bool"
    value: Any


@dataclass(frozen=True)
class _Column:
    name: str


def arrow_predicate(expression: str, schema: pa.Schema) -> Predicate | None:
    """The filter ``expression`` over batches of ``schema`` as an Arrow function, or None
    when it is outside the subset Arrow evaluates exactly as Spark does (module docstring)."""
    try:
        tokens = _tokens(expression)
        parser = _Parser(tokens, schema)
        node = parser.disjunction()
        if parser.position != len(tokens):
            raise _Unsupported(f"unexpected {tokens[parser.position][1]!r}")
        if isinstance(node, _Column):
            node = _boolean_column(node, schema)
        if not callable(node):
            raise _Unsupported("not a condition")
    except _Unsupported:
        return None
    return node


def _tokens(expression: str) -> list[tuple[str, str]]:
    tokens, position = [], 0
    text = expression.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise _Unsupported(f"cannot read {text[position:]!r}")
        kind = match.lastgroup
        assert kind is not None
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


class _Parser:
    """Recursive descent over the subset's grammar: OR of ANDs of NOTs of comparisons."""

    def __init__(self, tokens: list[tuple[str, str]], schema: pa.Schema):
        self.tokens, self.schema, self.position = tokens, schema, 0

    def _peek(self) -> tuple[str, str]:
        return self.tokens[self.position] if self.position < len(self.tokens) else ("end", "")

    def _word(self, *words: str) -> bool:
        kind, text = self._peek()
        if kind == "word" and text.lower() in words:
            self.position += 1
            return True
        return False

    def _take(self) -> tuple[str, str]:
        token = self._peek()
        if token[0] == "end":
            raise _Unsupported("unexpected end")
        self.position += 1
        return token

    def disjunction(self) -> Any:
        node = self.conjunction()
        while self._word("or"):
            node = _logical(pc.or_kleene, node, self.conjunction(), self.schema)
        return node

    def conjunction(self) -> Any:
        node = self.negation()
        while self._word("and"):
            node = _logical(pc.and_kleene, node, self.negation(), self.schema)
        return node

    def negation(self) -> Any:
        if self._word("not"):
            inner = _condition(self.negation(), self.schema)
            return lambda batch: pc.invert(inner(batch))
        return self.comparison()

    def comparison(self) -> Any:
        left = self.operand()
        if self._word("is"):
            negated = self._word("not")
            if not self._word("null") or not isinstance(left, _Column):
                raise _Unsupported("IS takes a column and [NOT] NULL")
            name = left.name
            if negated:
                return lambda batch: pc.is_valid(batch.column(name))
            return lambda batch: pc.is_null(batch.column(name))
        kind, text = self._peek()
        if kind == "op" and text in _COMPARE:
            self.position += 1
            return _compare(left, text, self.operand(), self.schema)
        return left

    def operand(self) -> Any:
        kind, text = self._take()
        if kind == "op" and text == "(":
            node = self.disjunction()
            if self._take() != ("op", ")"):
                raise _Unsupported("unbalanced parentheses")
            return node
        if kind == "op" and text == "-":
            literal = self.operand()
            if not isinstance(literal, _Literal) or literal.kind not in ("int", "number"):
                raise _Unsupported("minus before a non-number")
            return _Literal(literal.kind, -literal.value)
        if kind == "number":
            return _number(text)
        if kind == "string":
            return _Literal("string", text[1:-1])
        if kind == "quoted":
            return self._column(text[1:-1])
        if kind == "word":
            lowered = text.lower()
            if lowered in ("true", "false"):
                return _Literal("bool", lowered == "true")
            if self._peek() == ("op", "(") or lowered in _RESERVED:
                raise _Unsupported(f"{text!r} is a function or a keyword")
            return self._column(text)
        raise _Unsupported(f"unexpected {text!r}")

    def _column(self, name: str) -> _Column:
        if self.schema.get_field_index(name) < 0:  # absent, or two columns of the name
            raise _Unsupported(f"no single column {name!r}")
        return _Column(name)


_RESERVED = frozenset(
    [
        "and",
        "or",
        "not",
        "is",
        "null",
        "in",
        "like",
        "rlike",
        "ilike",
        "between",
        "case",
        "when",
        "then",
        "else",
        "end",
        "cast",
        "try_cast",
        "interval",
        "distinct",
        "exists",
        "div",
    ]
)


def _number(text: str) -> _Literal:
    suffix = text[-1].lower()
    if suffix == "l":
        return _Literal("int", int(text[:-1]))
    if suffix == "d" or any(c in text for c in ".eE"):
        value = float(text.rstrip("dD"))
        if not math.isfinite(value):
            raise _Unsupported("a literal out of the double range")
        return _Literal("number", value)
    return _Literal("int", int(text))


def _condition(node: Any, schema: pa.Schema) -> Predicate:
    if isinstance(node, _Column):
        return _boolean_column(node, schema)
    if not callable(node):
        raise _Unsupported("a literal is not a condition")
    return node


def _boolean_column(column: _Column, schema: pa.Schema) -> Predicate:
    if not pa.types.is_boolean(schema.field(column.name).type):
        raise _Unsupported(f"column {column.name!r} is not boolean")
    return lambda batch: batch.column(column.name)


def _logical(fn, left: Any, right: Any, schema: pa.Schema) -> Predicate:
    a, b = _condition(left, schema), _condition(right, schema)
    return lambda batch: fn(a(batch), b(batch))


def _compare(left: Any, op: str, right: Any, schema: pa.Schema) -> Predicate:
    if isinstance(left, _Literal) and isinstance(right, _Column):
        left, op, right = right, _MIRROR[op], left
    if not (isinstance(left, _Column) and isinstance(right, _Literal)):
        raise _Unsupported("a comparison of a column with a literal")
    name, dtype, literal = left.name, schema.field(left.name).type, right
    fn = getattr(pc, _COMPARE[op])
    if pa.types.is_integer(dtype) and literal.kind == "int":
        if not -(2**63) <= literal.value < 2**63:
            raise _Unsupported("an integer literal beyond 64 bits")
        scalar = pa.scalar(literal.value, pa.int64())
        return lambda batch: fn(batch.column(name), scalar)
    if pa.types.is_float64(dtype) and literal.kind in ("int", "number"):
        value = pa.scalar(float(literal.value), pa.float64())
        if float(literal.value) != literal.value:  # an integer a double cannot hold
            raise _Unsupported("an integer literal beyond a double's precision")
        if op not in _ABOVE:  # IEEE says what Spark says
            return lambda batch: fn(batch.column(name), value)

        def above(batch: pa.RecordBatch) -> pa.Array:  # NaN > x and NaN >= x hold in Spark
            column = batch.column(name)
            return pc.or_kleene(fn(column, value), pc.is_nan(column))

        return above
    if (pa.types.is_string(dtype) or pa.types.is_large_string(dtype)) and literal.kind == "string":
        scalar = pa.scalar(literal.value, dtype)
        return lambda batch: fn(batch.column(name), scalar)
    if pa.types.is_boolean(dtype) and literal.kind == "bool":
        scalar = pa.scalar(literal.value)
        return lambda batch: fn(batch.column(name), scalar)
    raise _Unsupported(f"column {name!r} of {dtype} against a {literal.kind} literal")


class ArrowFilterKernel(Kernel):
    """A native ``filter`` run inside a fused Python chain (``runtime.batch.compile``): its
    predicate in Arrow; the records it keeps keep their ingest times."""

    def __init__(self, op: Operator, in_schema: pa.Schema, predicate: Predicate):
        super().__init__(op, in_schema, in_schema)
        self.predicate = predicate

    def apply(self, batch, ingest, ctx):
        keep = self.predicate(batch)
        return batch.filter(keep), ingest.filter(keep)


def fused_filter(op: Operator, in_schema: pa.Schema) -> ArrowFilterKernel | None:
    """The kernel of a native ``filter`` operator whose expression Arrow evaluates exactly as
    Spark does over records of ``in_schema``, or None (Spark runs it)."""
    if not isinstance(op.spec, FilterExprOp):
        return None
    predicate = arrow_predicate(op.spec.expr, in_schema)
    return None if predicate is None else ArrowFilterKernel(op, in_schema, predicate)
