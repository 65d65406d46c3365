"""Combiner packing: sibling ``CombinePerKey``s over one input as one grouping, as Beam packs them.

A composite that asks for it (Beam's ``APPLY_COMBINER_PACKING`` annotation on it or on an
enclosing transform, as ``beam.combiners`` helpers and TFX transforms do) has the
``CombinePerKey``s it holds that read the same PCollection combined in one grouping in
batch: one shuffle of the input instead of one per combine, with Beam's
``SingleInputTupleCombineFn`` of their ``CombineFn``s, then an ``Unpack`` that hands each
combine's result to its own output. ``CombineGlobally`` keys its input with a
``KeyWithVoid`` of its own; as Beam's runners do, those of siblings over one input are
made one first, so their combines can be packed. The grouping is named as Beam names it
(``prefix/Packed[a_CombinePerKey, b_CombinePerKey]/Pack``), so the combines' metrics are
found under the step Beam's runners report. Streams are not packed (as in Beam).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
from apache_beam import pvalue as beam_pvalue
from apache_beam.portability import python_urns
from apache_beam.transforms import core as beam_core

from sparkbeam.pvalue import TaggedOutput

__all__ = ["PackingPlan", "pack_name", "plan_packing", "unpack"]


def pack_name(labels: list[str]) -> str:
    """Beam's name for packed transforms: their labels' common prefix, then
    ``Packed[...]`` of what follows it in each, its slashes made underscores."""
    parts = [label.split("/") for label in labels]
    common = 0
    while all(len(p) > common + 1 for p in parts) and len({p[common] for p in parts}) == 1:
        common += 1
    suffixes = ", ".join("_".join(p[common:]) for p in parts)
    return "/".join([*parts[0][:common], f"Packed[{suffixes}]"])


@attrs.define
class PackingPlan:
    """What the translator does differently where combines are packed."""

    #: id of the first CombinePerKey node of a pack -> every node of the pack, in order
    packs: dict[int, list[Any]] = attrs.Factory(dict)
    #: id of a CombinePerKey node packed into another's grouping: translated as nothing
    packed_away: set[int] = attrs.Factory(set)
    #: id of a KeyWithVoid node made one with an earlier one -> that one's output PCollection
    key_with_void_aliases: dict[int, Any] = attrs.Factory(dict)


def _asks_for_packing(node: Any) -> bool:
    while node is not None and node.transform is not None:
        if python_urns.APPLY_COMBINER_PACKING in (node.transform.annotations() or {}):
            return True
        node = node.parent
    return False


def _only_pcoll(values: Any) -> Any:
    found = [v for v in values if isinstance(v, beam_pvalue.PCollection)]
    return found[0] if len(found) == 1 else None


def _is_key_with_void(node: Any) -> bool:
    transform = node.transform
    return (
        isinstance(transform, beam_core.ParDo)
        and isinstance(transform.fn, beam_core._KeyWithNone)
        and node.full_label.endswith("/KeyWithVoid")
    )


def _walk(node: Any) -> Iterator[Any]:
    for part in node.parts:
        yield part
        yield from _walk(part)


def plan_packing(pipeline: Any) -> PackingPlan:
    """Which CombinePerKeys of a batch pipeline are packed together, in the order the
    translator meets them."""
    plan = PackingPlan()
    groups: dict[int, list[Any]] = {}
    # KeyWithVoid nodes by the id of the PCollection they key: the first one kept.
    first_key_with_void: dict[int, Any] = {}
    for node in _walk(pipeline.transforms_stack[0]):
        if not isinstance(node.transform, beam_core.CombinePerKey) or not _asks_for_packing(node):
            continue
        transform = node.transform
        if transform.args or transform.kwargs or node.side_inputs:
            continue
        source = _only_pcoll(node.inputs)
        if source is None:
            continue
        producer = source.producer
        if producer is not None and _is_key_with_void(producer):
            keyed = _only_pcoll(producer.inputs)
            kept = first_key_with_void.setdefault(id(keyed), producer)
            if kept is not producer:
                plan.key_with_void_aliases[id(producer)] = _only_pcoll(kept.outputs.values())
            source = _only_pcoll(kept.outputs.values())
        groups.setdefault(id(source), []).append(node)
    for members in groups.values():
        if len(members) > 1:
            plan.packs[id(members[0])] = members
            plan.packed_away.update(id(member) for member in members[1:])
    # (An aliased KeyWithVoid's combine is never alone: the kept one's combine shares its group.)
    return plan


def unpack(packed: tuple[Any, tuple]) -> Iterator[TaggedOutput]:
    """``(key, (result_0, result_1, ...))`` -> each result to its combine's output."""
    key, results = packed
    for index, result in enumerate(results):
        yield TaggedOutput(str(index), (key, result))
