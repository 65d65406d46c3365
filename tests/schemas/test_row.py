"""``Row`` behaves as Beam's Row: side by side with ``apache_beam.pvalue.Row``, no Spark."""

from __future__ import annotations

import pickle
import subprocess
import sys
import typing

import pytest
from apache_beam.pvalue import Row as BeamRow

import sparkbeam
from sparkbeam import Row


class Point(typing.NamedTuple):
    x: int
    y: int


def both(**fields):
    return Row(**fields), BeamRow(**fields)


def test_row_is_exported_where_beam_has_it():
    assert sparkbeam.Row is Row
    assert sparkbeam.pvalue.Row is Row


def test_fields_are_attributes_in_keyword_order():
    ours, beams = both(name="a", count=2, ratio=None)
    assert (ours.name, ours.count, ours.ratio) == (beams.name, beams.count, beams.ratio)
    assert list(ours) == list(beams) == ["a", 2, None]
    assert ours.as_dict() == beams.as_dict() == {"name": "a", "count": 2, "ratio": None}
    assert list(ours.as_dict()) == list(beams.as_dict())
    assert ours._asdict() == beams._asdict()


@pytest.mark.parametrize("fields", [{}, {"a": 1}, {"s": "x", "f": 1.5, "xs": [1, None], "d": {"k": b"v"}}])
def test_repr_is_beams(fields):
    assert repr(Row(**fields)) == repr(BeamRow(**fields))
    assert repr(Row(outer=Row(**fields))) == repr(BeamRow(outer=BeamRow(**fields)))


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"a": 1, "b": 2}, {"a": 1, "b": 2}),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        ({"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}),
        ({"a": 1}, {"a": 2}),
        ({}, {}),
        ({"a": None}, {"a": None}),
    ],
    ids=["same", "other-order", "extra-field", "other-value", "empty", "none"],
)
def test_equality_is_beams(left, right):
    expected = BeamRow(**left) == BeamRow(**right)
    assert (Row(**left) == Row(**right)) is expected
    assert (Row(**left) != Row(**right)) is (not expected)


def test_a_row_equals_only_rows_as_in_beam():
    ours, beams = both(x=1, y=2)
    for other in [(1, 2), {"x": 1, "y": 2}, Point(1, 2), [1, 2]]:
        assert (ours == other) is (beams == other) is False
    assert ours != beams  # Beam's Row and ours are different types


def test_rows_are_hashable_unlike_beams():
    # Deliberate: grouping by a Row key hashes it to a Spark partition.
    assert hash(Row(a=1, b="x")) == hash(Row(a=1, b="x"))
    assert len({Row(a=1), Row(a=1), Row(a=2)}) == 2
    with pytest.raises(TypeError):
        hash(BeamRow(a=1))
    with pytest.raises(TypeError):
        hash(Row(a=[1]))  # an unhashable value makes the Row unhashable


def test_a_row_is_not_a_tuple_as_in_beam():
    ours, beams = both(x=1, y=2)
    for row in (ours, beams):
        with pytest.raises(TypeError):
            row[0]
        with pytest.raises(TypeError):
            len(row)
    x, y = ours
    assert (x, y) == (1, 2)


def test_rows_from_named_tuples():
    point = Point(3, 4)
    assert Row(**point._asdict()) == Row(x=3, y=4)
    assert repr(Row(**point._asdict())) == repr(BeamRow(**point._asdict()))


def test_pickle_round_trip_keeps_order_and_nesting():
    row = Row(b=2, a=Row(inner=[1, 2]), c=None)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        copy = pickle.loads(pickle.dumps(row, protocol))
        assert copy == row
        assert list(copy.as_dict()) == ["b", "a", "c"]


def test_a_pickled_row_loads_in_another_process():
    payload = pickle.dumps([Row(name="a", n=1), Row()])
    code = (
        "import pickle, sys; rows = pickle.loads(sys.stdin.buffer.read()); "
        "print(type(rows[0]).__module__, repr(rows[0]), rows[0].n + 1, repr(rows[1]), sep='|')"
    )
    done = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, check=True)
    assert done.stdout.decode().strip().split("|") == ["sparkbeam.row", "Row(name='a', n=1)", "2", "Row()"]
