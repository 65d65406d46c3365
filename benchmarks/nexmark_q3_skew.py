"""Query 3 on a file with Beam Java's hot-seller skew: why Beam's runner outputs fewer rows.

Query 3 joins category-10 auctions with their sellers (persons in OR, ID or CA) through a
``CoGroupByKey`` under ``Repeatedly(AfterCount(30))`` in the global window. Beam Python fires a
key's pane at each 30th element and drops what is pending when the window ends; sparkbeam emits
it as a final pane (README, "Garbage collection"). On sparkbeam's generator no seller reaches 30
elements (its hot seller moves every 4 persons), so Beam's runner outputs nothing. Beam Java's
generator keeps a hot seller for 100 persons (``AuctionGenerator.HOT_SELLER_RATIO``; the
probability stays 1 - 1/hotSellersRatio = 3/4), so hot sellers get dozens of category-10
auctions and Beam's runner outputs the rows of their fired panes.

This writes a file with that granularity (hot bidders likewise, Java's ``BidGenerator``: 100,
the batch's second person), runs query 3 on Beam's FnApiRunner and sparkbeam's runner as
``nexmark_queries.py`` does, and checks: sparkbeam's rows are the whole join computed in plain
Python, and Beam's are exactly the rows of the keys with 30 elements or more. Beam Python
evaluates a count trigger once per bundle, and in batch a key's whole group is one bundle, so
such a key fires once with all its elements, and a key with fewer never fires: its rows are
what the window's end drops::

    python benchmarks/nexmark_q3_skew.py --events 100000 --master 'local[2]'
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))

from measuring import start_spark  # noqa: E402  (a sibling module, after the path is set)

# Beam Java's batch sizes of hot ids (AuctionGenerator, BidGenerator).
JAVA_HOT_BATCH = 100
STATES = ("OR", "ID", "CA")
PANE = 30


def write_java_skew(path: str, events: int, seed: int) -> None:
    """sparkbeam's generator with Java's hot-id batches: the same draws, other hot ids."""
    from sparkbeam.testing import nexmark_generator as generator

    def hot_or_recent(self, count: int, ratio: int, pool: int) -> int:
        if self.random.randrange(ratio) > 0:
            return ((count - 1) // JAVA_HOT_BATCH) * JAVA_HOT_BATCH
        return self.recent(count, pool)

    original = generator._Draws.hot_or_recent
    generator._Draws.hot_or_recent = hot_or_recent
    try:
        generator.write_events(path, generator.NexmarkConfig(events=events, seed=seed))
    finally:
        generator._Draws.hot_or_recent = original


def plain_join(path: str) -> tuple[collections.Counter, dict[int, int], dict[int, str]]:
    """The join's (auction id -> seller) rows, elements per key, and each auction's seller."""
    elements: collections.Counter = collections.Counter()
    persons: set[int] = set()
    auctions: dict[int, int] = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            event = json.loads(line)
            if "seller" in event and event["category"] == 10:
                elements[event["seller"]] += 1
                auctions[event["id"]] = event["seller"]
            elif "state" in event and event["state"] in STATES:
                elements[event["id"]] += 1
                persons.add(event["id"])
    rows = collections.Counter({auction: 1 for auction, seller in auctions.items() if seller in persons})
    return rows, dict(elements), auctions


def auction_ids(rows: collections.Counter) -> collections.Counter:
    """The auction ids of query 3's rows (canonical dicts: ("<dict>", ((key, value), ...)))."""
    ids: collections.Counter = collections.Counter()
    for (value, _timestamp, _window, _pane), count in rows.items():
        ids[dict(value[1])["auction_id"]] += count
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    from tests.beam_frontend.nexmark import QUERIES, load_query
    from tests.beam_frontend.pairs import run_on_sparkbeam
    from tests.oracle import run_beam

    spark = start_spark(args.master, [], "sparkbeam-nexmark-q3")
    path = os.path.join(tempfile.mkdtemp(prefix="sparkbeam-nexmark-q3-"), "events.json")
    write_java_skew(path, args.events, args.seed)
    joined, elements, sellers = plain_join(path)
    query = next(q for q in QUERIES if q.number == 3)

    def build(ns, p):
        return load_query(query, p, path)

    started = time.perf_counter()
    beam_rows = auction_ids(run_beam(build, canonical_output=True))
    beam_seconds = time.perf_counter() - started
    started = time.perf_counter()
    our_rows = auction_ids(run_on_sparkbeam(build, canonical_output=True)[0])
    our_seconds = time.perf_counter() - started
    spark.stop()

    lacking = our_rows - beam_rows
    per_key = collections.Counter(sellers[auction] for auction in lacking.elements())
    fired = collections.Counter({auction: n for auction, n in joined.items() if elements[sellers[auction]] >= PANE})
    print(f"{args.events:,} events, Java's hot batches of {JAVA_HOT_BATCH}; seed {args.seed}")
    print(f"keys {len(elements)}, keys with >= {PANE} elements {sum(n >= PANE for n in elements.values())}, most {max(elements.values())}")
    print(f"whole join (plain Python) {sum(joined.values())} rows")
    print(f"sparkbeam {sum(our_rows.values())} rows ({our_seconds:.1f} s), equal to the whole join: {our_rows == joined}")
    print(f"Beam's FnApiRunner {sum(beam_rows.values())} rows ({beam_seconds:.1f} s), all among sparkbeam's: {not (beam_rows - our_rows)}")
    print(
        f"rows Beam lacks {sum(lacking.values())}, over {len(per_key)} keys, {sum(1 for k in per_key if elements[k] < PANE)} "
        f"of them below {PANE} elements; Beam's rows are exactly those of the keys with {PANE} or more: {beam_rows == fired}"
    )
    return 0 if our_rows == joined and beam_rows == fired else 1


if __name__ == "__main__":
    sys.exit(main())
