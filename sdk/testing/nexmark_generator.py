"""Nexmark events of our own: persons, auctions and bids, written as Beam's Nexmark launcher reads them.

Nexmark models an online auction: people register, open auctions and bid. Its generator
(Beam's Java ``GeneratorConfig``/``NexmarkGenerator``) cuts the event sequence into
epochs of 50 events: 1 person, then 3 auctions, then 46 bids, so that the event number
alone says what an event is and which id it gets. This generator keeps that layout and
those proportions, and Nexmark's skew: most auctions are sold by a few "hot" sellers, half
the bids go to a hot auction and most come from hot bidders. Unlike Java's, which lets a
bid or an auction name a person or an auction a few ids ahead of the stream, every id
here refers to an event that came before (consistent ids), so a join never waits for a
record the file lacks.

Each event is one line of JSON with the field names of Beam's
``apache_beam/testing/benchmarks/nexmark/models/field_name.py``, the format its launcher's
batch mode (``--input``) parses with ``nexmark_util.ParseJsonEventFn``; times are epoch
milliseconds. Event ``n`` happens at ``start_ms + n * inter_event_ms``. The same
``NexmarkConfig`` always gives the same events (a seeded ``random.Random``).

This module imports neither apache_beam nor Spark: the tests and the Nexmark benchmark
use it to write the file both runners read.
"""

from __future__ import annotations

import json
import pathlib
import random
from collections.abc import Iterator
from typing import Any

import attrs

__all__ = ["NexmarkConfig", "event_kind", "generate_events", "write_events"]

PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
EPOCH_EVENTS = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION

# Nexmark's first ids and categories (Java's GeneratorConfig).
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5

# Nexmark's skew: 1 in HOT_AUCTION_RATIO bids goes anywhere, the rest to the latest hot
# auction; likewise for sellers and bidders.
HOT_AUCTION_RATIO = 2
HOT_SELLER_RATIO = 4
HOT_BIDDER_RATIO = 4
# The pool a non-hot id is drawn from: the most recent persons and auctions.
ACTIVE_PERSONS = 1000
IN_FLIGHT_AUCTIONS = 100

US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")


@attrs.frozen
class NexmarkConfig:
    """How many events, and when they happen."""

    events: int = attrs.field(validator=attrs.validators.ge(0))
    seed: int = 2026
    # 2026-01-01T00:00:00Z, a round minute, so Nexmark's 10 s windows start on the first event.
    start_ms: int = 1_767_225_600_000
    inter_event_ms: int = attrs.field(default=100, validator=attrs.validators.gt(0))
    # An auction stays open for a uniform length up to twice this.
    mean_auction_ms: int = attrs.field(default=20_000, validator=attrs.validators.gt(0))


def event_kind(number: int) -> str:
    """``person``, ``auction`` or ``bid``: what event ``number`` is, by its place in its epoch."""
    offset = number % EPOCH_EVENTS
    if offset < PERSON_PROPORTION:
        return "person"
    if offset < PERSON_PROPORTION + AUCTION_PROPORTION:
        return "auction"
    return "bid"


def _persons_before(number: int) -> int:
    """How many persons events 0..number (inclusive) hold."""
    epoch, offset = divmod(number, EPOCH_EVENTS)
    return epoch * PERSON_PROPORTION + min(offset + 1, PERSON_PROPORTION)


def _auctions_before(number: int) -> int:
    """How many auctions events 0..number (inclusive) hold."""
    epoch, offset = divmod(number, EPOCH_EVENTS)
    return epoch * AUCTION_PROPORTION + min(max(offset + 1 - PERSON_PROPORTION, 0), AUCTION_PROPORTION)


class _Draws:
    """The random choices, from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def price(self) -> int:
        # Nexmark's prices: log-uniform cents between 1 and 1,000,000 dollars.
        return round(10 ** (self.random.random() * 6) * 100)

    def recent(self, count: int, pool: int) -> int:
        """A base-0 id among the ``pool`` most recent of ``count``."""
        return count - 1 - self.random.randrange(min(count, pool))

    def hot_or_recent(self, count: int, ratio: int, pool: int) -> int:
        """A hot id (the latest multiple of ``ratio``) ``ratio - 1`` times in ``ratio``, else a recent one."""
        if self.random.randrange(ratio) > 0:
            return ((count - 1) // ratio) * ratio
        return self.recent(count, pool)

    def word(self, length: int) -> str:
        return "".join(self.random.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(length))


def generate_events(config: NexmarkConfig) -> Iterator[dict[str, Any]]:
    """The events in order, each a dict with Beam's Nexmark JSON field names."""
    draws = _Draws(config.seed)
    for number in range(config.events):
        at = config.start_ms + number * config.inter_event_ms
        kind = event_kind(number)
        if kind == "person":
            yield _person(draws, FIRST_PERSON_ID + _persons_before(number) - 1, at)
        elif kind == "auction":
            seller = draws.hot_or_recent(_persons_before(number), HOT_SELLER_RATIO, ACTIVE_PERSONS)
            yield _auction(draws, FIRST_AUCTION_ID + _auctions_before(number) - 1, FIRST_PERSON_ID + seller, at, config)
        else:
            auction = draws.hot_or_recent(_auctions_before(number), HOT_AUCTION_RATIO, IN_FLIGHT_AUCTIONS)
            bidder = draws.hot_or_recent(_persons_before(number), HOT_BIDDER_RATIO, ACTIVE_PERSONS)
            yield {
                "auction": FIRST_AUCTION_ID + auction,
                "bidder": FIRST_PERSON_ID + bidder,
                "price": draws.price(),
                "dateTime": at,
                "extra": draws.word(8),
            }


def _person(draws: _Draws, person_id: int, at: int) -> dict[str, Any]:
    first, last = draws.random.choice(FIRST_NAMES), draws.random.choice(LAST_NAMES)
    return {
        "id": person_id,
        "name": f"{first} {last}",
        "emailAddress": f"{draws.word(6)}@{draws.word(5)}.com",
        "creditCard": " ".join(f"{draws.random.randrange(10_000):04d}" for _ in range(4)),
        "city": draws.random.choice(US_CITIES),
        "state": draws.random.choice(US_STATES),
        "dateTime": at,
        "extra": draws.word(8),
    }


def _auction(draws: _Draws, auction_id: int, seller: int, at: int, config: NexmarkConfig) -> dict[str, Any]:
    initial_bid = draws.price()
    return {
        "id": auction_id,
        "itemName": draws.word(8),
        "description": draws.word(16),
        "initialBid": initial_bid,
        "reserve": initial_bid + draws.price(),
        "dateTime": at,
        "expires": at + 1 + draws.random.randrange(2 * config.mean_auction_ms),
        "seller": seller,
        "category": FIRST_CATEGORY_ID + draws.random.randrange(NUM_CATEGORIES),
        "extra": draws.word(8),
    }


def write_events(path: str | pathlib.Path, config: NexmarkConfig) -> pathlib.Path:
    """Write the events to ``path``, one JSON object a line, as Beam's launcher reads them."""
    path = pathlib.Path(path)
    with path.open("w", encoding="utf-8") as out:
        for event in generate_events(config):
            out.write(json.dumps(event, separators=(",", ":")) + "\n")
    return path
