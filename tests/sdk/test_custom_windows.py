"""Window classes of the user's own: subclasses of IntervalWindow and BoundedWindow that
carry attributes, compared and hashed as Beam compares them, through grouping, merging,
shuffles and pickling."""

from __future__ import annotations

import copy
import pickle

import pytest

from sparkbeam.transforms.window import BoundedWindow, GlobalWindow, IntervalWindow, Timestamp
from tests.oracle import assert_same_as_beam, run_beam, run_sparkbeam


class AuctionWindow(IntervalWindow):
    """As Beam users write it (Nexmark's auction windows): bounds plus data of its own."""

    def __init__(self, start, end, auction=None, is_auction_window=False):
        super().__init__(start, end)
        self.auction = auction
        self.is_auction_window = is_auction_window


class TaggedWindow(IntervalWindow):
    """A subclass that is compared by its tag too, because it says so."""

    def __init__(self, start, end, tag):
        super().__init__(start, end)
        self.tag = tag

    def __eq__(self, other):
        return type(other) is TaggedWindow and (self.start, self.end, self.tag) == (other.start, other.end, other.tag)

    def __hash__(self):
        return hash((self.start.micros, self.end.micros, self.tag))


class SlottedWindow(IntervalWindow):
    __slots__ = ("shard",)

    def __init__(self, start, end, shard):
        super().__init__(start, end)
        self.shard = shard


class Until(BoundedWindow):
    """A BoundedWindow of the user's own, as Beam asks: an end, __eq__ and __hash__."""

    def __init__(self, end, name):
        super().__init__(end)
        self.name = name

    def __eq__(self, other):
        return type(other) is Until and (self.end, self.name) == (other.end, other.name)

    def __hash__(self):
        return hash((self.end.micros, self.name))


def test_a_subclass_sets_its_own_attributes_and_compares_by_bounds_and_class_as_beam():
    from apache_beam.transforms.window import IntervalWindow as BeamIntervalWindow

    class BeamAuctionWindow(BeamIntervalWindow):
        def __init__(self, start, end, auction=None):
            super().__init__(start, end)
            self.auction = auction

    ours = [AuctionWindow(0, 10, "a"), AuctionWindow(0, 10, "b"), IntervalWindow(0, 10), AuctionWindow(0, 11, "a")]
    beams = [BeamAuctionWindow(0, 10, "a"), BeamAuctionWindow(0, 10, "b"), BeamIntervalWindow(0, 10), BeamAuctionWindow(0, 11, "a")]
    for i in range(len(ours)):
        for j in range(len(ours)):
            assert (ours[i] == ours[j]) == (beams[i] == beams[j]), (i, j)
            assert (hash(ours[i]) == hash(ours[j])) == (hash(beams[i]) == hash(beams[j])), (i, j)
    assert hash(IntervalWindow(0, 10)) == hash(BeamIntervalWindow(0, 10))  # hash((start, end)) in µs
    assert TaggedWindow(0, 10, "x") != TaggedWindow(0, 10, "y")
    assert len({TaggedWindow(0, 10, "x"), TaggedWindow(0, 10, "x")}) == 1


def test_bounds_stay_immutable_and_plain_interval_windows_take_no_attributes():
    window = AuctionWindow(0, 10, "a")
    window.auction = "b"  # the subclass's own data may change
    with pytest.raises(AttributeError, match="cannot be changed"):
        window.start = Timestamp(5)
    with pytest.raises(AttributeError):
        IntervalWindow(0, 10).auction = "a"
    with pytest.raises(ValueError, match="must be after its start"):
        IntervalWindow(10, 10)


@pytest.mark.parametrize("window", [IntervalWindow(0, 10), AuctionWindow(0, 10, "a", True), TaggedWindow(5, 7, "t"), SlottedWindow(1, 2, 3)])
def test_windows_pickle_and_copy_with_their_attributes(window):
    for clone in (pickle.loads(pickle.dumps(window)), copy.copy(window), copy.deepcopy(window)):
        assert type(clone) is type(window)
        assert clone == window and hash(clone) == hash(window)
        assert (clone.start, clone.end) == (window.start, window.end)
        assert getattr(clone, "__dict__", {}) == getattr(window, "__dict__", {})
    if isinstance(window, SlottedWindow):
        assert pickle.loads(pickle.dumps(window)).shard == 3


def test_a_bounded_window_subclass_follows_beams_contract():
    window = Until(10, "a")
    assert window.max_timestamp() == Timestamp(micros=9_999_999)
    assert pickle.loads(pickle.dumps(window)) == window
    assert sorted([GlobalWindow(), window, IntervalWindow(0, 5)]) == [IntervalWindow(0, 5), window, GlobalWindow()]
    with pytest.raises(NotImplementedError, match="no start"):
        _ = window.start

    class NoEquality(BoundedWindow):
        pass

    with pytest.raises(NotImplementedError, match="must define __hash__"):
        hash(NoEquality(3))


# -- through pipelines, against Beam -----------------------------------------------------------

BIDS = [("car", 1, 1.0), ("car", 2, 4.0), ("boat", 3, 5.0), ("car", 4, 30.0), ("boat", 5, 9.0), ("car", 6, 12.0)]


def auction_windows(ns):
    """A merging window fn of AuctionWindows: each bid opens [t, t+5) for its auction;
    overlapping windows of the same auction merge (like sessions per auction)."""
    window = ns.window

    class Auction(window.IntervalWindow):
        def __init__(self, start, end, auction=None):
            super().__init__(start, end)
            self.auction = auction

        def __eq__(self, other):
            return type(other) is type(self) and (self.start, self.end, self.auction) == (other.start, other.end, other.auction)

        def __hash__(self):
            return hash((self.start.micros, self.end.micros, self.auction))

    class AuctionWindows(window.WindowFn):
        def assign(self, context):
            return [Auction(context.timestamp, context.timestamp + 5, context.element[0])]

        def merge(self, merge_context):
            by_auction = {}
            for w in merge_context.windows:
                by_auction.setdefault(w.auction, []).append(w)
            for auction, windows in by_auction.items():
                run = []
                for w in sorted(windows, key=lambda w: w.start):
                    if run and w.start < max(r.end for r in run):
                        run.append(w)
                        continue
                    if len(run) > 1:
                        merge_context.merge(run, Auction(run[0].start, max(r.end for r in run), auction))
                    run = [w]
                if len(run) > 1:
                    merge_context.merge(run, Auction(run[0].start, max(r.end for r in run), auction))

        def get_window_coder(self):
            return window_coder(ns, Auction, "auction")

    return AuctionWindows()


def window_coder(ns, window_class, attribute):
    """A deterministic coder for windows with one attribute (Beam requires one; sparkbeam
    pickles windows between stages and does not call it)."""

    class WindowCoder(ns.beam.coders.Coder):
        def encode(self, w):
            return pickle.dumps((w.start.micros, w.end.micros, getattr(w, attribute, None)))

        def decode(self, encoded):
            start, end, value = pickle.loads(encoded)
            window = window_class(ns.window.Timestamp(micros=start), ns.window.Timestamp(micros=end))
            setattr(window, attribute, value)
            return window

        def is_deterministic(self):
            return True

    return WindowCoder()


def auction_totals(ns, p):
    beam = ns.beam
    return (
        p
        | beam.Create(BIDS)
        | beam.Map(lambda bid: ns.TimestampedValue(bid, bid[2]))
        | beam.WindowInto(auction_windows(ns))
        | beam.Map(lambda bid: ("all", bid[1]))  # one key: windows of both auctions in one key's state
        | beam.GroupByKey()
        | beam.MapTuple(lambda key, amounts, w=beam.DoFn.WindowParam: (w.auction, type(w).__name__, float(w.start), float(w.end), sorted(amounts)))
        # Beam's portable runner hands later steps opaque windows for a custom window coder:
        # compare the windows' contents, carried in the values, in the global window.
        | "Rewindow" >> beam.WindowInto(ns.window.GlobalWindows())
    )


@pytest.mark.spark
def test_a_merging_window_fn_of_subclassed_windows_matches_beam_in_batch(spark):
    # Beam's FnApiRunner merges windows of a custom coder as opaque bytes, which a window
    # fn cannot merge by their attributes; Beam's BundleBasedDirectRunner can, so it is the
    # reference (the panes compared are the re-windowed ones, UNKNOWN in both).
    expected = run_beam(auction_totals, streaming=True)
    result = run_sparkbeam(auction_totals)
    assert result == expected
    assert {value[0] for value, *_ in result} == {"car", "boat"}


@pytest.mark.spark
def test_a_merging_window_fn_of_subclassed_windows_matches_beam_in_streaming(spark):
    assert_same_as_beam(auction_totals, streaming=True)


@pytest.mark.spark
def test_subclassed_windows_group_by_class_and_bounds(spark):
    # Windows group by Python equality (sparkbeam pickles windows; Beam's runner groups by
    # their coder's bytes, the same thing when the coder agrees with __eq__): two
    # subclass windows with the same bounds are one window whatever their label, and a
    # plain IntervalWindow with those bounds is another.
    from tests.oracle import _sparkbeam_ns

    ns = _sparkbeam_ns()
    window = ns.window

    class Labelled(window.IntervalWindow):
        def __init__(self, start, end, label=None):
            super().__init__(start, end)
            self.label = label

    class Labelling(window.NonMergingWindowFn):
        def assign(self, context):
            start = int(context.timestamp) // 10 * 10
            label = context.element[1][0]
            if label == "plain":
                return [window.IntervalWindow(start, start + 10)]
            return [Labelled(start, start + 10, label)]

    def build(ns, p):
        return (
            p
            | ns.beam.Create([("x", 1), ("y", 2), ("plain", 3), ("x", 14)])
            | ns.beam.Map(lambda e: ns.TimestampedValue(("k", e), e[1]))
            | ns.beam.WindowInto(Labelling())
            | ns.beam.GroupByKey()
            | ns.beam.MapTuple(lambda k, vs, w=ns.beam.DoFn.WindowParam: (type(w).__name__, float(w.start), sorted(v[1] for v in vs)))
        )

    result = run_sparkbeam(build)
    assert {value for value, *_ in result} == {
        ("Labelled", 0.0, ("<list>", (1, 2))), ("IntervalWindow", 0.0, ("<list>", (3,))), ("Labelled", 10.0, ("<list>", (14,)))
    }


@pytest.mark.spark
@pytest.mark.parametrize("streaming", [False, True])
def test_bounded_window_subclasses_group_and_fire_at_their_end(spark, streaming):
    from tests.oracle import _sparkbeam_ns

    ns = _sparkbeam_ns()

    class ByDeadline(ns.window.NonMergingWindowFn):
        """Each element in the window ending at the next multiple of 10, named by parity."""

        def assign(self, context):
            end = (int(context.timestamp) // 10 + 1) * 10
            return [Until(end, "even" if context.element[1] % 2 == 0 else "odd")]

    def build(ns, p):
        return (
            p
            | ns.beam.Create([("k", 1), ("k", 2), ("k", 3), ("k", 12)])
            | ns.beam.Map(lambda e: ns.TimestampedValue(e, e[1]))
            | ns.beam.WindowInto(ByDeadline())
            | ns.beam.GroupByKey()
            | ns.beam.MapTuple(lambda k, vs, w=ns.beam.DoFn.WindowParam: (w.name, float(w.end), sorted(vs)))
            | "Rewindow" >> ns.beam.WindowInto(ns.window.GlobalWindows())  # the windows have no start
        )

    result = run_sparkbeam(build, streaming=streaming)
    values = sorted(value for value, *_ in result)
    assert values == [("even", 10.0, ("<list>", (2,))), ("even", 20.0, ("<list>", (12,))), ("odd", 10.0, ("<list>", (1, 3)))]
    # Each pane is stamped at its window's max timestamp (end - 1µs), ON_TIME.
    assert sorted(stamp for _, stamp, _, _ in result) == [9999, 9999, 19999]


@pytest.mark.spark
def test_keyed_state_with_subclassed_windows_survives_a_checkpoint_file(spark, tmp_path):
    # Checkpoints write each grouping's keyed state as sealed pickles and read it back
    # (runners/spark/sealed_files.py): windows, with their attributes, are keys.
    import os

    from sparkbeam.runners.core.grouping.window_state import KeyState, WindowState
    from sparkbeam.runners.spark import sealed_files
    from sparkbeam.runners.spark.sealing import Sealer

    windows = {AuctionWindow(0, 10, "car", True): WindowState(contents=[1, 2], pending=True), SlottedWindow(5, 15, 3): WindowState(hold=7)}
    path = str(tmp_path / "state")
    sealer = Sealer(os.urandom(32), scope="test")
    sealed_files.save_records(spark.sparkContext.parallelize([("key", KeyState(dict(windows)))], 1), path, sealer, "state")
    ((key, restored),) = sealed_files.read_records(spark.sparkContext, path, sealer, "state").collect()
    assert key == "key" and set(restored.windows) == set(windows)
    for window, state in restored.windows.items():
        original = next(w for w in windows if w == window)
        assert type(window) is type(original) and getattr(window, "__dict__", {}) == getattr(original, "__dict__", {})
        assert state.contents == windows[original].contents and state.hold == windows[original].hold
    assert next(w for w in restored.windows if isinstance(w, SlottedWindow)).shard == 3
