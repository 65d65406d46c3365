"""The engine against Beam Python's own ``GeneralTriggerDriver`` on random cases.

Random window fns, event-time trigger trees, accumulation modes and timestamp combiners;
random bundles and watermark moves; after each action both executors fire their due
timers, and their panes must agree (window, values, timestamp, pane info). Allowed
lateness is large, because Beam Python has no garbage collection (DESIGN §3 adds Java's).

Two documented differences are left out:

- Beam fires a window once per due *timer*, so a trigger tree with several end-of-window
  timers (``AfterAny(DefaultTrigger(), AfterWatermark())``) emits empty duplicate panes;
  the engine evaluates a window once per time domain per firing round. Seeds where Beam
  fires a window twice in one round are counted and skipped.
- Beam Python merges a new session with a closed one (its trigger finished) and the merged
  session stays closed, losing what it held; the engine follows Beam Java, where a closed
  window takes no part in merging (README, "Where sparkbeam deliberately differs"). A
  seed stops being compared at the first bundle with a session overlapping a closed one.
"""

from __future__ import annotations

import collections
import random

import apache_beam.transforms.trigger as bt
from apache_beam.runners.direct import clock as beam_clock
from apache_beam.transforms import window as beam_window
from apache_beam.transforms.core import Windowing as BeamWindowing
from apache_beam.utils.timestamp import MIN_TIMESTAMP as BEAM_MIN

from sparkbeam import trigger as st
from sparkbeam import window as sw
from sparkbeam.runners.core.grouping.grouping import GroupingStats, build_grouping_engine
from sparkbeam.utils.timestamp import MIN_TIMESTAMP
from sparkbeam.utils.windowed_value import WindowedValue
from sparkbeam.windowing import Windowing

SEEDS = range(400)
LATENESS = 10_000  # seconds: no window is ever collected or late-dropped in these runs


def random_trigger(rng: random.Random, depth: int = 0) -> st.TriggerFn:
    leaves = ["count", "watermark", "default", "always"]
    kind = rng.choice([*leaves, "repeatedly", "any", "all", "each"] if depth < 2 else leaves)
    if kind == "count":
        return st.AfterCount(rng.randint(1, 3))
    if kind == "default":
        return st.DefaultTrigger()
    if kind == "always":
        return st.Always()
    if kind == "watermark":
        early = random_trigger(rng, depth + 1) if rng.random() < 0.5 else None
        late = random_trigger(rng, depth + 1) if rng.random() < 0.5 else None
        return st.AfterWatermark(early=early, late=late)
    if kind == "repeatedly":
        return st.Repeatedly(random_trigger(rng, depth + 1))
    subtriggers = [random_trigger(rng, depth + 1) for _ in range(rng.randint(1, 3))]
    return {"any": st.AfterAny, "all": st.AfterAll, "each": st.AfterEach}[kind](*subtriggers)


def to_beam(spec: st.TriggerFn) -> bt.TriggerFn:
    if isinstance(spec, st.AfterCount):
        return bt.AfterCount(spec.count)
    if isinstance(spec, st.DefaultTrigger):
        return bt.DefaultTrigger()
    if isinstance(spec, st.Always):
        return bt.Always()
    if isinstance(spec, st.AfterWatermark):
        return bt.AfterWatermark(
            early=to_beam(spec.early) if spec.early else None,
            late=to_beam(spec.late) if spec.late else None,
        )
    if isinstance(spec, st.Repeatedly):
        return bt.Repeatedly(to_beam(spec.underlying))
    beam_type = {st.AfterAny: bt.AfterAny, st.AfterAll: bt.AfterAll, st.AfterEach: bt.AfterEach}
    return beam_type[type(spec)](*(to_beam(sub) for sub in spec.triggers))


WINDOW_FNS = {
    "fixed": (lambda: sw.FixedWindows(10), lambda: beam_window.FixedWindows(10)),
    "sliding": (lambda: sw.SlidingWindows(10, 5), lambda: beam_window.SlidingWindows(10, 5)),
    "sessions": (lambda: sw.Sessions(10), lambda: beam_window.Sessions(10)),
    "global": (sw.GlobalWindows, beam_window.GlobalWindows),
}


def pane_key(window, values, timestamp, pane) -> tuple:
    # Beam's and sparkbeam's MIN_TIMESTAMP differ (int64 min vs Java's bound): clamp starts.
    return (
        max(int(window.start), -(10**12)),
        int(window.max_timestamp()),
        tuple(sorted(values)),
        int(timestamp),
        pane.index,
        pane.nonspeculative_index,
        int(pane.timing),
        pane.is_last,
    )


def overlaps_a_closed_window(state, elements) -> bool:
    closed = [window for window, window_state in state.windows.items() if window_state.closed]
    return any(
        window.start < other.end and other.start < window.end
        for element in elements
        for window in element.windows
        for other in closed
    )


def play(seed: int) -> str | None:
    """None when both agree, "beam-duplicate" or "closed-merge" for the documented
    differences, else a diff."""
    rng = random.Random(seed)
    window_kind = rng.choice(sorted(WINDOW_FNS))
    ours_fn, beams_fn = (make() for make in WINDOW_FNS[window_kind])
    trigger = random_trigger(rng)
    accumulation = rng.choice(["DISCARDING", "ACCUMULATING"])
    combiner = rng.choice(["OUTPUT_AT_EOW", "OUTPUT_AT_EARLIEST", "OUTPUT_AT_LATEST"])

    beam_driver = bt.GeneralTriggerDriver(
        BeamWindowing(
            beams_fn,
            to_beam(trigger),
            getattr(bt.AccumulationMode, accumulation),
            getattr(beam_window.TimestampCombiner, combiner),
            LATENESS,
        ),
        beam_clock.TestClock(),
    )
    beam_state = bt.InMemoryUnmergedState()
    engine = build_grouping_engine(
        Windowing(
            ours_fn,
            trigger,
            st.AccumulationMode[accumulation],
            sw.TimestampCombiner[combiner],
            LATENESS,
        ),
        overlapping_window_rule=False,
    )
    state, stats = engine.new_key_state(), GroupingStats()
    beam_watermark, watermark, seconds = BEAM_MIN, MIN_TIMESTAMP.micros, -1
    history = []
    for _ in range(rng.randint(1, 8)):
        beam_out, ours_out = [], []
        if rng.random() < 0.6:
            stamps = [rng.randint(0, 60) for _ in range(rng.randint(1, 4))]
            history.append(("input", stamps))
            elements = [
                WindowedValue(t, t * 1_000_000, tuple(ours_fn.assign(sw.WindowFn.AssignContext(t, t))))
                for t in stamps
            ]
            if ours_fn.is_merging() and overlaps_a_closed_window(state, elements):
                return "closed-merge"
            bundle = [
                beam_window.WindowedValue(t, t, beams_fn.assign(beam_window.WindowFn.AssignContext(t, t)))
                for t in stamps
            ]
            for wv in beam_driver.process_elements(beam_state, bundle, beam_watermark, beam_watermark):
                beam_out.append(pane_key(wv.windows[0], wv.value, wv.timestamp, wv.pane_info))
            panes = engine.add_elements(
                state, "k", elements, input_watermark=watermark, output_watermark=watermark, now=0, stats=stats
            )
            ours_out += [pane_key(p.windows[0], p.value[1], p.timestamp, p.pane_info) for p in panes]
        else:
            seconds += rng.randint(1, 30)
            history.append(("watermark", seconds))
            beam_watermark, watermark = seconds, seconds * 1_000_000
        fired_per_window: collections.Counter = collections.Counter()
        due = beam_state.get_and_clear_timers(beam_watermark)
        while due:
            for timer_window, (name, domain, timestamp, _tag) in due:
                for wv in beam_driver.process_timer(timer_window, name, domain, timestamp, beam_state):
                    beam_out.append(pane_key(wv.windows[0], wv.value, wv.timestamp, wv.pane_info))
                    fired_per_window[wv.windows[0]] += 1
            due = beam_state.get_and_clear_timers(beam_watermark)
        if fired_per_window and max(fired_per_window.values()) > 1:
            return "beam-duplicate"
        panes = engine.fire_timers(state, "k", input_watermark=watermark, now=0, stats=stats)
        ours_out += [pane_key(p.windows[0], p.value[1], p.timestamp, p.pane_info) for p in panes]
        if collections.Counter(beam_out) != collections.Counter(ours_out):
            return (
                f"seed {seed}: {window_kind} {trigger!r} {accumulation} {combiner}\n"
                f"  steps {history}\n  beam {sorted(beam_out)}\n  ours {sorted(ours_out)}"
            )
    return None


def test_engine_agrees_with_beams_trigger_driver_on_random_cases():
    outcomes = [play(seed) for seed in SEEDS]
    differences = [o for o in outcomes if o not in (None, "beam-duplicate", "closed-merge")]
    assert not differences, "\n".join(differences[:5])
    # The documented differences must stay rare, or the comparison proves little.
    assert outcomes.count("beam-duplicate") < len(SEEDS) // 10
    assert outcomes.count("closed-merge") < len(SEEDS) // 10
