"""Messages to Arrow and back (no broker needed): the good rows kept in order, each bad one
set aside with its reason."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from sluice.runtime.connectors.payloads import parse_json, parse_text_columns, rows_as_json, rows_as_text

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("ok", pa.bool_()), ("at", pa.timestamp("us", tz="UTC"))])


def test_json_messages_parse_as_the_schema_and_bad_ones_are_set_aside():
    payloads = [
        b'{"id": 1, "name": "a", "ok": true, "at": "2026-01-01T00:00:00Z"}',
        b"not json",
        b'{"id": 2,\n "extra": [1, 2]}',  # a raw newline and an unknown field
        b'{"id": "three"}',
        b"[1, 2]",
        b"",
    ]
    parsed = parse_json(payloads, SCHEMA)
    assert parsed.kept == [0, 2]
    assert parsed.table.to_pylist()[1] == {"id": 2, "name": None, "ok": None, "at": None}
    assert parsed.table.column("at")[0].value == 1767225600000000
    assert [i for i, _ in parsed.rejects] == [1, 3, 4, 5]
    assert all(
        reason.startswith("does not parse as {id: int64, name: string, ok: bool, at: timestamp") for _, reason in parsed.rejects
    )


def test_text_fields_cast_to_the_schema_and_bad_ones_are_set_aside():
    columns = {
        "id": ["1", "x", "3", None],
        "name": ["a", "b", None, "d"],
        "ok": ["true", "0", "maybe", None],
        "at": ["2026-01-01 00:00:00.5Z", None, None, "2026-01-01T00:00:00+01:00"],
    }
    parsed = parse_text_columns(columns, 4, SCHEMA)
    assert parsed.kept == [0, 3]
    assert [i for i, _ in parsed.rejects] == [1, 2]
    assert parsed.table.to_pylist()[1]["id"] is None
    assert parsed.table.column("at").cast(pa.int64()).to_pylist() == [1767225600500000, 1767222000000000]


def test_rows_written_as_json_or_text_read_back_equal():
    table = pa.table(
        {
            "id": [1, None],
            "name": ["a", ""],
            "ok": [True, False],
            "at": pa.array([1767225600000001, 0], pa.timestamp("us", tz="UTC")),
        }
    )
    assert parse_json(rows_as_json(table), SCHEMA).table.equals(table)
    texts = rows_as_text(table)
    assert texts[1] == {"name": "", "ok": "false", "at": "1970-01-01 00:00:00.000000Z"}
    columns = {name: [row.get(name) for row in texts] for name in SCHEMA.names}
    assert parse_text_columns(columns, 2, SCHEMA).table.equals(table)
    assert json.loads(rows_as_json(table)[0])["at"] == "2026-01-01T00:00:00.000001Z"


@pytest.mark.parametrize("kind", ["json", "text"])
def test_one_bad_message_is_found_by_bisection_not_one_parse_per_message(kind, monkeypatch):
    """A batch with one unparseable message among 4,096 is parsed in a few dozen calls (the
    halves that fail are split again), not 4,097 (the whole batch, then one by one)."""
    from sluice.runtime.connectors import payloads

    n, bad = 4096, 1234
    schema = pa.schema([("id", pa.int64()), ("v", pa.float64())])
    name = "_json_lines" if kind == "json" else "_cast_text"
    real = getattr(payloads, name)
    calls = []

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(payloads, name, counted)
    if kind == "json":
        messages = [b'{"id": %d, "v": 1.5}' % i for i in range(n)]
        messages[bad] = b'{"id": "x", '
        parsed = payloads.parse_json(messages, schema)
    else:
        columns = {"id": [str(i) for i in range(n)], "v": ["1.5"] * n}
        columns["v"][bad] = "not a number"
        parsed = payloads.parse_text_columns(columns, n, schema)
    assert [i for i, _ in parsed.rejects] == [bad]
    assert parsed.kept == [i for i in range(n) if i != bad]
    assert parsed.table.column("id").to_pylist() == parsed.kept
    assert len(calls) <= 2 * 12 + 1  # two calls per level of a 12-level bisection, and the first
