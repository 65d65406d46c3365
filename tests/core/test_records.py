"""The records a stage's partitions exchange: typed, compact when pickled, laid out as documented."""

from __future__ import annotations

import pickle

import pytest

from sparkbeam.runners.core.grouping.grouping import build_grouping_engine
from sparkbeam.runners.core.grouping.grouping_step import group_partition
from sparkbeam.runners.core.grouping.records import KeyedState, Pane, Parked, ReleaseAt, Summary
from sparkbeam.runners.core.lowering.step_values import StageSummary, StepParams
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.window import FixedWindows, IntervalWindow
from sparkbeam.windowing import Windowing

S = 1_000_000
ELEMENT = WindowedValue("v", 1 * S, (IntervalWindow(0, 10),))


@pytest.mark.parametrize(
    "record",
    [KeyedState({"w": 1}), Pane(ELEMENT), Parked(ELEMENT), Summary(StageSummary(elements_in=3)), ReleaseAt(((4, 5 * S),))],
    ids=lambda record: type(record).__name__,
)
def test_a_record_pickles_as_its_class_and_fields_without_field_names(record):
    data = pickle.dumps(record)
    assert pickle.loads(data) == record
    (name,) = (field for field in ("state", "element", "summary", "watermarks") if hasattr(record, field))
    assert name.encode() not in data


def test_a_grouping_partition_yields_state_by_key_then_panes_then_its_summary():
    engine = build_grouping_engine(Windowing(FixedWindows(10)))
    params = StepParams(
        step=0, old_input_watermark=0, new_input_watermark=10 * S, output_watermark=0, now=0, batch=False
    )
    out = list(group_partition(engine, [("k", ELEMENT), ("other", WindowedValue("w", 12 * S, (IntervalWindow(10, 20),)))], params))
    assert [(where, type(record)) for where, record in out] == [
        ("other", KeyedState),
        (None, Pane),
        (None, Summary),
    ]
    assert out[1][1].element.value == ("k", ["v"])
    assert out[2][1].summary.elements_in == 2
    # The kept state goes back in as it came out, with the next step's elements.
    later = StepParams(
        step=1, old_input_watermark=10 * S, new_input_watermark=20 * S, output_watermark=10 * S, now=0, batch=False
    )
    again = list(group_partition(engine, [out[0]], later))
    assert [record.element.value for _, record in again if type(record) is Pane] == [("other", ["w"])]


def test_a_key_state_pickles_as_plain_rows_and_shares_its_windows_once_unpickled():
    from sparkbeam.runners.core.grouping.window_state import KeyState, WindowState
    from sparkbeam.window import GlobalWindow

    window = IntervalWindow(0, 60)
    first = KeyState({window: WindowState(contents=(2, 5), pending=2, hold=60 * S - 1), GlobalWindow(): WindowState(index=3)})
    data = pickle.dumps(first)
    # No window state object and no interval window object in the pickle: rows of plain fields.
    assert b"WindowState" not in data and b"IntervalWindow" not in data
    back = pickle.loads(data)
    assert back == first
    # Each key's state, unpickled on its own, uses the same window object.
    other = pickle.loads(pickle.dumps(KeyState({IntervalWindow(0, 60): WindowState(pending=1)})))
    assert next(iter(other.windows)) is next(iter(back.windows))
