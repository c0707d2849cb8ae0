"""Nexmark q0-q22, each written three times: DuckDB SQL (the batch reference), Spark
Structured Streaming (SQL expressions and DataFrames) and Sluice's API.

The queries follow Nexmark's definitions as published with Flink's Nexmark
(``nexmark-flink/src/main/resources/queries``); where a definition leaves something open it
is fixed here and the same in all three (e.g. q18's last bid: of two bids at the same
microsecond, the higher price; q9's winning bid: of equal prices, the earliest). Every query has:

- ``columns``: its output columns, the same in every engine;
- ``mode``: how an engine's output stream is compared with the reference: ``rows`` (the
  rows emitted, as a multiset), ``latest`` (an updating result: the last row emitted per
  ``keys``), ``top`` (the last set emitted per ``keys``) or ``totals`` (q12's processing-time
  windows, whose cut depends on the clock: the counts summed per ``keys``);
- ``spark`` / ``sluice``: a function building the query, or None with ``spark_gap`` /
  ``sluice_gap`` saying why the engine cannot express it.

Events are one stream (``generator``); every engine splits it into persons, auctions and
bids by ``event_type`` with the same projections (``PERSON``, ``AUCTION``, ``BID``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from benchmarks.nexmark.generator import (
    AUCTION,
    AUCTION_ID_LEAD,
    AUCTION_PROPORTION,
    BID,
    HOT_AUCTION_RATIO,
    NUM_ACTIVE_PEOPLE,
    NUM_IN_FLIGHT_AUCTIONS,
    PERSON,
    PERSON_ID_LEAD,
    TOTAL_PROPORTION,
    Config,
)

PERSON_COLS = [
    "p_id AS id",
    "p_name AS name",
    "p_email AS email_address",
    "p_credit_card AS credit_card",
    "p_city AS city",
    "p_state AS state",
    "dateTime",
    "p_extra AS extra",
]
AUCTION_COLS = [
    "a_id AS id",
    "a_item_name AS item_name",
    "a_description AS description",
    "a_initial_bid AS initial_bid",
    "a_reserve AS reserve",
    "dateTime",
    "a_expires AS expires",
    "a_seller AS seller",
    "a_category AS category",
    "a_extra AS extra",
]
BID_COLS = [
    "b_auction AS auction",
    "b_bidder AS bidder",
    "b_price AS price",
    "b_channel AS channel",
    "b_url AS url",
    "dateTime",
    "b_extra AS extra",
]
SIDE_KEYS = 10_000  # q13's side input: one row per key 0..9999

# q14, q21, q22 and q10's expressions are Spark SQL, the language of Sluice's select/filter too
Q14_TYPE = (
    "CASE WHEN hour(dateTime) >= 8 AND hour(dateTime) <= 18 THEN 'dayTime' "
    "WHEN hour(dateTime) <= 6 OR hour(dateTime) >= 20 THEN 'nightTime' ELSE 'otherTime' END"
)
Q21_ID = (
    "CASE lower(channel) WHEN 'apple' THEN '0' WHEN 'google' THEN '1' WHEN 'facebook' THEN '2' "
    "WHEN 'baidu' THEN '3' ELSE regexp_extract(url, '(&|^)channel_id=([^&]*)', 2) END"
)
RANKS = {"rank1": "price < 10000", "rank2": "price >= 10000 AND price < 1000000", "rank3": "price >= 1000000"}


@dataclass(frozen=True)
class Query:
    name: str
    title: str
    columns: tuple[str, ...]
    reference: str  # DuckDB SQL over the views person, auction, bid (and side_input)
    mode: str = "rows"
    keys: tuple[str, ...] = ()
    event_time: bool = False  # windows or joins on event time: the engines need a watermark
    stateful: bool = False  # Spark keeps state: measured on both of its state stores
    spark: Callable | None = None
    sluice: Callable | None = None
    spark_gap: str = ""
    sluice_gap: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def join_bounds(cfg: Config) -> dict[str, tuple[str, str]]:
    """How far apart in event time the generator puts an auction and the person selling it
    (``seller``), and a bid and its auction: the bounds of the interval joins Sluice writes
    q3 and q20 with (Sluice has no unbounded stream-stream join). A person is named by
    auctions up to ``NUM_ACTIVE_PEOPLE`` persons later (hot sellers: ``HOT_SELLER_RATIO``)
    and up to ``PERSON_ID_LEAD`` earlier; an auction by bids up to ``NUM_IN_FLIGHT_AUCTIONS``
    (or ``HOT_AUCTION_RATIO``) auctions later and ``AUCTION_ID_LEAD`` earlier; each event's
    time is off by up to ``out_of_order_s``. The bounds are those spans, doubled."""
    per_person = TOTAL_PROPORTION / cfg.event_rate
    per_auction = TOTAL_PROPORTION / AUCTION_PROPORTION / cfg.event_rate
    slack = 2 * cfg.out_of_order_s
    seller_back = NUM_ACTIVE_PEOPLE * per_person + slack
    seller_ahead = (PERSON_ID_LEAD + 1) * per_person + slack
    auction_back = max(NUM_IN_FLIGHT_AUCTIONS, HOT_AUCTION_RATIO) * per_auction + slack
    auction_ahead = (AUCTION_ID_LEAD + 1) * per_auction + slack
    return {
        "q3": (f"-{2 * seller_back:.3f}s", f"+{2 * seller_ahead:.3f}s"),
        "q20": (f"-{2 * auction_back:.3f}s", f"+{2 * auction_ahead:.3f}s"),
    }


# ------------------------------------------------------------------------------------------
# DuckDB reference (views: person, auction, bid, side_input; TimeZone UTC)


def duckdb_views(con, events_glob: str, side_path: str) -> None:
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"CREATE OR REPLACE VIEW events AS SELECT * FROM read_parquet('{events_glob}')")
    for view, kind, cols in (("person", PERSON, PERSON_COLS), ("auction", AUCTION, AUCTION_COLS), ("bid", BID, BID_COLS)):
        con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT {', '.join(cols)} FROM events WHERE event_type = {kind}")
    con.execute(f"CREATE OR REPLACE VIEW side_input AS SELECT * FROM read_parquet('{side_path}')")


def _us(expr: str) -> str:
    return f"epoch_us({expr})"


def _bucket(expr: str, size_us: int) -> str:
    return f"({_us(expr)} // {size_us}) * {size_us}"


WINNING = """
    SELECT a.id AS auction, a.seller, a.category, a.expires, b.bidder, b.price, b.dateTime AS bid_time,
           row_number() OVER (PARTITION BY a.id ORDER BY b.price DESC, b.dateTime ASC) AS rn
    FROM auction a JOIN bid b ON a.id = b.auction
    WHERE b.dateTime BETWEEN a.dateTime AND a.expires"""


def _stats_sql(group: str, extra: str = "") -> str:
    parts = ["count(*) AS total_bids"]
    parts += [f"count(*) FILTER (WHERE {c}) AS {r}_bids" for r, c in RANKS.items()]
    parts += ["count(DISTINCT bidder) AS total_bidders"]
    parts += [f"count(DISTINCT bidder) FILTER (WHERE {c}) AS {r}_bidders" for r, c in RANKS.items()]
    parts += ["count(DISTINCT auction) AS total_auctions"]
    parts += [f"count(DISTINCT auction) FILTER (WHERE {c}) AS {r}_auctions" for r, c in RANKS.items()]
    return (
        f"SELECT {group}{extra}, {', '.join(parts)} FROM "
        f"(SELECT *, strftime(dateTime, '%Y-%m-%d') AS day FROM bid) GROUP BY {group}"
    )


STATS = (
    "total_bids",
    "rank1_bids",
    "rank2_bids",
    "rank3_bids",
    "total_bidders",
    "rank1_bidders",
    "rank2_bidders",
    "rank3_bidders",
    "total_auctions",
    "rank1_auctions",
    "rank2_auctions",
    "rank3_auctions",
)

REFERENCE = {
    "q0": "SELECT auction, bidder, price, dateTime, extra FROM bid",
    "q1": "SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid",
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    "q3": """SELECT p.name, p.city, p.state, a.id FROM auction a JOIN person p ON a.seller = p.id
             WHERE a.category = 10 AND p.state IN ('OR', 'ID', 'CA')""",
    "q4": f"""SELECT category, avg(price) AS avg_final FROM ({WINNING}) WHERE rn = 1 GROUP BY category""",
    "q5": f"""WITH w AS (SELECT auction, {_bucket("dateTime", 2_000_000)} - k * 2000000 AS ws FROM bid,
                         range(0, 5) t(k)),
             c AS (SELECT auction, ws AS window_start, ws + 10000000 AS window_end, count(*) AS num
                   FROM w GROUP BY auction, ws)
             SELECT auction, num, window_start, window_end FROM c
             WHERE num >= (SELECT max(num) FROM c c2 WHERE c2.window_start = c.window_start)""",
    "q6": f"""SELECT seller, avg(price) AS avg_final FROM (
                SELECT seller, price, row_number() OVER (PARTITION BY seller ORDER BY expires DESC, auction DESC) AS k
                FROM ({WINNING}) WHERE rn = 1) WHERE k <= 10 GROUP BY seller""",
    "q7": f"""WITH b AS (SELECT *, {_bucket("dateTime", 10_000_000)} AS ws FROM bid)
             SELECT auction, price, bidder, dateTime, extra FROM b
             WHERE price = (SELECT max(price) FROM b b2 WHERE b2.ws = b.ws)""",
    "q8": f"""SELECT DISTINCT p.id, p.name, {_bucket("p.dateTime", 10_000_000)} AS starttime
             FROM person p JOIN auction a ON p.id = a.seller
             AND {_bucket("p.dateTime", 10_000_000)} = {_bucket("a.dateTime", 10_000_000)}""",
    "q9": f"SELECT auction, seller, category, bidder, price, bid_time FROM ({WINNING}) WHERE rn = 1",
    "q10": """SELECT auction, bidder, price, dateTime, extra, strftime(dateTime, '%Y-%m-%d') AS dt,
              strftime(dateTime, '%H:%M') AS hm FROM bid""",
    "q11": """WITH o AS (SELECT bidder, dateTime, CASE WHEN lag(dateTime) OVER (PARTITION BY bidder ORDER BY dateTime)
                         > dateTime - INTERVAL 10 SECOND THEN 0 ELSE 1 END AS new FROM bid),
              s AS (SELECT *, sum(new) OVER (PARTITION BY bidder ORDER BY dateTime) AS sid FROM o)
              SELECT bidder, count(*) AS bid_count, epoch_us(min(dateTime)) AS starttime,
                     epoch_us(max(dateTime)) + 10000000 AS endtime FROM s GROUP BY bidder, sid""",
    "q12": "SELECT bidder, count(*) AS bid_count FROM bid GROUP BY bidder",
    "q13": """SELECT b.auction, b.bidder, b.price, b.dateTime, s.value FROM bid b
              JOIN side_input s ON b.auction % 10000 = s.key""",
    "q14": f"""SELECT auction, bidder, 0.908 * price AS price, {Q14_TYPE.replace("hour(dateTime)", "hour(dateTime)")}
               AS bidTimeType, dateTime, extra, length(extra) - length(replace(extra, 'c', '')) AS c_counts
               FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000""",
    "q15": _stats_sql("day"),
    "q16": _stats_sql("channel, day", ", max(strftime(dateTime, '%H:%M')) AS minute"),
    "q17": """SELECT auction, day, count(*) AS total_bids,
              count(*) FILTER (WHERE price < 10000) AS rank1_bids,
              count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
              count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
              min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price
              FROM (SELECT *, strftime(dateTime, '%Y-%m-%d') AS day FROM bid) GROUP BY auction, day""",
    "q18": """SELECT auction, bidder, price, channel, url, dateTime, extra FROM (
              SELECT *, row_number() OVER (PARTITION BY bidder, auction ORDER BY dateTime DESC, price DESC) AS rn
              FROM bid)
              WHERE rn = 1""",
    "q19": """SELECT auction, bidder, price, dateTime, rank_number FROM (
              SELECT *, row_number() OVER (PARTITION BY auction ORDER BY price DESC, dateTime ASC) AS rank_number
              FROM bid) WHERE rank_number <= 10""",
    "q20": """SELECT b.auction, b.bidder, b.price, b.channel, b.dateTime, a.item_name, a.initial_bid, a.reserve,
              a.seller, a.category FROM bid b JOIN auction a ON b.auction = a.id WHERE a.category = 10""",
    "q21": f"""SELECT * FROM (SELECT auction, bidder, price, channel,
               {
        Q21_ID.replace("regexp_extract(url, '(&|^)channel_id=([^&]*)', 2)", "regexp_extract(url, '(&|^)channel_id=([^&]*)', 2)")
    } AS channel_id FROM bid)
               WHERE channel_id IS NOT NULL AND channel_id <> ''""",
    "q22": """SELECT auction, bidder, price, channel, nullif(split_part(url, '/', 4), '') AS dir1,
              nullif(split_part(url, '/', 5), '') AS dir2, nullif(split_part(url, '/', 6), '') AS dir3 FROM bid""",
}


# ------------------------------------------------------------------------------------------
# Spark Structured Streaming: fn(events, side) -> (DataFrame, output mode). ``events`` is the
# stream of all events (with the watermark when the query needs one); the type filters
# mention ``dateTime`` so the optimizer keeps them above the watermark (a filter that does
# not is pushed below it, and the sentinel would then never move the watermark).


def _spark_split(events, kind: int, cols: list[str]):
    return events.filter(f"(event_type = {kind} OR dateTime IS NULL)").selectExpr(*cols)


def spark_bids(events):
    return _spark_split(events, BID, BID_COLS)


def spark_auctions(events):
    return _spark_split(events, AUCTION, AUCTION_COLS)


def spark_persons(events):
    return _spark_split(events, PERSON, PERSON_COLS)


def _spark_select(*exprs: str, where: str | None = None):
    def build(events, side):
        bids = spark_bids(events)
        if where:
            bids = bids.filter(where)
        return bids.selectExpr(*exprs), "append"

    return build


def spark_q3(events, side):
    from pyspark.sql import functions as F

    p = spark_persons(events).filter("state IN ('OR', 'ID', 'CA')").alias("p")
    a = spark_auctions(events).filter("category = 10").alias("a")
    joined = a.join(p, F.expr("a.seller = p.id"))
    return joined.select("p.name", "p.city", "p.state", "a.id"), "append"


def spark_q5(events, side):
    from pyspark.sql import functions as F

    counts = (
        spark_bids(events).groupBy(F.window("dateTime", "10 seconds", "2 seconds"), "auction").agg(F.count(F.lit(1)).alias("num"))
    )
    # the windows' counts grouped again by window (chained stateful aggregations): one
    # 2-second bucket of window_time (its end) per sliding window
    per_window = counts.groupBy(F.window(F.window_time("window"), "2 seconds").alias("w")).agg(
        F.max("num").alias("maxn"),
        F.collect_list(F.struct("auction", "num", F.col("window.start").alias("ws"), F.col("window.end").alias("we"))).alias(
            "rows"
        ),
    )
    out = per_window.select("maxn", F.explode("rows").alias("r")).filter("r.num >= maxn")
    return out.selectExpr("r.auction AS auction", "r.num AS num", "r.ws AS window_start", "r.we AS window_end"), "append"


def spark_q7(events, side):
    from pyspark.sql import functions as F

    per_window = (
        spark_bids(events)
        .groupBy(F.window("dateTime", "10 seconds"))
        .agg(
            F.max("price").alias("maxprice"),
            F.collect_list(F.struct("auction", "price", "bidder", "dateTime", "extra")).alias("rows"),
        )
    )
    out = per_window.select("maxprice", F.explode("rows").alias("r")).filter("r.price = maxprice")
    return out.selectExpr("r.auction", "r.price", "r.bidder", "r.dateTime", "r.extra"), "append"


def spark_q8(events, side):
    from pyspark.sql import functions as F

    # persons and auctions joined on the seller and the same tumbling window (a time-window
    # equality join), then one row per person and window: dropDuplicates emits a pair's first
    # match at once (an aggregation after the join would wait for the watermark, and the
    # last window would need batches that availableNow does not run)
    p = spark_persons(events).select("id", "name", F.window("dateTime", "10 seconds").alias("pw"))
    a = spark_auctions(events).select("seller", F.window("dateTime", "10 seconds").alias("aw"))
    joined = p.join(a, (p.id == a.seller) & (p.pw == a.aw))
    distinct = joined.select("id", "name", F.col("pw.start").alias("starttime")).dropDuplicates(["id", "starttime"])
    return distinct, "append"


def spark_q11(events, side):
    from pyspark.sql import functions as F

    sessions = (
        spark_bids(events)
        .groupBy(F.session_window("dateTime", "10 seconds").alias("s"), "bidder")
        .agg(F.count(F.lit(1)).alias("bid_count"))
    )
    return sessions.selectExpr("bidder", "bid_count", "s.start AS starttime", "s.end AS endtime"), "append"


def spark_q12(events, side):
    from pyspark.sql import functions as F

    counts = (
        spark_bids(events)
        .withColumn("p_time", F.current_timestamp())
        .groupBy(F.window("p_time", "10 seconds").alias("w"), "bidder")
        .agg(F.count(F.lit(1)).alias("bid_count"))
    )
    return counts.selectExpr("bidder", "bid_count", "w.start AS window_start"), "update"


def spark_q13(events, side):
    from pyspark.sql import functions as F

    table = events.sparkSession.read.parquet(side)
    joined = spark_bids(events).join(F.broadcast(table), F.expr(f"auction % {SIDE_KEYS} = key"))
    return joined.select("auction", "bidder", "price", "dateTime", "value"), "append"


def _rank_sums():
    from pyspark.sql import functions as F

    return [F.sum(F.expr(f"CASE WHEN {c} THEN 1 ELSE 0 END")).alias(f"{r}_bids") for r, c in RANKS.items()]


def spark_q17(events, side):
    from pyspark.sql import functions as F

    bids = spark_bids(events).withColumn("day", F.date_format("dateTime", "yyyy-MM-dd"))
    stats = bids.groupBy("auction", "day").agg(
        F.count(F.lit(1)).alias("total_bids"),
        *_rank_sums(),
        F.min("price").alias("min_price"),
        F.max("price").alias("max_price"),
        F.avg("price").alias("avg_price"),
        F.sum("price").alias("sum_price"),
    )
    return stats, "update"


def spark_q18(events, side):
    from pyspark.sql import functions as F

    last = (
        spark_bids(events)
        .groupBy("bidder", "auction")
        .agg(F.max_by(F.struct("price", "channel", "url", "dateTime", "extra"), F.struct("dateTime", "price")).alias("r"))
    )
    return last.selectExpr("auction", "bidder", "r.price", "r.channel", "r.url", "r.dateTime", "r.extra"), "update"


def spark_q20(events, side):
    from pyspark.sql import functions as F

    b = spark_bids(events).alias("b")
    a = spark_auctions(events).filter("category = 10").alias("a")
    joined = b.join(a, F.expr("b.auction = a.id"))
    return joined.selectExpr(
        "b.auction",
        "b.bidder",
        "b.price",
        "b.channel",
        "b.dateTime",
        "a.item_name",
        "a.initial_bid",
        "a.reserve",
        "a.seller",
        "a.category",
    ), "append"


def spark_q21(events, side):
    out = spark_bids(events).selectExpr("auction", "bidder", "price", "channel", f"{Q21_ID} AS channel_id")
    return out.filter("channel_id IS NOT NULL AND channel_id <> ''"), "append"


SPARK: dict[str, Callable] = {
    "q0": _spark_select("auction", "bidder", "price", "dateTime", "extra"),
    "q1": _spark_select("auction", "bidder", "0.908 * price AS price", "dateTime", "extra"),
    "q2": _spark_select("auction", "price", where="auction % 123 = 0"),
    "q3": spark_q3,
    "q5": spark_q5,
    "q7": spark_q7,
    "q8": spark_q8,
    "q10": _spark_select(
        "auction",
        "bidder",
        "price",
        "dateTime",
        "extra",
        "date_format(dateTime, 'yyyy-MM-dd') AS dt",
        "date_format(dateTime, 'HH:mm') AS hm",
    ),
    "q11": spark_q11,
    "q12": spark_q12,
    "q13": spark_q13,
    "q14": _spark_select(
        "auction",
        "bidder",
        "0.908 * price AS price",
        f"{Q14_TYPE} AS bidTimeType",
        "dateTime",
        "extra",
        "length(extra) - length(replace(extra, 'c', '')) AS c_counts",
        where="0.908 * price > 1000000 AND 0.908 * price < 50000000",
    ),
    "q17": spark_q17,
    "q18": spark_q18,
    "q20": spark_q20,
    "q21": spark_q21,
    "q22": _spark_select(
        "auction",
        "bidder",
        "price",
        "channel",
        "get(split(url, '/'), 3) AS dir1",
        "get(split(url, '/'), 4) AS dir2",
        "get(split(url, '/'), 5) AS dir3",
    ),
}
SPARK_GAPS = {
    "q4": "a join followed by two updating aggregations: Spark runs a stream-stream join only in append mode, "
    "and an aggregation after it in append mode only over event-time windows (the max per auction is not one)",
    "q6": "as q4, and an OVER window (the last 10 auctions per seller), which streaming Spark refuses",
    "q9": "the winning bid per auction is ROW_NUMBER() over a join's output: streaming Spark has no ROW_NUMBER "
    "and no updating aggregation after a stream-stream join",
    "q15": "distinct counts (count(DISTINCT bidder)): streaming Spark refuses distinct aggregates",
    "q16": "distinct counts, as q15",
    "q19": "top 10 per auction needs ROW_NUMBER(), which streaming Spark refuses (only custom state in "
    "applyInPandasWithState / transformWithState would do)",
}


# ------------------------------------------------------------------------------------------
# Sluice: fn(events, ctx) -> Stream. ``events`` is the stream of all events (its source
# declares ``dateTime`` as event time with the generator's out-of-orderness as watermark
# delay); ``ctx`` holds the configuration, the side input's path and the join bounds.


@dataclass(frozen=True)
class Context:
    cfg: Config
    side: str
    bounds: dict[str, tuple[str, str]]


def sluice_bids(events):
    return events.filter(f"event_type = {BID}").select(*BID_COLS)


def sluice_auctions(events):
    return events.filter(f"event_type = {AUCTION}").select(*AUCTION_COLS)


def sluice_persons(events):
    return events.filter(f"event_type = {PERSON}").select(*PERSON_COLS)


def _sluice_select(*exprs: str, where: str | None = None):
    def build(events, ctx):
        bids = sluice_bids(events)
        if where:
            bids = bids.filter(where)
        return bids.select(*exprs)

    return build


def sluice_q3(events, ctx):
    persons = sluice_persons(events).filter("state IN ('OR', 'ID', 'CA')").select("id", "name", "city", "state", "dateTime")
    auctions = sluice_auctions(events).filter("category = 10").select("id AS a_id", "seller", "dateTime")
    # person.t - auction.t within the generator's bounds (Sluice has no unbounded join)
    joined = auctions.key_by("seller").join(persons.key_by("id"), between=ctx.bounds["q3"])
    return joined.select("name", "city", "state", "a_id AS id")


def _valid_bids(events, ctx, *auction_cols: str):
    """Bids joined to their auction, kept when within the auction's [dateTime, expires]."""
    auctions = sluice_auctions(events).select("id", "expires", "dateTime", *auction_cols)
    bids = sluice_bids(events).select("auction", "bidder", "price", "dateTime")
    longest = f"+{2 * ctx.cfg.auction_length_s + 1:g}s"
    joined = auctions.key_by("id").join(bids.key_by("auction"), between=("0s", longest))
    return joined.filter("dateTime_right >= dateTime_left AND dateTime_right <= expires")


def _mean_of_latest(key: str, limit: int | None):
    """process(): per ``key``, the mean of the current final price of its auctions (the
    ``limit`` latest-closing ones); the state maps auction -> (expires, final)."""

    def fn(k, rows, state):
        finals = dict(state.value or {})
        for auction, expires, final in zip(
            rows.column("id").to_pylist(), rows.column("expires").to_pylist(), rows.column("final").to_pylist()
        ):
            finals[auction] = (expires, final)
        state.update(finals)
        chosen = sorted(((e, a, f) for a, (e, f) in finals.items()), reverse=True)
        if limit is not None:
            chosen = chosen[:limit]
        return [{key: k[0], "avg_final": sum(f for *_, f in chosen) / len(chosen)}]

    return fn


def sluice_q4(events, ctx):
    finals = _valid_bids(events, ctx, "category").key_by("id", "expires", "category").aggregate(final=_max("price"))
    return finals.key_by("category").process(_mean_of_latest("category", None), schema={"category": "int", "avg_final": "double"})


def sluice_q6(events, ctx):
    finals = _valid_bids(events, ctx, "seller").key_by("id", "expires", "seller").aggregate(final=_max("price"))
    return finals.key_by("seller").process(_mean_of_latest("seller", 10), schema={"seller": "int", "avg_final": "double"})


def _max(column: str):
    from sluice import agg

    return agg.max(column)


def sluice_q5(events, ctx):
    from sluice import agg
    from sluice import windows as W

    counts = sluice_bids(events).key_by("auction").window(W.sliding("10s", "2s")).aggregate(num=agg.count())

    def hottest(key, rows, state):
        # a window's counts are emitted together, when the watermark passes its end
        return rows.filter(pc.greater_equal(rows.column("num"), pc.max(rows.column("num"))))

    return counts.key_by("window_start").process(hottest).select("auction", "num", "window_start", "window_end")


PRICE_DIGITS = 12


def _top_create():
    return ("", [])


def _top_add(acc, values):
    """Keep the packed bids of the highest price (the price is the packed string's
    zero-padded prefix, so the largest string has the highest price)."""
    if len(values) == 0:
        return acc
    best = pc.max(values).as_py()
    if best is None:
        return acc
    prefix = best[:PRICE_DIGITS]
    tied = values.filter(pc.starts_with(values, prefix)).to_pylist()
    return _top_merge(acc, (prefix, tied))


def _top_merge(a, b):
    if a[0] == b[0]:
        return (a[0], a[1] + b[1])
    return a if a[0] > b[0] else b


def _top_result(acc):
    return "\n".join(acc[1])


def _unpack_top(row):
    out = []
    for packed in (row["top"] or "").split("\n"):
        if packed:
            price, auction, bidder, micros, extra = packed.split("|", 4)
            out.append(
                {"auction": int(auction), "price": int(price), "bidder": int(bidder), "dateTime": int(micros), "extra": extra}
            )
    return out


def sluice_q7(events, ctx):
    from sluice import agg
    from sluice import windows as W

    packed = sluice_bids(events).select(
        "dateTime",
        f"concat_ws('|', lpad(cast(price AS string), {PRICE_DIGITS}, '0'), cast(auction AS string), "
        "cast(bidder AS string), cast(unix_micros(dateTime) AS string), extra) AS packed",
    )
    top = packed.window(W.tumbling("10s")).aggregate(
        top=agg.udaf("packed", _top_create, _top_add, _top_merge, _top_result, result_type=pa.string())
    )
    return top.flat_map(
        _unpack_top, schema={"auction": "int", "price": "int", "bidder": "int", "dateTime": "int", "extra": "string"}
    )


def _first_only(key, rows, state):
    if state.value:
        return None
    state.update(True)
    return [{"id": key[0], "name": rows.column("name")[0].as_py(), "starttime": key[1]}]


def sluice_q8(events, ctx):
    from sluice import windows as W

    persons = sluice_persons(events).select("id", "name", "dateTime")
    auctions = sluice_auctions(events).select("seller", "dateTime")
    joined = persons.key_by("id").join(auctions.key_by("seller"), window=W.tumbling("10s"))
    return joined.key_by("id", "window_start").process(
        _first_only, schema={"id": "int", "name": "string", "starttime": "timestamp"}
    )


def _better_bid(acc, r):
    """The winning bid so far: the highest price, the earliest among equal prices."""
    if (r["price"], -r["dateTime_right"].timestamp()) > (acc["price"], -acc["dateTime_right"].timestamp()):
        return r
    return acc


def sluice_q9(events, ctx):
    valid = _valid_bids(events, ctx, "seller", "category")
    best = valid.key_by("id").reduce(_better_bid)
    return best.select("id AS auction", "seller", "category", "bidder", "price", "dateTime_right AS bid_time")


def sluice_q11(events, ctx):
    from sluice import agg
    from sluice import windows as W

    sessions = sluice_bids(events).key_by("bidder").window(W.session("10s")).aggregate(bid_count=agg.count())
    return sessions.select("bidder", "bid_count", "window_start AS starttime", "window_end AS endtime")


def sluice_q12(events, ctx):
    from sluice import agg
    from sluice import windows as W

    counts = sluice_bids(events).key_by("bidder").window(W.tumbling("10s"), time="processing").aggregate(bid_count=agg.count())
    return counts.select("bidder", "bid_count", "window_start")


_SIDE: dict[str, pa.Array] = {}


def _side_values(path: str) -> pa.Array:
    if path not in _SIDE:
        import pyarrow.parquet as pq

        table = pq.read_table(path).sort_by("key")
        _SIDE[path] = table.column("value").combine_chunks()
    return _SIDE[path]


def sluice_q13(events, ctx):
    side = ctx.side

    def enrich(batch: pa.RecordBatch) -> pa.RecordBatch:
        values = _side_values(side).take(pc.remainder(batch.column("auction"), SIDE_KEYS))
        return pa.RecordBatch.from_arrays(
            [batch.column("auction"), batch.column("bidder"), batch.column("price"), batch.column("dateTime"), values],
            names=["auction", "bidder", "price", "dateTime", "value"],
        )

    return sluice_bids(events).map_batches(
        enrich, schema={"auction": "int", "bidder": "int", "price": "int", "dateTime": "timestamp", "value": "string"}
    )


def _stats(keys: tuple[str, ...], minute: bool):
    def build(events, ctx):
        from sluice import agg

        distinct = agg.count_distinct
        marks = {f"{r}_mark": f"CASE WHEN {c} THEN 1 END" for r, c in RANKS.items()}
        marks |= {f"{r}_bidder": f"CASE WHEN {c} THEN bidder END" for r, c in RANKS.items()}
        marks |= {f"{r}_auction": f"CASE WHEN {c} THEN auction END" for r, c in RANKS.items()}
        marks["day"] = "date_format(dateTime, 'yyyy-MM-dd')"
        if minute:
            marks["hm"] = "date_format(dateTime, 'HH:mm')"
        bids = sluice_bids(events).with_columns(**marks)
        aggregates: dict[str, Any] = {"total_bids": agg.count()}
        aggregates |= {f"{r}_bids": agg.count(f"{r}_mark") for r in RANKS}
        aggregates["total_bidders"] = distinct("bidder")
        aggregates |= {f"{r}_bidders": distinct(f"{r}_bidder") for r in RANKS}
        aggregates["total_auctions"] = distinct("auction")
        aggregates |= {f"{r}_auctions": distinct(f"{r}_auction") for r in RANKS}
        if minute:
            aggregates["minute"] = agg.max("hm")
        return bids.key_by(*keys).aggregate(**aggregates)

    return build


def sluice_q17(events, ctx):
    from sluice import agg

    marks = {f"{r}_mark": f"CASE WHEN {c} THEN 1 END" for r, c in RANKS.items()}
    bids = sluice_bids(events).with_columns(day="date_format(dateTime, 'yyyy-MM-dd')", **marks)
    return bids.key_by("auction", "day").aggregate(
        total_bids=agg.count(),
        **{f"{r}_bids": agg.count(f"{r}_mark") for r in RANKS},
        min_price=agg.min("price"),
        max_price=agg.max("price"),
        avg_price=agg.mean("price"),
        sum_price=agg.sum("price"),
    )


def _later(acc, r):
    """The last bid: the latest, the higher price among bids at the same time."""
    return r if (r["dateTime"], r["price"]) >= (acc["dateTime"], acc["price"]) else acc


def sluice_q18(events, ctx):
    return sluice_bids(events).key_by("bidder", "auction").reduce(_later)


def _top10(key, rows, state):
    current = list(state.value or [])
    fresh = zip(rows.column("bidder").to_pylist(), rows.column("price").to_pylist(), rows.column("dateTime").to_pylist())
    current += [(price, dt, bidder) for bidder, price, dt in fresh]
    current = sorted(current, key=lambda t: (-t[0], t[1]))[:10]
    state.update(current)
    return [
        {"auction": key[0], "bidder": b, "price": p, "dateTime": dt, "rank_number": i + 1} for i, (p, dt, b) in enumerate(current)
    ]


def sluice_q19(events, ctx):
    return (
        sluice_bids(events)
        .key_by("auction")
        .process(
            _top10, schema={"auction": "int", "bidder": "int", "price": "int", "dateTime": "timestamp", "rank_number": "int"}
        )
    )


def sluice_q20(events, ctx):
    bids = sluice_bids(events).select("auction", "bidder", "price", "channel", "dateTime")
    auctions = (
        sluice_auctions(events)
        .filter("category = 10")
        .select("id", "item_name", "initial_bid", "reserve", "seller", "category", "dateTime")
    )
    joined = bids.key_by("auction").join(auctions.key_by("id"), between=ctx.bounds["q20"])
    return joined.select(
        "auction",
        "bidder",
        "price",
        "channel",
        "dateTime_left AS dateTime",
        "item_name",
        "initial_bid",
        "reserve",
        "seller",
        "category",
    )


def sluice_q21(events, ctx):
    out = sluice_bids(events).select("auction", "bidder", "price", "channel", f"{Q21_ID} AS channel_id")
    return out.filter("channel_id IS NOT NULL AND channel_id <> ''")


SLUICE: dict[str, Callable] = {
    "q0": _sluice_select("auction", "bidder", "price", "dateTime", "extra"),
    "q1": _sluice_select("auction", "bidder", "0.908 * price AS price", "dateTime", "extra"),
    "q2": _sluice_select("auction", "price", where="auction % 123 = 0"),
    "q3": sluice_q3,
    "q4": sluice_q4,
    "q5": sluice_q5,
    "q6": sluice_q6,
    "q7": sluice_q7,
    "q8": sluice_q8,
    "q9": sluice_q9,
    "q10": _sluice_select(
        "auction",
        "bidder",
        "price",
        "dateTime",
        "extra",
        "date_format(dateTime, 'yyyy-MM-dd') AS dt",
        "date_format(dateTime, 'HH:mm') AS hm",
    ),
    "q11": sluice_q11,
    "q12": sluice_q12,
    "q13": sluice_q13,
    "q14": _sluice_select(
        "auction",
        "bidder",
        "0.908 * price AS price",
        f"{Q14_TYPE} AS bidTimeType",
        "dateTime",
        "extra",
        "length(extra) - length(replace(extra, 'c', '')) AS c_counts",
        where="0.908 * price > 1000000 AND 0.908 * price < 50000000",
    ),
    "q15": _stats(("day",), False),
    "q16": _stats(("channel", "day"), True),
    "q17": sluice_q17,
    "q18": sluice_q18,
    "q19": sluice_q19,
    "q20": sluice_q20,
    "q21": sluice_q21,
    "q22": _sluice_select(
        "auction",
        "bidder",
        "price",
        "channel",
        "get(split(url, '/'), 3) AS dir1",
        "get(split(url, '/'), 4) AS dir2",
        "get(split(url, '/'), 5) AS dir3",
    ),
}
SLUICE_GAPS: dict[str, str] = {}

TITLES = {
    "q0": "pass through",
    "q1": "currency conversion",
    "q2": "selection",
    "q3": "local item suggestion",
    "q4": "average price per category",
    "q5": "hot items",
    "q6": "average selling price per seller",
    "q7": "highest bid",
    "q8": "monitor new users",
    "q9": "winning bids",
    "q10": "log to file system",
    "q11": "user sessions",
    "q12": "processing-time windows",
    "q13": "bounded side input join",
    "q14": "calculation",
    "q15": "bidding statistics report",
    "q16": "channel statistics report",
    "q17": "auction statistics report",
    "q18": "find last bid",
    "q19": "auction top-10 price",
    "q20": "expand bid with auction",
    "q21": "add channel id",
    "q22": "get URL directories",
}
COLUMNS = {
    "q0": ("auction", "bidder", "price", "dateTime", "extra"),
    "q1": ("auction", "bidder", "price", "dateTime", "extra"),
    "q2": ("auction", "price"),
    "q3": ("name", "city", "state", "id"),
    "q4": ("category", "avg_final"),
    "q5": ("auction", "num", "window_start", "window_end"),
    "q6": ("seller", "avg_final"),
    "q7": ("auction", "price", "bidder", "dateTime", "extra"),
    "q8": ("id", "name", "starttime"),
    "q9": ("auction", "seller", "category", "bidder", "price", "bid_time"),
    "q10": ("auction", "bidder", "price", "dateTime", "extra", "dt", "hm"),
    "q11": ("bidder", "bid_count", "starttime", "endtime"),
    "q12": ("bidder", "bid_count"),
    "q13": ("auction", "bidder", "price", "dateTime", "value"),
    "q14": ("auction", "bidder", "price", "bidTimeType", "dateTime", "extra", "c_counts"),
    "q15": ("day", *STATS),
    "q16": ("channel", "day", "minute", *STATS),
    "q17": (
        "auction",
        "day",
        "total_bids",
        "rank1_bids",
        "rank2_bids",
        "rank3_bids",
        "min_price",
        "max_price",
        "avg_price",
        "sum_price",
    ),
    "q18": ("auction", "bidder", "price", "channel", "url", "dateTime", "extra"),
    "q19": ("auction", "bidder", "price", "dateTime", "rank_number"),
    "q20": ("auction", "bidder", "price", "channel", "dateTime", "item_name", "initial_bid", "reserve", "seller", "category"),
    "q21": ("auction", "bidder", "price", "channel", "channel_id"),
    "q22": ("auction", "bidder", "price", "channel", "dir1", "dir2", "dir3"),
}
LATEST = {
    "q4": ("category",),
    "q6": ("seller",),
    "q9": ("auction",),
    "q15": ("day",),
    "q16": ("channel", "day"),
    "q17": ("auction", "day"),
    "q18": ("bidder", "auction"),
}
EVENT_TIME = {"q4", "q5", "q6", "q7", "q8", "q9", "q11", "q3", "q20"}
STATEFUL = {"q3", "q4", "q5", "q6", "q7", "q8", "q9", "q11", "q12", "q15", "q16", "q17", "q18", "q19", "q20"}


def all_queries() -> list[Query]:
    out = []
    for i in range(23):
        name = f"q{i}"
        mode, keys = "rows", ()
        if name in LATEST:
            mode, keys = "latest", LATEST[name]
        elif name == "q19":
            mode, keys = "top", ("auction",)
        elif name == "q12":
            mode, keys = "totals", ("bidder",)
        out.append(
            Query(
                name,
                TITLES[name],
                COLUMNS[name],
                REFERENCE[name],
                mode,
                keys,
                name in EVENT_TIME,
                name in STATEFUL,
                SPARK.get(name),
                SLUICE.get(name),
                SPARK_GAPS.get(name, ""),
                SLUICE_GAPS.get(name, ""),
            )
        )
    return out
