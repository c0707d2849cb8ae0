"""Nexmark events, written to Parquet files so every engine reads the same ones.

Follows the Nexmark generator (Tucker et al.; Apache Beam's ``NexmarkConfiguration`` and
``GeneratorConfig``): one stream of events in which every 50 consecutive events hold 1 person,
3 auctions and 46 bids; a new person's id and a new auction's id follow the event number;
a bid names a hot auction (the last multiple of 100 of the auctions so far) with probability
1/2 and a hot bidder with probability 3/4, else an auction among the last 100 (up to 10 ids
ahead, as in the spec) and a person among the last 1,000 active ones (up to 10 ahead); an
auction's seller is hot with probability 3/4; prices are ``round(10 ** U(0, 6) * 100)``
cents; categories 10-14; half the bids come through one of four hot channels. Event times
advance by ``1 / event_rate`` seconds per event and each is moved back by up to
``out_of_order_s`` (uniform): bounded out-of-orderness, so a watermark that lags the largest
time seen by ``out_of_order_s`` never finds a late event. Deterministic by seed.

Columns are flat (``event_type``: 0 person, 1 auction, 2 bid; columns ``p_*``, ``a_*``,
``b_*`` of the other types are null) and every event has ``dateTime``. The last file ends
with one sentinel event (``event_type`` 3, ``dateTime`` two days after the last event) that
every query drops: it moves each engine's watermark past every window, so windows close and
are emitted by engines that only close windows on a watermark. Two last files hold one more
such event each (ticks): an engine that applies a batch's watermark in the next batch (Spark)
needs a batch after the sentinel's, one more for each stateful operator chained after the
first (q8: a join, then an aggregation), and ``trigger(availableNow=True)`` runs none by itself.

Differences from the spec, for file size: ``extra`` fields are short words from a fixed pool
(the spec pads events to 200, 500 and 100 bytes), and auction lengths are uniform in
[0, 2 * ``auction_length_s``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

PERSON, AUCTION, BID, SENTINEL = 0, 1, 2, 3
PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID, FIRST_AUCTION_ID, FIRST_CATEGORY_ID, NUM_CATEGORIES = 1000, 1000, 10, 5
HOT_AUCTION_RATIO = HOT_SELLER_RATIO = HOT_BIDDER_RATIO = 100
NUM_ACTIVE_PEOPLE, NUM_IN_FLIGHT_AUCTIONS, PERSON_ID_LEAD, AUCTION_ID_LEAD = 1000, 100, 10, 10
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
START_US = 1_436_918_400_000_000  # 2015-07-15 00:00:00 UTC, Nexmark's base time
SENTINEL_AFTER_US = 2 * 86_400_000_000
TICKS = 2

TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema(
    [
        ("event_type", pa.int32()),
        ("dateTime", TS),
        ("p_id", pa.int64()),
        ("p_name", pa.string()),
        ("p_email", pa.string()),
        ("p_credit_card", pa.string()),
        ("p_city", pa.string()),
        ("p_state", pa.string()),
        ("p_extra", pa.string()),
        ("a_id", pa.int64()),
        ("a_item_name", pa.string()),
        ("a_description", pa.string()),
        ("a_initial_bid", pa.int64()),
        ("a_reserve", pa.int64()),
        ("a_expires", TS),
        ("a_seller", pa.int64()),
        ("a_category", pa.int64()),
        ("a_extra", pa.string()),
        ("b_auction", pa.int64()),
        ("b_bidder", pa.int64()),
        ("b_price", pa.int64()),
        ("b_channel", pa.string()),
        ("b_url", pa.string()),
        ("b_extra", pa.string()),
    ]
)


@dataclass(frozen=True)
class Config:
    events: int = 200_000
    event_rate: float = 2_000.0  # events per second of event time
    out_of_order_s: float = 1.0
    auction_length_s: float = 10.0
    files: int = 10
    seed: int = 42

    @property
    def span_s(self) -> float:
        return self.events / self.event_rate


def _words(rng: np.random.Generator, n: int, low: int, high: int) -> np.ndarray:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = rng.integers(low, high + 1, n)
    return np.array(["".join(rng.choice(letters, k)) for k in lengths], dtype=object)


def _pick(rng: np.random.Generator, pool, n: int) -> np.ndarray:
    return np.asarray(pool, dtype=object)[rng.integers(0, len(pool), n)]


def _price(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.round(10.0 ** (rng.random(n) * 6.0) * 100.0).astype(np.int64)


def _next_person(rng: np.random.Generator, last_person: np.ndarray) -> np.ndarray:
    """A person among the last NUM_ACTIVE_PEOPLE, up to PERSON_ID_LEAD ahead (base 0)."""
    people = last_person + 1
    active = np.minimum(people, NUM_ACTIVE_PEOPLE)
    return people - active + (rng.random(len(people)) * (active + PERSON_ID_LEAD)).astype(np.int64)


def events_table(cfg: Config) -> pa.Table:
    """All ``cfg.events`` events (and the sentinel), in event-number order."""
    rng = np.random.default_rng(cfg.seed)
    n = cfg.events
    ids = np.arange(n, dtype=np.int64)
    epoch, offset = ids // TOTAL_PROPORTION, ids % TOTAL_PROPORTION
    etype = np.where(
        offset < PERSON_PROPORTION, PERSON, np.where(offset < PERSON_PROPORTION + AUCTION_PROPORTION, AUCTION, BID)
    ).astype(np.int32)
    ideal = START_US + (ids * (1e6 / cfg.event_rate)).astype(np.int64)
    times = ideal - (rng.random(n) * cfg.out_of_order_s * 1e6).astype(np.int64)
    last_person = epoch  # the persons so far, base 0 (every epoch starts with its person)
    last_auction = np.where(
        offset < PERSON_PROPORTION,
        epoch * AUCTION_PROPORTION - 1,
        epoch * AUCTION_PROPORTION + np.minimum(offset - PERSON_PROPORTION, AUCTION_PROPORTION - 1),
    )
    cols: dict[str, np.ndarray | pa.Array] = {"event_type": etype, "dateTime": times}

    p, a, b = etype == PERSON, etype == AUCTION, etype == BID
    np_, na, nb = int(p.sum()), int(a.sum()), int(b.sum())

    def spread(mask: np.ndarray, values, dtype) -> pa.Array:
        out = np.empty(n, dtype=object)
        out[mask] = values
        return pa.array(out, type=dtype, mask=~mask)

    first = _pick(rng, FIRST_NAMES, np_)
    last = _pick(rng, LAST_NAMES, np_)
    names = first + " " + last
    cols["p_id"] = spread(p, FIRST_PERSON_ID + epoch[p], pa.int64())
    cols["p_name"] = spread(p, names, pa.string())
    cols["p_email"] = spread(
        p, np.char.add(np.char.add(first.astype(str), "@"), last.astype(str)).astype(object) + ".com", pa.string()
    )
    cols["p_credit_card"] = spread(
        p,
        np.array([f"{x:04d} {y:04d} {z:04d} {w:04d}" for x, y, z, w in rng.integers(0, 10_000, (np_, 4))], dtype=object),
        pa.string(),
    )
    cols["p_city"] = spread(p, _pick(rng, US_CITIES, np_), pa.string())
    cols["p_state"] = spread(p, _pick(rng, US_STATES, np_), pa.string())
    pool = _words(rng, 1000, 3, 20)
    cols["p_extra"] = spread(p, _pick(rng, pool, np_), pa.string())

    hot_seller = rng.integers(0, 4, na) > 0
    seller = np.where(hot_seller, (last_person[a] // HOT_SELLER_RATIO) * HOT_SELLER_RATIO, _next_person(rng, last_person[a]))
    initial = _price(rng, na)
    cols["a_id"] = spread(a, FIRST_AUCTION_ID + last_auction[a], pa.int64())
    cols["a_item_name"] = spread(a, _pick(rng, pool, na), pa.string())
    cols["a_description"] = spread(a, _pick(rng, pool, na), pa.string())
    cols["a_initial_bid"] = spread(a, initial, pa.int64())
    cols["a_reserve"] = spread(a, initial + _price(rng, na), pa.int64())
    length = (rng.random(na) * 2 * cfg.auction_length_s * 1e6).astype(np.int64)
    expires = np.full(n, 0, dtype=np.int64)
    expires[a] = times[a] + length
    cols["a_expires"] = pa.array(expires, type=pa.int64(), mask=~a).cast(TS)
    cols["a_seller"] = spread(a, FIRST_PERSON_ID + seller, pa.int64())
    cols["a_category"] = spread(a, FIRST_CATEGORY_ID + rng.integers(0, NUM_CATEGORIES, na), pa.int64())
    cols["a_extra"] = spread(a, _pick(rng, pool, na), pa.string())

    la = last_auction[b]
    hot_auction = rng.integers(0, 2, nb) > 0
    lowest = np.maximum(la - NUM_IN_FLIGHT_AUCTIONS, 0)
    cold_auction = lowest + (rng.random(nb) * (la - lowest + 1 + AUCTION_ID_LEAD)).astype(np.int64)
    auction = np.where(hot_auction, (la // HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO, cold_auction)
    hot_bidder = rng.integers(0, 4, nb) > 0
    bidder = np.where(hot_bidder, (last_person[b] // HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1, _next_person(rng, last_person[b]))
    # half the bids through a hot channel; the rest through one of 10,000 channels, half of
    # whose URLs carry a channel_id parameter
    hot_channel = rng.integers(0, 2, nb) > 0
    hot_i = rng.integers(0, len(HOT_CHANNELS), nb)
    cold_i = rng.integers(0, 10_000, nb)
    dirs = _words(np.random.default_rng(cfg.seed + 1), 30, 3, 6)
    cold_urls = np.array(
        [
            f"https://www.nexmark.com/{dirs[i % 30]}/{dirs[(i // 30) % 30]}/{dirs[(i // 900) % 30]}"
            f"/item.htm?query=1" + (f"&channel_id={(i * 2_654_435_761) % 1_000_000_007}" if i % 2 else "")
            for i in range(10_000)
        ],
        dtype=object,
    )
    hot_urls = np.array([f"https://www.nexmark.com/{c.lower()}/item.htm?query=1" for c in HOT_CHANNELS], dtype=object)
    channels = np.where(
        hot_channel,
        np.asarray(HOT_CHANNELS, dtype=object)[hot_i],
        np.array([f"channel-{i}" for i in range(10_000)], dtype=object)[cold_i],
    )
    urls = np.where(hot_channel, hot_urls[hot_i], cold_urls[cold_i])
    cols["b_auction"] = spread(b, FIRST_AUCTION_ID + auction, pa.int64())
    cols["b_bidder"] = spread(b, FIRST_PERSON_ID + bidder, pa.int64())
    cols["b_price"] = spread(b, _price(rng, nb), pa.int64())
    cols["b_channel"] = spread(b, channels, pa.string())
    cols["b_url"] = spread(b, urls, pa.string())
    cols["b_extra"] = spread(b, _pick(rng, pool, nb), pa.string())

    arrays = []
    for f in SCHEMA:
        v = cols[f.name]
        if f.name == "dateTime":
            v = pa.array(v, type=pa.int64()).cast(TS)
        arrays.append(pa.array(v, type=f.type) if isinstance(v, np.ndarray) else v.cast(f.type))
    table = pa.Table.from_arrays(arrays, schema=SCHEMA)
    sentinel = {f.name: [None] for f in SCHEMA}
    sentinel["event_type"] = [SENTINEL]
    sentinel["dateTime"] = [int(times.max()) + SENTINEL_AFTER_US]
    sentinel_table = pa.table(
        {k: pa.array(v, type=pa.int64() if k == "dateTime" else SCHEMA.field(k).type) for k, v in sentinel.items()}
    )
    sentinel_table = sentinel_table.set_column(1, "dateTime", sentinel_table.column("dateTime").cast(TS))
    return pa.concat_tables([table, sentinel_table.cast(SCHEMA)])


def write(cfg: Config, directory: str | Path) -> Path:
    """Write the events as ``cfg.files`` Parquet files (``events-00000.parquet``, ...) and a
    ``_config.json``; a directory that already holds the same configuration is kept."""
    directory = Path(directory)
    marker = directory / "_config.json"
    if marker.exists() and json.loads(marker.read_text()) == asdict(cfg):
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("events-*.parquet"):
        old.unlink()
    table = events_table(cfg)
    per_file = -(-table.num_rows // cfg.files)
    tick = table.slice(table.num_rows - 1, 1)
    for i, part in enumerate([table.slice(i * per_file, per_file) for i in range(cfg.files)] + [tick] * TICKS):
        tmp = directory / f".events-{i:05d}.parquet"
        pq.write_table(part, tmp)
        os.replace(tmp, directory / f"events-{i:05d}.parquet")
    marker.write_text(json.dumps(asdict(cfg)))
    return directory
