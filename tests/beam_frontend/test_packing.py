"""Combiner packing (runners/beam/packing.py): sibling combines over one input in a
composite that asks for it become one grouping named as Beam names it; a stream is not
packed, and neither are combines outside such a composite. That the packed grouping gives
each combine its own result, under the step names Beam's runners report, is Beam's
``FnApiRunnerTest.test_pack_combiners`` (test_fn_runner_suite.py)."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import python_urns

import sparkbeam
from sparkbeam.runners.beam.packing import pack_name
from sparkbeam.runners.beam.translate import translate
from sparkbeam.runners.core.lowering.ops import GroupOp


class Packable(beam.PTransform):
    def __init__(self, packed: bool) -> None:
        super().__init__()
        self.packed = packed

    def annotations(self):
        return {python_urns.APPLY_COMBINER_PACKING: b""} if self.packed else {}

    def expand(self, pcoll):
        return (
            pcoll | "Smallest" >> beam.CombineGlobally(min),
            pcoll | "Largest" >> beam.CombineGlobally(max),
            pcoll | beam.Map(lambda x: ("k", x)) | "Sum" >> beam.CombinePerKey(sum),
        )


def _groupings(packed: bool, streaming: bool = False) -> list[str]:
    p = beam.Pipeline(runner=sparkbeam.SparkRunner(), options=PipelineOptions(["--streaming"] if streaming else []))
    _ = p | beam.Create([3, 1, 2]) | "Stats" >> Packable(packed)
    return [op.label for op in translate(p, streaming=streaming).ops if isinstance(op, GroupOp) and op.label.startswith("Stats/")]


def test_beams_name_for_packed_transforms():
    assert pack_name(["a/b/c1/d1", "a/b/c2/d2"]) == "a/b/Packed[c1_d1, c2_d2]"


def test_sibling_combines_over_one_input_are_one_grouping_where_the_composite_asks():
    assert _groupings(packed=True) == ["Stats/Packed[Smallest_CombinePerKey, Largest_CombinePerKey]/Pack", "Stats/Sum"]
    assert _groupings(packed=False) == ["Stats/Smallest/CombinePerKey", "Stats/Largest/CombinePerKey", "Stats/Sum"]
    assert _groupings(packed=True, streaming=True) == ["Stats/Smallest/CombinePerKey", "Stats/Largest/CombinePerKey", "Stats/Sum"]

