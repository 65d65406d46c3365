"""Window classes of the user's own: subclasses of IntervalWindow and BoundedWindow that
carry attributes, compared and hashed as Beam compares them, through grouping, merging,
shuffles and pickling."""

from __future__ import annotations

import copy
import pickle

import pytest

from sparkbeam.transforms.window import BoundedWindow, GlobalWindow, IntervalWindow, Timestamp


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
