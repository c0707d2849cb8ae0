"""Route rows through Spark's own hash exchange to the partition of our choosing.

Spark aggregates in two steps around its exchange: a partial aggregate in each map task,
then the exchange, hash-partitioned by the grouping columns, then the final aggregate. The
partial step is what makes Spark's ``window()`` cheap at size = slide: one row per (key,
window) crosses the exchange rather than every record. Sluice's keyed stages, though, must
receive the rows of each key group in the partition the routing table assigns it (its state
lives there), and ``repartitionById`` only exchanges raw rows: a partial aggregate placed
after it has nothing left to save, and a second exchange costs more than it saves.

The way through is to choose the hash. The exchange sends a row to
``pmod(murmur3(c1, ..., ck, seed=42), n)``, and murmur3 is a chain of invertible steps: given
the hash state after ``c1 .. ck-1`` there is exactly one 32-bit int ``ck`` that makes the
final hash any value we like. So each row gets one more grouping column, the *salt*,
computed from the hash of the other grouping columns and the partition its key group is
routed to, such that the final hash is that partition. Spark's partial aggregate, its
exchange and its final aggregate then run as usual, and every group lands where its state is.

The salt is a function of the other grouping columns, so it never splits a group. A NULL
grouping column (a NULL key) leaves murmur3's state as it was, in SQL's ``hash`` and in the
exchange alike, and both hash -0.0 as 0.0 and every NaN alike, so the salt steers rows of
such keys as exactly as any other. The
functions here are pure (they build SQL text and compute Spark's hash in Python for tests);
``exchange.spark_combine`` puts them to work.
"""

from __future__ import annotations

SALT = "__salt"  # the grouping column that steers the exchange

_MASK = 0xFFFFFFFF
_C1, _C2 = 0xCC9E2D51, 0x1B873593  # murmur3_x86_32's constants, as in Spark's Murmur3_x86_32
_H_ADD = 0xE6546B64
_F1, _F2 = 0x85EBCA6B, 0xC2B2AE35  # (HashPartitioning and SQL's hash() both seed with 42)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _rotr(x: int, r: int) -> int:
    return ((x >> r) | (x << (32 - r))) & _MASK


def _inverse(c: int) -> int:
    return pow(c, -1, 1 << 32)


def _signed(x: int) -> int:
    return x - (1 << 32) if x & 0x80000000 else x


def murmur3_int(value: int, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashInt(value, seed)``: the hash state after hashing one int
    column into ``seed`` (signed 32-bit, as Spark returns it)."""
    k = (value & _MASK) * _C1 & _MASK
    k = _rotl(k, 15) * _C2 & _MASK
    h = _rotl((seed & _MASK) ^ k, 13)
    h = (h * 5 + _H_ADD) & _MASK
    h ^= 4  # the length in bytes
    h ^= h >> 16
    h = h * _F1 & _MASK
    h ^= h >> 13
    h = h * _F2 & _MASK
    h ^= h >> 16
    return _signed(h)


def _unshift_xor(h: int, shift: int) -> int:
    x = h
    for _ in range(32 // shift + 1):
        x = h ^ (x >> shift)
    return x & _MASK


def _target_state(final: int) -> int:
    """The value of ``seed ^ mixK1(salt)`` that makes ``hashInt(salt, seed) == final``:
    murmur3's last steps (add, rotate, avalanche) undone."""
    h = _unshift_xor(final & _MASK, 16)
    h = h * _inverse(_F2) & _MASK
    h = _unshift_xor(h, 13)
    h = h * _inverse(_F1) & _MASK
    h = _unshift_xor(h, 16) ^ 4
    return _rotr((h - _H_ADD) * _inverse(5) & _MASK, 13)


def salt_for(seed: int, partition: int) -> int:
    """The int whose hash into ``seed`` is exactly ``partition`` (Python twin of :func:`salt_sql`)."""
    k = (seed & _MASK) ^ _target_state(partition)
    k = _rotr(k * _inverse(_C2) & _MASK, 15)
    return _signed(k * _inverse(_C1) & _MASK)


def _mul32(x: str, c: int) -> str:
    """``x * c mod 2**32`` for ``0 <= x < 2**32`` in BIGINT arithmetic that cannot overflow
    (ANSI mode would fail the batch): ``c`` in two 16-bit halves."""
    return f"(({x} * {c & 0xFFFF}L + shiftleft(({x} * {c >> 16}L) & 65535L, 16)) & 4294967295L)"


def salt_sql(columns: list[str], partition_sql: str, partitions: int, prefix: str = SALT) -> list[str]:
    """SQL select items (``expr AS name``) that end in an INT column ``prefix`` such that
    ``pmod(hash(*columns, prefix), n) == partition`` for any ``n > partition``: grouped by
    ``columns`` and then the salt, a row crosses Spark's hash exchange to ``partition``.

    The items refer to each other by name (lateral column aliases), so they belong in one
    select after the one that defines ``columns``; ``columns`` are SQL expressions of the
    exact types the grouping will see. ``partition_sql`` is an INT in ``[0, partitions)``.
    The temporaries are named ``prefix`` plus a suffix (:func:`salt_temporaries`)."""
    states = ", ".join(f"{_target_state(p)}L" for p in range(partitions))
    k, m, r, u = f"{prefix}_k", f"{prefix}_m", f"{prefix}_r", f"{prefix}_u"
    return [
        f"((CAST(hash({', '.join(columns)}) AS BIGINT) & 4294967295L) ^ "
        f"element_at(array({states}), ({partition_sql}) + 1)) AS {k}",
        f"{_mul32(k, _inverse(_C2))} AS {m}",
        f"(shiftright({m}, 15) | (shiftleft({m}, 17) & 4294967295L)) AS {r}",
        f"{_mul32(r, _inverse(_C1))} AS {u}",
        # back to a signed INT: subtract 2**32 when bit 31 is set
        f"CAST({u} - shiftleft(shiftright({u}, 31), 32) AS INT) AS {prefix}",
    ]


def salt_temporaries(prefix: str = SALT) -> list[str]:
    """The names of the intermediate columns :func:`salt_sql` defines besides ``prefix``."""
    return [f"{prefix}_{suffix}" for suffix in "kmru"]
