"""Keys group as Beam groups them: by their deterministic encoding, where == says otherwise.

Oracle pairs against Beam's local runners for the keys where Python's == and hash differ
from Beam's encoding (NaNs, -0.0, 1 / 1.0 / True, lists, dicts, sets, tuples holding them),
on every grouping path: a batch GroupByKey and lifted CombinePerKey, merging windows (the
general engine), a stream, a stateful DoFn. Each output names its key by repr and type, so
that NaNs compare.
"""

from __future__ import annotations

import math

import pytest

import sparkbeam
from sparkbeam.runners.core.lowering.errors import TransformError
from tests.oracle import assert_same_as_beam, run_beam, run_sparkbeam

pytestmark = pytest.mark.spark


def awkward_keys() -> list:
    """Keys on which == and Beam's encoding disagree, and a few on which they agree."""
    inf = float("inf")
    return [
        float("nan"), math.nan, inf - inf, -(inf - inf),  # two NaN bit patterns
        0.0, -0.0, 1, 1.0, True, 2, "a", b"a", None,
        (float("nan"), "x"), (math.nan, "x"), (1, "x"), (1.0, "x"),
        [1, 2], [1, 2], [1.0, 2], [[float("nan")]], [[math.nan]],
        {"a": 1, "b": [0.0]}, {"b": [0.0], "a": 1}, {"a": 1, "b": [-0.0]},
        {1, 2}, {2, 1}, {1.5},
    ]


def keyed(ns, p, keys):
    return (
        p
        | "Create" >> ns.beam.Create(list(enumerate(keys)))
        | "Key" >> ns.beam.Map(lambda e: (keys[e[0]], e[0]))  # each key object as built here
    )


def named(key) -> str:
    return f"{type(key).__name__} {key!r}"


def test_group_by_key_groups_as_beams_encoding_does(spark):
    def build(ns, p):
        return keyed(ns, p, awkward_keys()) | ns.beam.GroupByKey() | ns.beam.MapTuple(lambda k, vs: (named(k), sorted(vs)))

    groups = assert_same_as_beam(build)
    found = {value[0]: value[1] for value, *_ in groups}
    assert found["float nan"] in (("<list>", (0, 1, 3)), ("<list>", (2,)))
    assert found["float -0.0"] == ("<list>", (5,)) and found["bool True"] == ("<list>", (8,))
    assert found["list [1, 2]"] == ("<list>", (17, 18))


def test_combine_per_key_groups_as_beams_group_by_key_then_combine_values(spark):
    """Beam defines CombinePerKey as GroupByKey then CombineValues; its local runner's
    lifted combine merges keys that are == within a bundle first (and refuses lists), so
    Beam's side is written unlifted."""

    def build(ns, p):
        pairs = keyed(ns, p, awkward_keys())
        if ns.beam is sparkbeam:
            combined = pairs | ns.beam.CombinePerKey(sum)
        else:
            combined = pairs | ns.beam.GroupByKey() | ns.beam.CombineValues(sum)
        return combined | ns.beam.MapTuple(lambda k, total: (named(k), total))

    assert_same_as_beam(build)


def test_merging_windows_group_keys_as_beam_does(spark):
    """Sessions take the general grouping engine, in batch."""

    def build(ns, p):
        return (
            keyed(ns, p, awkward_keys())
            | ns.beam.Map(lambda kv: ns.TimestampedValue(kv, kv[1] % 3))
            | ns.beam.WindowInto(ns.window.Sessions(10))
            | ns.beam.GroupByKey()
            | ns.beam.MapTuple(lambda k, vs: (named(k), sorted(vs)))
        )

    assert_same_as_beam(build)


def test_a_stream_groups_keys_as_beam_does(spark):
    """Beam's streaming direct runner groups a dict key by its items in insertion order
    (its key coder there is not made deterministic), where its batch runner and sparkbeam
    sort them: the dicts whose items come in another order are left out."""

    def build(ns, p):
        keys = [key for key in awkward_keys() if key != {"b": [0.0], "a": 1}]
        stream = (
            ns.TestStream()
            .add_elements([ns.TimestampedValue(i, 1) for i in range(len(keys) // 2)])
            .add_elements([ns.TimestampedValue(i, 2) for i in range(len(keys) // 2, len(keys))])
            .advance_watermark_to_infinity()
        )
        return (
            p
            | stream
            | ns.beam.Map(lambda i: (keys[i], i))
            | ns.beam.GroupByKey()
            | ns.beam.MapTuple(lambda k, vs: (named(k), sorted(vs)))
        )

    assert_same_as_beam(build, streaming=True)


def test_a_stateful_dofn_keeps_state_per_key_as_beams_grouping_groups_keys(spark):
    """A stateful DoFn's state is per key as a GroupByKey groups keys, and it sees the key as
    given. Beam's own stateful DoFns are no oracle here: its SDK harness keeps their state in
    a dict keyed by the key itself (``FnApiUserStateContext``), after its runner grouped the
    elements by their encoded keys, so a list key fails there and NaNs, -0.0 or True read
    state that is not theirs. The counts are compared with Beam's GroupByKey's."""

    def build(ns, p):
        pairs = keyed(ns, p, awkward_keys())
        if ns.beam is not sparkbeam:
            return pairs | ns.beam.GroupByKey() | ns.beam.MapTuple(lambda k, vs: (named(k), len(vs)))
        us, coders = ns.beam.transforms.userstate, ns.beam.coders

        class CountPerKey(ns.beam.DoFn):
            COUNT = us.ReadModifyWriteStateSpec("count", coders.VarIntCoder())
            END = us.TimerSpec("end", us.TimeDomain.WATERMARK)

            def process(self, element, count=ns.beam.DoFn.StateParam(COUNT), end=ns.beam.DoFn.TimerParam(END)):  # noqa: B008
                count.write((count.read() or 0) + 1)
                end.set(ns.beam.transforms.window.GlobalWindow().max_timestamp())

            @us.on_timer(END)
            def emit(self, key=ns.beam.DoFn.KeyParam, count=ns.beam.DoFn.StateParam(COUNT)):  # noqa: B008
                yield named(key), count.read()

        return pairs | ns.beam.ParDo(CountPerKey())

    counts = sorted(row[0] for row in run_sparkbeam(build).elements())
    assert counts == sorted(row[0] for row in run_beam(build).elements())
    assert ("list [1, 2]", 2) in counts and counts.count(("float nan", 3)) == 1


class Unhashable:
    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other):
        return isinstance(other, Unhashable)


@pytest.mark.parametrize(
    ("key", "kind", "problem"),
    [
        (Unhashable(), "Unhashable", "is unhashable"),
        ([Unhashable()], "list", "is unhashable"),
        ({"a": 1, 2: 3}, "dict", "cannot sort the keys of a dict"),
    ],
)
def test_a_key_neither_encoding_nor_equality_can_group_fails_naming_the_grouping_and_the_key_type(spark, key, kind, problem):
    p = sparkbeam.Pipeline()
    p | sparkbeam.Create([0]) | sparkbeam.Map(lambda _: (key, 1)) | "Group" >> sparkbeam.GroupByKey()
    with pytest.raises(TransformError) as failure:
        p.run()
    text = str(failure.value)
    assert "'Group'" in text and f"of type {kind}" in text and problem in text
