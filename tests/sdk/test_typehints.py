# ruff: noqa: UP006, UP045  (typing generics on purpose: Beam converts them, as these tests check)
"""Type hints: Beam's hint language, its relation, and the checks made when a pipeline is
built, each compared with what apache_beam does with the same code."""

from __future__ import annotations

import collections.abc
import typing

import pytest

import sparkbeam
from sparkbeam import typehints as sb_typehints
from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.typehints import (
    KV,
    Any,
    Iterable,
    List,
    Optional,
    Tuple,
    TypeCheckError,
    with_input_types,
    with_output_types,
)
from tests.oracle import _beam_ns, _sparkbeam_ns
from tests.sdk.annotated import ints as annotated_ints
from tests.sdk.annotated import pairs, parse


def both():
    import apache_beam.typehints as beam_typehints

    return [("beam", beam_typehints.typehints), ("sparkbeam", sb_typehints.typehints)]


HINT_PAIRS = [
    # (sub, base) written against a typehints module ``t``
    lambda t: (t.Tuple[str, int], t.KV[t.Any, t.Any]),
    lambda t: (int, t.Tuple[t.Any, t.Any]),
    lambda t: (int, float),
    lambda t: (bool, int),
    lambda t: (float, int),
    lambda t: (t.List[int], t.Iterable[int]),
    lambda t: (t.List[int], t.Iterable[str]),
    lambda t: (t.Tuple[int, str], t.Iterable[t.Any]),
    lambda t: (str, t.Iterable[str]),
    lambda t: (t.Dict[str, int], t.Iterable[str]),
    lambda t: (t.Union[int, str], t.Union[int, str, float]),
    lambda t: (t.Optional[int], int),
    lambda t: (int, t.Optional[int]),
    lambda t: (t.Tuple[int, ...], t.Tuple[int, int]),
    lambda t: (t.Tuple[int, int], t.Tuple[int, ...]),
    lambda t: (t.Iterator[int], t.Iterable[int]),
    lambda t: (t.Set[int], t.Iterable[int]),
    lambda t: (t.Dict[str, t.List[int]], t.Dict[str, t.Iterable[int]]),
    lambda t: (typing.Tuple[str, int], t.KV[str, int]),
    lambda t: (tuple[str, int], t.KV[str, float]),
    lambda t: (list[int], t.List[str]),
    lambda t: (int | None, t.Optional[int]),
    lambda t: (typing.Iterable[int], t.Iterable[int]),
    lambda t: (collections.abc.Iterable[int], t.List[int]),
    lambda t: (t.Any, int),
    lambda t: (str, t.Any),
    lambda t: (type(None), t.Optional[str]),
]


@pytest.mark.parametrize("pair", range(len(HINT_PAIRS)))
def test_consistency_is_beams(pair):
    answers = {name: t.is_consistent_with(*HINT_PAIRS[pair](t)) for name, t in both()}
    assert answers["sparkbeam"] == answers["beam"], HINT_PAIRS[pair](sb_typehints)


@pytest.mark.parametrize(
    "build",
    [
        lambda t: t.KV[str, t.Iterable[int]],
        lambda t: t.Optional[int],
        lambda t: t.Tuple[int, ...],
        lambda t: t.Dict[str, t.List[t.Tuple[str, int]]],
        lambda t: t.Set[bytes],
        lambda t: t.Iterable[t.Any],
        lambda t: t.Union[int, str],
    ],
)
def test_hints_print_as_beams(build):
    reprs = {name: repr(build(t)) for name, t in both()}
    assert reprs["sparkbeam"] == reprs["beam"]


def test_python_generics_are_accepted_as_beam_accepts_them():
    from apache_beam.typehints import native_type_compatibility

    for native in (typing.List[int], list[int], tuple[int, str], typing.Tuple[int, ...], typing.Optional[int],
                   int | None, typing.Iterable[int], typing.Dict[str, int], dict[str, int],
                   typing.Generator[int, None, None], typing.Iterator[str], typing.Set[int], typing.Any):
        ours = sb_typehints.typehints.convert_to_beam_type(native)
        assert repr(ours) == repr(native_type_compatibility.convert_to_beam_type(native)), native


def test_bad_hint_parameters_are_refused():
    with pytest.raises(TypeError, match="must be a non-sequence"):
        List[1]
    with pytest.raises(TypeError, match="two types"):
        KV[int]


# -- checks at construction, against Beam ---------------------------------------------------------


def ints(x: int) -> int:  # a string annotation here (PEP 563): Beam ignores it, and so do we
    return x


CONSTRUCTIONS = {
    "Create of ints then GroupByKey": lambda ns, p: p | ns.beam.Create([1, 2]) | ns.beam.GroupByKey(),
    "Create of pairs then GroupByKey": lambda ns, p: p | ns.beam.Create([("a", 1)]) | ns.beam.GroupByKey(),
    "empty Create": lambda ns, p: p | ns.beam.Create([]) | ns.beam.GroupByKey(),
    "Create of a dict": lambda ns, p: p | ns.beam.Create({"a": 1}) | ns.beam.GroupByKey(),
    "Create of lists": lambda ns, p: p | ns.beam.Create([["a", 1]]) | ns.beam.GroupByKey(),
    "Create of mixed tuples": lambda ns, p: p | ns.beam.Create([("a", 1), ("b", 2, 3)]) | ns.beam.GroupByKey(),
    "Create of pairs with None": lambda ns, p: p | ns.beam.Create([("a", 1), ("b", None)]) | ns.beam.GroupByKey(),
    "declared non-pairs then GroupByKey": lambda ns, p: (
        p | ns.beam.Create(["a"]) | "ToInt" >> ns.beam.Map(len).with_output_types(int) | ns.beam.GroupByKey()
    ),
    "declared pairs then GroupByKey": lambda ns, p: (
        p | ns.beam.Create(["a"]) | ns.beam.Map(lambda x: (x, 1)).with_output_types(typing.Tuple[str, int]) | ns.beam.GroupByKey()
    ),
    "annotated input mismatch": lambda ns, p: p | ns.beam.Create(["a"]) | ns.beam.Map(annotated_ints),
    "annotated output then GroupByKey": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.Map(annotated_ints) | ns.beam.GroupByKey(),
    "annotated pairs then GroupByKey": lambda ns, p: p | ns.beam.Create(["a"]) | ns.beam.Map(parse) | ns.beam.GroupByKey(),
    "string annotations are not read": lambda ns, p: p | ns.beam.Create(["a"]) | ns.beam.Map(ints) | ns.beam.GroupByKey(),
    "annotated DoFn on strings": lambda ns, p: p | ns.beam.Create(["a"]) | ns.beam.ParDo(annotated_dofn(ns)),
    "annotated DoFn output then GroupByKey": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.ParDo(annotated_dofn(ns)) | ns.beam.GroupByKey(),
    "annotated CombineGlobally on strings": lambda ns, p: p | ns.beam.Create(["a"]) | ns.beam.CombineGlobally(annotated_total()),
    "FlatMap of pairs": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.FlatMap(pairs) | ns.beam.GroupByKey(),
    "Map(str) then GroupByKey": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.Map(str) | ns.beam.GroupByKey(),
    "Filter keeps the type": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.Filter(bool) | ns.beam.GroupByKey(),
    "Flatten unions": lambda ns, p: (p | "A" >> ns.beam.Create([1]), p | "B" >> ns.beam.Create([("a", 1)])) | ns.beam.Flatten() | ns.beam.GroupByKey(),
    "WindowInto keeps the type": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.WindowInto(ns.window.FixedWindows(10)) | ns.beam.GroupByKey(),
    "CombinePerKey of pairs": lambda ns, p: p | ns.beam.Create([("a", 1)]) | ns.beam.CombinePerKey(sum) | ns.beam.GroupByKey(),
    "CombinePerKey of ints": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.CombinePerKey(sum),
    "Keys of ints": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.Keys(),
    "KvSwap of pairs": lambda ns, p: p | ns.beam.Create([("a", 1)]) | ns.beam.KvSwap() | ns.beam.GroupByKey(),
    "Count.PerKey of ints": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.combiners.Count.PerKey(),
    "Count.PerElement then GroupByKey": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.combiners.Count.PerElement() | ns.beam.GroupByKey(),
    "Reshuffle keeps the type": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.Reshuffle() | ns.beam.GroupByKey(),
    "Distinct keeps the type": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.Distinct() | ns.beam.GroupByKey(),
    "GroupByKey output into an int Map": lambda ns, p: p | ns.beam.Create([("a", 1)]) | ns.beam.GroupByKey() | ns.beam.Map(annotated_ints),
    "with_input_types on a Map": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.Map(lambda x: x).with_input_types(str),
    "WithKeys then GroupByKey": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.WithKeys(1) | ns.beam.GroupByKey(),
    "ToList then Map of ints": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.combiners.ToList() | ns.beam.Map(annotated_ints),
    "Top.Of then GroupByKey": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.combiners.Top.Of(2) | ns.beam.GroupByKey(),
}


def annotated_dofn(ns):
    """The same annotated DoFn, subclassing the namespace's DoFn."""
    from tests.sdk import annotated

    class Annotated(ns.beam.DoFn):
        process = annotated.IntsToStrings.process

    return Annotated()


def annotated_total():
    from tests.sdk import annotated

    return annotated.total


def construction_fails(ns, build) -> bool:
    p = ns.beam.Pipeline()
    try:
        build(ns, p)
    except Exception as error:  # which exception it is, is asserted
        assert type(error).__name__ == "TypeCheckError", error
        return True
    return False


@pytest.mark.parametrize("case", sorted(CONSTRUCTIONS))
def test_construction_checks_fail_exactly_where_beams_do(case):
    build = CONSTRUCTIONS[case]
    assert construction_fails(_sparkbeam_ns(), build) == construction_fails(_beam_ns(), build)


ELEMENT_TYPES = {
    "Create": lambda ns, p: p | ns.beam.Create([("a", 1), ("b", 2)]),
    "GroupByKey": lambda ns, p: p | ns.beam.Create([("a", 1)]) | ns.beam.GroupByKey(),
    "declared then grouped": lambda ns, p: (
        p | ns.beam.Create(["a"]) | ns.beam.Map(lambda x: (x, 1.0)).with_output_types(typing.Tuple[str, float]) | ns.beam.GroupByKey()
    ),
    "Flatten": lambda ns, p: (p | "A" >> ns.beam.Create([1]), p | "B" >> ns.beam.Create(["a"])) | ns.beam.Flatten(),
    "KvSwap": lambda ns, p: p | ns.beam.Create([("a", 1)]) | ns.beam.KvSwap(),
    "Keys": lambda ns, p: p | ns.beam.Create([("a", 1)]) | ns.beam.Keys(),
    "Count.PerElement": lambda ns, p: p | ns.beam.Create(["a"]) | ns.beam.combiners.Count.PerElement(),
    "annotated FlatMap": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.FlatMap(pairs),
    "Map(str)": lambda ns, p: p | ns.beam.Create([1]) | ns.beam.Map(str),
}


@pytest.mark.parametrize("case", sorted(ELEMENT_TYPES))
def test_element_types_propagate_as_in_beam(case):
    types = {}
    for name, ns in (("beam", _beam_ns()), ("sparkbeam", _sparkbeam_ns())):
        types[name] = repr(ELEMENT_TYPES[case](ns, ns.beam.Pipeline()).element_type)
    assert types["sparkbeam"] == types["beam"]


def test_the_error_names_both_transforms_and_where_they_were_applied():
    p = sparkbeam.Pipeline()
    words = p | sparkbeam.Create(["a"])
    lengths = words | "Lengths" >> sparkbeam.Map(len).with_output_types(int)
    with pytest.raises(TypeCheckError) as caught:
        lengths | "Group" >> sparkbeam.GroupByKey()
    message = str(caught.value)
    assert "'Group' (applied at" in message and "'Lengths' (applied at" in message
    assert "test_typehints.py" in message and "Tuple[" in message and "<class 'int'>" in message


def test_a_composites_producer_is_named_at_the_consumers_level():
    @with_output_types(int)
    @sparkbeam.ptransform_fn
    def Lengths(pcoll):
        return pcoll | sparkbeam.Map(len)

    p = sparkbeam.Pipeline()
    with pytest.raises(TypeCheckError, match="output of 'Lengths'"):
        p | sparkbeam.Create(["a"]) | Lengths() | sparkbeam.GroupByKey()


def test_decorators_on_functions_dofns_and_transforms():
    @with_input_types(str)
    @with_output_types(Tuple[str, int])
    def keyed(word):
        return (word, 1)

    @with_input_types(int)
    @with_output_types(str)
    class Show(sparkbeam.DoFn):
        def process(self, element):
            yield str(element)

    @with_input_types(KV[str, Iterable[int]])
    class SumValues(sparkbeam.PTransform):
        def expand(self, pcoll):
            return pcoll | sparkbeam.MapTuple(lambda k, vs: (k, sum(vs)))

    p = sparkbeam.Pipeline()
    grouped = p | sparkbeam.Create(["a"]) | sparkbeam.Map(keyed) | sparkbeam.GroupByKey()
    assert repr(grouped.element_type) == "Tuple[<class 'str'>, Iterable[<class 'int'>]]"
    grouped | SumValues()
    with pytest.raises(TypeCheckError, match="Show"):
        grouped | "ShowGroups" >> sparkbeam.ParDo(Show())
    numbers = p | "Numbers" >> sparkbeam.Create([1])
    assert (numbers | sparkbeam.ParDo(Show())).element_type is str
    with pytest.raises(TypeCheckError, match="SumNumbers"):
        numbers | "SumNumbers" >> SumValues()


def test_declared_output_conflicting_with_the_inside_of_a_composite_is_an_error():
    class Strings(sparkbeam.PTransform):
        def expand(self, pcoll):
            return pcoll | sparkbeam.Map(annotated_ints)

    p = sparkbeam.Pipeline()
    with pytest.raises(TypeCheckError, match="Output type hint violation at 'Strings'"):
        p | sparkbeam.Create([1]) | Strings().with_output_types(str)


def test_type_variables_bind_through_declared_transforms():
    T = sb_typehints.TypeVariable("T")

    @with_input_types(T)
    @with_output_types(List[T])
    @sparkbeam.ptransform_fn
    def Listed(pcoll):
        return pcoll | sparkbeam.Map(lambda x: [x])

    p = sparkbeam.Pipeline()
    assert repr((p | sparkbeam.Create([1]) | Listed()).element_type) == "List[<class 'int'>]"


class IdentityKey:
    """A key class as Beam's group_with_coder example writes it: no __eq__, no __hash__."""

    def __init__(self, name):
        self.name = name


class ValueKey(IdentityKey):
    def __eq__(self, other):
        return isinstance(other, ValueKey) and other.name == self.name

    def __hash__(self):
        return hash(self.name)


class UnhashableKey(IdentityKey):
    def __eq__(self, other):
        return isinstance(other, UnhashableKey) and other.name == self.name


def test_declared_keys_that_cannot_be_grouped_by_value_are_refused_when_applied():
    # Beam groups such keys by their coder's bytes; sparkbeam groups by value, and would
    # otherwise silently give each instance a group of its own.
    p = sparkbeam.Pipeline()
    names = p | sparkbeam.Create(["a", "b", "a"])
    identity = names | "Identity" >> sparkbeam.Map(lambda n: (IdentityKey(n), 1)).with_output_types(Tuple[IdentityKey, int])
    with pytest.raises(NotImplementedError, match=r"'Sum/GroupByKey' \(applied at .*test_typehints.py.*IdentityKey, whose instances compare by identity.*Define __eq__ and __hash__ on IdentityKey"):
        identity | "Sum" >> sparkbeam.CombinePerKey(sum)
    unhashable = names | "Unhashable" >> sparkbeam.Map(lambda n: (UnhashableKey(n), 1)).with_output_types(Tuple[UnhashableKey, int])
    with pytest.raises(NotImplementedError, match=r"'Group'.*UnhashableKey, whose instances are unhashable"):
        unhashable | "Group" >> sparkbeam.GroupByKey()
    valued = names | "Valued" >> sparkbeam.Map(lambda n: (ValueKey(n), 1)).with_output_types(Tuple[ValueKey, int])
    valued | "SumValued" >> sparkbeam.CombinePerKey(sum)
    undeclared = names | "Undeclared" >> sparkbeam.Map(lambda n: (IdentityKey(n), 1))
    undeclared | "SumUndeclared" >> sparkbeam.CombinePerKey(sum)  # nothing declared, nothing known


def test_a_registered_coder_for_an_identity_key_is_named_in_the_refusal():
    class IdentityKeyCoder(sparkbeam.coders.Coder):
        def encode(self, key):
            return key.name.encode()

        def decode(self, encoded):
            return IdentityKey(encoded.decode())

        def is_deterministic(self):
            return True

    sparkbeam.coders.registry.register_coder(IdentityKey, IdentityKeyCoder)
    p = sparkbeam.Pipeline()
    keyed = p | sparkbeam.Create(["a"]) | sparkbeam.Map(lambda n: (IdentityKey(n), 1)).with_output_types(Tuple[IdentityKey, int])
    with pytest.raises(NotImplementedError, match="Beam by the bytes of its registered IdentityKeyCoder"):
        keyed | sparkbeam.GroupByKey()
    unchecked = sparkbeam.Pipeline(options=PipelineOptions(["--no_pipeline_type_check"]))
    unchecked | sparkbeam.Create(["a"]) | sparkbeam.Map(lambda n: (IdentityKey(n), 1)).with_output_types(Tuple[IdentityKey, int]) | sparkbeam.GroupByKey()


def test_checks_can_be_turned_off_and_runtime_checks_are_refused():
    p = sparkbeam.Pipeline(options=PipelineOptions(["--no_pipeline_type_check"]))
    p | sparkbeam.Create([1]) | sparkbeam.GroupByKey()  # not checked; it would fail at run time
    for flag in ("--runtime_type_check", "--performance_runtime_type_check"):
        with pytest.raises(NotImplementedError, match=flag.lstrip("-")):
            sparkbeam.Pipeline(options=PipelineOptions([flag]))


def test_optional_and_any_hints_accept_what_beam_accepts():
    p = sparkbeam.Pipeline()
    maybe = p | sparkbeam.Create([1, None]) | sparkbeam.Map(lambda x: x).with_output_types(Optional[int])
    maybe | sparkbeam.Map(lambda x: x).with_input_types(Any)
    maybe | sparkbeam.Map(lambda x: x).with_input_types(Optional[int])


def test_beam_typehints_is_the_top_level_attribute():
    assert sparkbeam.typehints is sb_typehints
    assert sparkbeam.typehints.typehints.KV is KV
    assert sparkbeam.typehints.decorators.with_input_types is with_input_types
