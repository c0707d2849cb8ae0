"""The Nexmark generator (benchmarks/nexmark): the spec's proportions and id rules, bounded
out-of-orderness, determinism by seed, and the files every engine reads."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from benchmarks.nexmark.generator import (
    AUCTION,
    AUCTION_ID_LEAD,
    BID,
    FIRST_AUCTION_ID,
    PERSON,
    SENTINEL,
    TICKS,
    Config,
    events_table,
    write,
)

CFG = Config(events=5_000, files=3, seed=7)


def _of(table: pa.Table, kind: int) -> pa.Table:
    return table.filter(pc.equal(table["event_type"], kind))


def test_every_50_events_hold_1_person_3_auctions_and_46_bids():
    table = events_table(CFG)
    kinds = table["event_type"].to_numpy()[:-1].reshape(-1, 50)
    assert ((kinds == PERSON).sum(axis=1) == 1).all()
    assert ((kinds == AUCTION).sum(axis=1) == 3).all()
    assert ((kinds == BID).sum(axis=1) == 46).all()
    assert table["event_type"][-1].as_py() == SENTINEL


def test_ids_follow_the_event_number_and_bids_name_auctions_at_most_the_lead_ahead():
    table = events_table(CFG)
    persons, auctions, bids = _of(table, PERSON), _of(table, AUCTION), _of(table, BID)
    assert persons["p_id"].to_pylist() == list(range(1000, 1000 + persons.num_rows))
    assert auctions["a_id"].to_pylist() == list(range(FIRST_AUCTION_ID, FIRST_AUCTION_ID + auctions.num_rows))
    # a bid names an auction created before it, or up to AUCTION_ID_LEAD ahead
    index = np.flatnonzero(table["event_type"].to_numpy() == BID)
    last_auction = FIRST_AUCTION_ID + (index // 50) * 3 + 2
    assert (bids["b_auction"].to_numpy() <= last_auction + AUCTION_ID_LEAD).all()
    hot = bids["b_auction"].to_numpy() % 100 == 0
    assert 0.45 < hot.mean() < 0.65  # half the bids go to a hot auction (plus cold ones that happen to be)
    assert set(auctions["a_category"].to_pylist()) == set(range(10, 15))


def test_event_times_are_out_of_order_by_at_most_the_bound():
    table = events_table(CFG)
    micros = table["dateTime"].cast(pa.int64()).to_numpy()[:-1]
    behind = np.maximum.accumulate(micros) - micros
    assert behind.max() <= CFG.out_of_order_s * 1e6
    assert behind.max() > 0.5 * CFG.out_of_order_s * 1e6  # and they are out of order
    assert table["dateTime"][-1].value > micros.max() + 86_400_000_000  # the sentinel, past every window


def test_the_same_seed_makes_the_same_events_and_another_seed_others():
    assert events_table(CFG).equals(events_table(CFG))
    assert not events_table(CFG).equals(events_table(Config(events=5_000, files=3, seed=8)))


def test_the_files_hold_every_event_once_then_the_ticks(tmp_path):
    directory = write(CFG, tmp_path / "events")
    files = sorted(directory.glob("events-*.parquet"))
    assert len(files) == CFG.files + TICKS
    tables = [pq.read_table(f) for f in files]
    assert pa.concat_tables(tables[: CFG.files]).equals(events_table(CFG))
    assert all(t.num_rows == 1 and t["event_type"][0].as_py() == SENTINEL for t in tables[CFG.files :])
    assert write(CFG, directory) == directory and sorted(directory.glob("events-*.parquet")) == files  # kept


def test_an_updating_output_is_reduced_to_its_last_row_per_key_and_compared_by_value():
    from benchmarks.measure import tables_equal
    from benchmarks.nexmark.queries import all_queries
    from benchmarks.nexmark.run import result_of

    q18 = next(q for q in all_queries() if q.name == "q18")
    cols = {c: [None, None, None] for c in q18.columns}
    stream = pa.table(
        {
            **cols,
            "auction": [1, 1, 2],
            "bidder": [9, 9, 9],
            "price": [5, 7, 3],
            "dateTime": pa.array([1, 2, 1], pa.timestamp("us", tz="UTC")),
            "_batch": [0, 1, 1],
        }
    )
    got = result_of(q18, stream)
    assert sorted(zip(got["auction"].to_pylist(), got["price"].to_pylist())) == [(1, 7), (2, 3)]
    expected = got.set_column(got.schema.get_field_index("price"), "price", pa.array(got["price"].to_pylist(), pa.int32()))
    assert tables_equal(got, expected)
    wrong = got.set_column(
        got.schema.get_field_index("price"), "price", pa.array([7, 4] if got["auction"][0].as_py() == 1 else [3, 8])
    )
    assert not tables_equal(got, wrong)
