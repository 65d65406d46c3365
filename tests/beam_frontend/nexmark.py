"""Beam's Nexmark queries, as installed with apache-beam, in batch on a file of our events.

A query runs as Beam's launcher (``nexmark_launcher.py``) runs it in batch: its
``read_from_file`` (``ReadFromText``, ``ParseJsonEventFn``, each event stamped with its
time) on a file from ``sparkbeam.testing.nexmark_generator``, then the query module's
``load(events, query_args, pipeline_options)`` with the launcher's query arguments. The
launcher keeps those arguments in a local of its ``run``, so ``QUERY_ARGS`` restates them.

Nexmark's model classes (``Person``, ``Auction``, ``Bid``, ``AuctionBid``, query 10's
``OutputFile``) compare by identity; ``comparable`` turns a query's output into values
that compare by content, made ``canonical`` in the same step: the last step of the
pipeline, on both runners alike. That step is the harness's largest cost (about 45 µs per
event, more than query 0 itself), so it runs once: the recorders take its values as they
are (``canonical_output=True`` of ``run_beam`` and ``run_on_sparkbeam``).
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from tests.compat.harness import Gap
from tests.oracle import canonical

NEXMARK = "apache_beam.testing.benchmarks.nexmark"
#: the name of Nexmark's package copied with its imports pointed at sparkbeam starts so
#: (``tests.compat.rewrite.load_rewritten_package``)
SWAPPED_PREFIX = "sparkbeam_compat_nexmark_"

#: the query arguments of the launcher's run(), as installed
QUERY_ARGS = {
    "auction_skip": 123,
    "window_size_sec": 10,
    "window_period_sec": 5,
    "fanout": 5,
    "num_max_workers": 5,
    "max_log_events": 100000,
    "occasional_delay_sec": 3,
    "max_auction_waiting_time": 600,
}

@attrs.frozen
class Query:
    """One of Beam's Nexmark queries, and how the test runs it."""

    number: int
    # Beam's local runner the output is compared with (see WINNING_BIDS)
    beam_runner: str = "FnApiRunner"
    # None: compare with Beam. Else why Beam's local runners cannot serve as its oracle in
    # batch; the output is then checked against plain Python over the file (queries 3 and 12)
    no_oracle: str | None = None
    # how sparkbeam fails on it, where it does
    gap: Gap | None = None
    # the label of the step whose output is compared, when not the query's last
    compared_step: str | None = None
    # what of each compared element is compared, when not all of it (a FlatMap's function)
    compared_part: Callable[[Any], Iterable[Any]] | None = None


# FnApiRunner merges windows through their coder and cannot encode WinningBids'
# AuctionOrBidWindow there ("Cannot convert _OpaqueWindow to ... _IntervalWindowBase"); Beam's
# BundleBasedDirectRunner, its other local runner, runs it.
WINNING_BIDS = "BundleBasedDirectRunner"

QUERIES = (
    Query(0),
    Query(1),
    Query(2),
    # JoinFn, a stateful DoFn (BagState, ReadModifyWriteState, a timer), joins a CoGroupByKey's
    # output under Repeatedly(AfterCount(30)) in the global window.
    Query(3, no_oracle=(
        "Beam's local runners output nothing: no person has 30 events, so the count trigger "
        "never fires, and Beam Python drops what is pending when the global window ends, "
        "where sparkbeam emits it (README, 'Garbage collection')"
    )),
    Query(4, beam_runner=WINNING_BIDS),
    Query(5),
    Query(6, gap=Gap(
        TypeError,
        r"bad operand type for unary -: 'Timestamp'",
        "Beam's query 6 fails on every runner, Beam's own included: MovingMeanSellingPriceFn sorts by "
        "-bid.date_time, and Beam's Timestamp has no unary minus",
    )),
    Query(7),
    Query(8),
    Query(9, beam_runner=WINNING_BIDS),
    # WriteIndexDoFn writes nowhere (Beam leaves open_writable_gcs_file empty) and yields
    # nothing; what its log files would hold is compared: the events grouped per shard,
    # window and pane. Without the shard: ShardEventsDoFn numbers it by hash(event), an
    # object's address, which differs from run to run on any runner.
    Query(10, compared_step="query10_gbk", compared_part=lambda shard_and_events: shard_and_events[1]),
    Query(11),
    Query(12, no_oracle=(
        "Beam's local runners cannot run query 12 in batch (its comment says so): its "
        "AfterProcessingTime trigger finds no clock there"
    )),
)


def query_module(number: int) -> types.ModuleType:
    return importlib.import_module(f"{NEXMARK}.queries.query{number}")


def read_events(pipeline: Any, path: str) -> Any:
    """The launcher's own batch input, its ``read_from_file`` called as it calls it."""
    from apache_beam.testing.benchmarks.nexmark import nexmark_util
    from apache_beam.testing.benchmarks.nexmark.nexmark_launcher import NexmarkLauncher

    nexmark_util.setup_coder()
    launcher = types.SimpleNamespace(pipeline=pipeline, args=types.SimpleNamespace(input=path))
    return NexmarkLauncher.read_from_file(launcher)


def comparable(value: Any) -> Any:
    """A query's output element as a value that compares by content: a Nexmark model
    object becomes (its class name, its fields), recursively."""
    if type(value).__name__ == "Timestamp" and hasattr(value, "micros"):
        # Beam's and sparkbeam's Timestamp classes (a query run by import swap has the
        # latter) compare by their microseconds
        return ("Timestamp", value.micros)
    if isinstance(value, tuple):
        return tuple(comparable(item) for item in value)
    if isinstance(value, list):
        return [comparable(item) for item in value]
    if isinstance(value, dict):
        return {key: comparable(item) for key, item in value.items()}
    if type(value).__module__.startswith((NEXMARK, SWAPPED_PREFIX)):
        return (type(value).__name__, tuple(sorted((name, comparable(field)) for name, field in vars(value).items())))
    return value


def load_query(query: Query, pipeline: Any, path: str) -> Any:
    """The query applied to the events of the file at ``path``, its output (or its
    ``compared_step``'s) made comparable."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import TypeOptions

    # As the launcher does: queries 10 and 11 use triggers Beam calls unsafe.
    pipeline.options.view_as(TypeOptions).allow_unsafe_triggers = True
    output = query_module(query.number).load(read_events(pipeline, path), QUERY_ARGS, pipeline.options)
    if query.compared_step is not None:
        output = step_output(pipeline, query.compared_step)
    if query.compared_part is not None:
        output = output | "NexmarkComparedPart" >> beam.FlatMap(query.compared_part)
    return output | "NexmarkComparable" >> beam.Map(lambda element: canonical(comparable(element)))


def step_output(pipeline: Any, label: str) -> Any:
    """The main output of the applied transform labelled ``label`` (a full label's last part)."""
    from apache_beam.pipeline import PipelineVisitor

    found = []

    class Finder(PipelineVisitor):
        def visit_transform(self, node: Any) -> None:
            if node.full_label.rsplit("/", 1)[-1] == label:
                found.append(node.outputs[None])

    pipeline.visit(Finder())
    if len(found) != 1:
        msg = f"expected one step labelled {label!r} in the pipeline, found {len(found)}"
        raise AssertionError(msg)
    return found[0]


def load_swapped_query(query: Query, pipeline: Any, path: str, package: str) -> Any:
    """The query of Nexmark's copy ``package`` (its imports pointed at sparkbeam: run by
    import swap, on sparkbeam's own SDK) applied to the events of the file at ``path``, read
    as the launcher reads them, its output made comparable as ``load_query``'s."""
    import sparkbeam as beam
    from sparkbeam.window import TimestampedValue

    nexmark_util = importlib.import_module(f"{package}.nexmark_util")
    nexmark_util.setup_coder()
    events = (
        pipeline
        | "reading_from_file" >> beam.io.ReadFromText(path)
        | "deserialization" >> beam.ParDo(nexmark_util.ParseJsonEventFn())
        | "timestamping" >> beam.Map(lambda e: TimestampedValue(e, e.date_time))
    )
    module = importlib.import_module(f"{package}.queries.query{query.number}")
    output = module.load(events, QUERY_ARGS, pipeline.options)
    if query.compared_part is not None:
        output = output | "NexmarkComparedPart" >> beam.FlatMap(query.compared_part)
    return output | "NexmarkComparable" >> beam.Map(lambda element: canonical(comparable(element)))
