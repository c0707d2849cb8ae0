"""Just enough of Spark SQL's expression syntax to find the columns an expression uses.

The graph is validated without Spark: this lets it name an unknown column before anything
runs. Types of expression results are left to a typer the runtime supplies (Spark's own
analyzer), so this module never has to be a SQL type checker.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r"""
    (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<quoted>`[^`]+`)
  | (?P<number>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?[LlDdSsYy]?)
  | (?P<ident>[A-Za-z_][A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)*)
  | (?P<other>\S)
    """,
    re.VERBOSE,
)

# words that are part of SQL's grammar or literals, never column names
_KEYWORDS = frozenset(
    [
        "and",
        "or",
        "not",
        "div",
        "in",
        "is",
        "null",
        "true",
        "false",
        "like",
        "rlike",
        "ilike",
        "between",
        "case",
        "when",
        "then",
        "else",
        "end",
        "as",
        "cast",
        "try_cast",
        "interval",
        "distinct",
        "exists",
        "if",
        "asc",
        "desc",
        "nulls",
        "first",
        "last",
        "over",
        "partition",
        "by",
        "order",
        "rows",
        "range",
        "unbounded",
        "preceding",
        "following",
        "current",
        "row",
        "date",
        "timestamp",
        "timestamp_ntz",
        "timestamp_ltz",
        "string",
        "int",
        "integer",
        "bigint",
        "smallint",
        "tinyint",
        "double",
        "float",
        "real",
        "boolean",
        "decimal",
        "binary",
        "long",
        "short",
        "byte",
        "varchar",
        "char",
        "day",
        "days",
        "hour",
        "hours",
        "minute",
        "minutes",
        "second",
        "seconds",
        "millisecond",
        "milliseconds",
        "microsecond",
        "microseconds",
        "week",
        "weeks",
        "month",
        "months",
        "year",
        "years",
        "array",
        "map",
        "struct",
    ]
)


def referenced_columns(expression: str) -> set[str]:
    """Top-level column names an expression reads (function names and keywords excluded)."""
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(expression)]
    columns: set[str] = set()
    for i, (kind, text) in enumerate(tokens):
        if kind == "quoted":
            columns.add(text[1:-1])
        elif kind == "ident":
            nxt = tokens[i + 1][1] if i + 1 < len(tokens) else ""
            prev = tokens[i - 1][1] if i > 0 else ""
            if nxt == "(" or text.lower() in _KEYWORDS:
                continue  # a function call or SQL keyword
            if prev.lower() == "as":
                continue  # an alias being defined
            columns.add(text.split(".")[0])
    return columns


_ALIAS = re.compile(r"^(?P<expr>.*?)\s+(?:as\s+)?`?(?P<alias>[A-Za-z_][A-Za-z_0-9]*)`?\s*$", re.I | re.S)


def output_name(expression: str) -> str:
    """The name Spark gives the column of a select expression ("a + 1 AS b" -> "b")."""
    text = expression.strip()
    if re.fullmatch(r"`?[A-Za-z_][A-Za-z_0-9]*`?", text):
        return text.strip("`")
    m = re.search(r"\s+as\s+`?([A-Za-z_][A-Za-z_0-9]*)`?\s*$", text, re.I)
    if m:
        return m.group(1)
    return text
