"""The state reader (``sluice.state.read``, ``sluice state``) on local Spark: a running
aggregate's state, read while the job runs and after it, equals the latest row per key its
file sink wrote up to that batch."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sluice
from sluice import Pipeline, agg, sinks, sources
from sluice.cli import main as cli
from sluice.errors import StateError
from sluice.runtime.changelog import latest_per_key
from sluice.runtime.sinks import read_files
from sluice.runtime.state.store import KeyGroupStore

pytestmark = pytest.mark.spark

ROWS, PER_BATCH = 6_000, 1_000


def build(out: str) -> Pipeline:
    p = Pipeline("state_reader", partitions=2, max_parallelism=16)
    raw = p.source(
        sources.generator(
            fields={"k": sources.Keys(700, prefix="u"), "v": sources.Sequence()},
            total_rows=ROWS,
            seed=11,
            max_rows_per_batch=PER_BATCH,
        ),
        name="raw",
    )
    keyed = raw.key_by("k")
    keyed.aggregate(n=agg.count(), s=agg.sum("v"), m=agg.mean("v"), name="counts").sink(sinks.files(f"{out}/counts"))
    keyed.aggregate(top=agg.max("v"), name="highest").sink(sinks.files(f"{out}/highest"))
    return p


def by_key(table: pa.Table, columns: list[str]) -> dict:
    return {r["k"]: tuple(r[c] for c in columns) for r in table.select(["k", *columns]).to_pylist()}


def sink_latest(path: str, up_to: int | None = None) -> pa.Table:
    changelog = read_files(path)
    assert changelog is not None
    if up_to is not None:  # the sink's batch directories up to that batch
        import pyarrow.dataset as ds

        from sluice.runtime.file_rolling import output_dirs
        from sluice.runtime.files import filesystem

        fs, base = filesystem(path)
        parts = [p for d in output_dirs(fs, base) if d.last <= up_to for p in d.parts]
        changelog = ds.dataset(parts, format="parquet", filesystem=fs).to_table()
    return latest_per_key(changelog, ["k"])


def same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k, (n, s, m) in want.items():
        assert got[k][:2] == (n, s), k
        assert got[k][2] == pytest.approx(m, rel=1e-12), k


def state_of_counts(state: pa.Table) -> dict:
    """The aggregate's outputs from its stored partials (a mean is kept as sum and count)."""
    return {r["k"]: (r["n"], r["s"], r["m__sum"] / r["m__count"]) for r in state.to_pylist()}


def test_state_equals_the_sinks_latest_rows_while_running_and_after(spark, tmp_path, capsys):
    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    target = str(tmp_path / "counts.parquet")
    during: dict[int, pa.Table] = {}

    def on_batch(m):
        # the job is running: batch 4 is committed, batch 5 not started, a compaction may run
        if m.batch_id == 4:
            during[4] = sluice.state.read(checkpoint, "counts")
            during[3] = sluice.state.read(checkpoint, "counts", batch=3)
            assert cli(["state", checkpoint, "counts", "--batch", "3", "--out", target]) == 0

    result = build(out).run(checkpoint, spark=spark, on_batch=on_batch)
    assert result.rows_in == ROWS
    last = max(sluice.state.committed_batches(checkpoint))
    assert last >= 5

    state = sluice.state.read(checkpoint, "counts")
    assert state.column_names[0] == "k" and "key_group" in state.column_names
    assert state.num_rows == 700
    same(state_of_counts(state), by_key(sink_latest(f"{out}/counts"), ["n", "s", "m"]))
    assert sum(n for n, _, _ in state_of_counts(state).values()) == ROWS
    highest = sluice.state.read(checkpoint, "highest", batch=last)
    assert by_key(highest, ["top"]) == by_key(sink_latest(f"{out}/highest"), ["top"])

    # earlier batches, read while the job ran: as of their commit
    for batch in (3, 4):
        want = by_key(sink_latest(f"{out}/counts", up_to=batch), ["n", "s", "m"])
        assert sum(n for n, _, _ in want.values()) == (batch + 1) * PER_BATCH
        same(state_of_counts(during[batch]), want)
    assert pq.read_table(target).equals(during[3])

    # every batch still kept, through the CLI: the latest snapshot at or before it, then the
    # deltas after it replayed up to that batch (batches past the snapshot included)
    store = KeyGroupStore(
        checkpoint, next(op.id for op in sluice.state.stateful_operators(checkpoint) if op.name == "counts"), []
    )
    replayed = 0
    for batch in sluice.state.kept_batches(checkpoint, "counts"):
        snapshot = store.index(before_batch=batch + 1).snapshot_batch
        replayed += snapshot is not None and snapshot < batch
        out_file = str(tmp_path / f"counts-{batch}.parquet")
        assert cli(["state", checkpoint, "counts", "--batch", str(batch), "--out", out_file]) == 0
        same(state_of_counts(pq.read_table(out_file)), by_key(sink_latest(f"{out}/counts", up_to=batch), ["n", "s", "m"]))
    assert replayed >= 1  # some batch was read from an earlier snapshot plus deltas

    # what does not exist, or is no longer kept, is named with what is
    with pytest.raises(StateError, match=r"'nope'.*counts.*highest"):
        sluice.state.read(checkpoint, "nope")
    with pytest.raises(StateError, match=rf"batch 999 .*committed batches: 0-{last}"):
        sluice.state.read(checkpoint, "counts", batch=999)
    with pytest.raises(StateError, match="holds the state of 2 operators"):
        sluice.state.read(checkpoint)
    kept = sluice.state.kept_batches(checkpoint, "counts")
    assert kept[-1] == last and kept[0] > 0  # the job compacted the oldest batches away
    with pytest.raises(StateError, match=rf"batch 0 is no longer kept.*kept: {kept[0]}-{last}"):
        sluice.state.read(checkpoint, "counts", batch=0)

    # the CLI: a head and the row count on the terminal, the operators listed, errors named
    capsys.readouterr()
    assert cli(["state", checkpoint, "highest"]) == 0
    assert f"700 keys as of batch {last} (first 20 shown)" in capsys.readouterr().out
    assert cli(["state", checkpoint]) == 0
    listed = capsys.readouterr().out
    assert "2 stateful operators" in listed and "counts: aggregate" in listed
    assert cli(["state", checkpoint, "counts", "--batch", "999"]) == 1
    assert "committed batches" in capsys.readouterr().err
