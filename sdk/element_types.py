"""Element types at construction: each PCollection's ``element_type``, and Beam's checks.

When a transform is applied, its declared input type (``with_input_types``, a decorator,
annotations, or the transform's own, such as ``GroupByKey``'s ``Tuple[K, V]``) is checked
against the element type of its input; after it expands, each output gets its declared
output type (with type variables bound from the input) or the one the transform infers
(``Create`` from its values, ``Flatten`` the union of its inputs', ...). A mismatch is a
``TypeCheckError`` that names both transforms and where they were applied. The checks run
unless ``--no_pipeline_type_check``; element types are never checked at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkbeam import pvalue
from sparkbeam.errors import describe
from sparkbeam.typehints import typehints
from sparkbeam.typehints.decorators import TypeCheckError

if TYPE_CHECKING:
    from sparkbeam.pipeline import AppliedTransform
    from sparkbeam.ptransform import PTransform

__all__ = ["check_input_types", "set_output_types"]


def _producer_at_level(pcoll: pvalue.PCollection, consumer: AppliedTransform) -> AppliedTransform | None:
    """The transform that produced ``pcoll``, seen at the consumer's nesting level."""
    producer = pcoll.producer
    depth = consumer.full_label.count("/")
    while producer is not None and producer.full_label.count("/") > depth:
        producer = producer.parent
    return producer


def check_input_types(node: AppliedTransform, transform: PTransform, pvalueish: Any) -> None:
    """Fail if the main input's element type cannot be what ``transform`` declares it takes."""
    if not isinstance(pvalueish, pvalue.PCollection) or pvalueish.element_type is None:
        return
    if not transform.checks_input_types:
        return
    expected = transform.get_type_hints().element_input_type()
    if expected is None:
        return
    actual = pvalueish.element_type
    if typehints.is_consistent_with(actual, expected):
        return
    producer = _producer_at_level(pvalueish, node)
    made_by = describe(producer.full_label, producer.location) if producer is not None else repr(pvalueish)
    msg = (
        f"Input type hint violation at {describe(node.full_label, node.location)}: it requires "
        f"elements of type {expected!r}, but it is applied to the output of {made_by}, whose "
        f"elements are of type {actual!r}. Make {made_by} output {expected!r} (or declare what it "
        "outputs with .with_output_types(...)), or apply a transform in between that converts them"
    )
    raise TypeCheckError(msg)


def _input_type(node: AppliedTransform) -> Any:
    types: list[Any] = [pv.element_type for pv in node.inputs if isinstance(pv, pvalue.PCollection)]
    if not types:
        return None
    if len(types) == 1:
        return types[0] if types[0] is not None else typehints.Any
    return typehints.Union[tuple(typehints.Any if t is None else t for t in types)]


def set_output_types(node: AppliedTransform, transform: PTransform, result: Any) -> None:
    """Give each output PCollection of ``node`` its element type, checking declared outputs."""
    hints = transform.get_type_hints()
    input_type = _input_type(node)
    outputs: list[pvalue.PCollection] = [pv for pv in node.outputs.values() if isinstance(pv, pvalue.PCollection)]
    main = result if isinstance(result, pvalue.PCollection) else None
    declared = hints.simple_output_type(node.full_label) if hints.has_simple_output_type() else None
    for pcoll in outputs:
        if main is None or pcoll is not main:
            if pcoll.element_type is None:
                pcoll.element_type = typehints.Any  # tagged outputs: not declared per tag
            continue
        if declared is not None:
            declared_input = hints.element_input_type()
            bindings = typehints.match_type_variables(declared_input, input_type) if declared_input is not None else {}
            element_type = typehints.bind_type_variables(declared, bindings)
        else:
            element_type = transform.infer_output_type(input_type)
        element_type = typehints.bind_type_variables(element_type, {"*": typehints.Any})
        current = pcoll.element_type
        if current is not None and current != typehints.Any:
            # A composite's output already has the type its inner transforms gave it.
            if declared is not None and not typehints.is_consistent_with(current, declared):
                msg = (
                    f"Output type hint violation at {describe(node.full_label, node.location)}: "
                    f"it declares elements of type {declared!r}, but its output has elements of "
                    f"type {current!r}"
                )
                raise TypeCheckError(msg)
            if declared is None or _vagueness(element_type) >= _vagueness(current):
                continue
        pcoll.element_type = element_type


def _vagueness(hint: Any) -> int:
    """How many parts of ``hint`` are Any: of two consistent hints, the one to keep has fewer."""
    if not isinstance(hint, typehints.TypeConstraint):
        return 0
    count = 0

    def visit(part: Any, unused: Any) -> None:
        nonlocal count
        if isinstance(part, typehints.AnyTypeConstraint):
            count += 1

    hint.visit(visit, None)
    return count
