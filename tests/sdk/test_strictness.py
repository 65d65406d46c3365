"""No keyword argument is accepted and then ignored: a misspelt option is an error naming it
and the transform, and every ``**kwargs`` of sparkbeam's transforms goes somewhere."""

from __future__ import annotations

import importlib
import inspect

import pytest

import sparkbeam as beam
from sparkbeam.options.pipeline_options import PipelineOptions, SparkRunnerOptions
from sparkbeam.ptransform import PTransform
from sparkbeam.testing.test_pipeline import TestPipeline
from sparkbeam.transforms import trigger, window
from sparkbeam.windowing import Windowing

TYPOS = [
    (lambda: beam.WindowInto(window.FixedWindows(60), allowed_latenes=600), "allowed_latenes", "WindowInto"),
    (lambda: beam.io.ReadFromText("in.txt", skip_header_line=1), "skip_header_line", "ReadFromText"),
    (lambda: beam.io.WriteToText("out", num_shard=2), "num_shard", "WriteToText"),
    (lambda: beam.io.ReadFromCsv("in.csv", hedaer=None), "hedaer", "ReadFromCsv"),
    (lambda: beam.io.WriteToCsv("out", idnex=False), "idnex", "WriteToCsv"),
    (lambda: beam.io.ReadFromJson("in.json", line=True), "line", "ReadFromJson"),
    (lambda: beam.io.WriteToJson("out", orinet="records"), "orinet", "WriteToJson"),
    (lambda: beam.io.ReadFromParquet("in.parquet", colums=["a"]), "colums", "ReadFromParquet"),
    (lambda: beam.io.WriteToParquet("out", schema=None, codex="snappy"), "codex", "WriteToParquet"),
    (lambda: beam.io.ReadFromTextStream("dir", max_file_per_trigger=3), "max_file_per_trigger", "ReadFromTextStream"),
    (lambda: beam.io.ReadFromRate(5, num_partition=2), "num_partition", "ReadFromRate"),
    (lambda: beam.GroupByKey(labl="x"), "labl", "GroupByKey"),
    (lambda: beam.Flatten(pipelin=None), "pipelin", "Flatten"),
    (lambda: beam.Create([1], reshufle=False), "reshufle", "Create"),
    (lambda: TestPipeline(blockng=True), "blockng", "TestPipeline"),
]


@pytest.mark.parametrize(("make", "name", "owner"), TYPOS, ids=[t[1] for t in TYPOS])
def test_a_misspelt_keyword_is_a_type_error_naming_it_and_the_transform(make, name, owner):
    pytest.importorskip("pyarrow")  # the Parquet transforms check for it first
    with pytest.raises(TypeError, match=name) as caught:
        make()
    assert owner in str(caught.value)


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: beam.io.ReadFromCsv("in.csv", parse_dates=["t"]), "parse_dates"),
        (lambda: beam.io.WriteToJson("out", indent=2), "indent"),
        (lambda: beam.io.ReadFromText("in.txt", delimiter=b";").expand, None),
        (lambda: beam.io.WriteToText("out", triggering_frequency=60), "triggering_frequency"),
        (lambda: TestPipeline(blocking=False), "blocking"),
        (lambda: PipelineOptions().get_all_options(add_extra_args_fn=print), "add_extra_args_fn"),
    ],
)
def test_options_beam_has_but_sparkbeam_does_not_honour_say_so(make, name):
    if name is None:
        make()  # supported: ReadFromText honours delimiter=
        return
    with pytest.raises(NotImplementedError, match=name):
        make()


def test_window_into_a_windowing_takes_the_given_settings_over_it_as_beam():
    base = Windowing(window.FixedWindows(10), trigger.AfterCount(2), trigger.AccumulationMode.ACCUMULATING)
    transform = beam.WindowInto(base, allowed_lateness=30)
    assert transform.windowing.allowed_lateness == 30
    assert transform.windowing.triggerfn == trigger.AfterCount(2)
    assert transform.windowing.accumulation_mode == trigger.AccumulationMode.ACCUMULATING


def test_resource_hints_are_checked_by_name():
    mapped = beam.Map(str).with_resource_hints(min_ram="4GB", accelerator="type:nvidia-tesla-t4")
    assert mapped.resource_hints == {"min_ram": "4GB", "accelerator": "type:nvidia-tesla-t4"}
    with pytest.raises(ValueError, match="min_rma"):
        beam.Map(str).with_resource_hints(min_rma="4GB")


def test_get_all_options_views_and_defaults():
    options = PipelineOptions(["--spark_master=local[1]", "--streaming"])
    spark_only = options.view_as(SparkRunnerOptions).get_all_options(current_only=True)
    assert spark_only["spark_master"] == "local[1]" and "streaming" not in spark_only
    assert options.get_all_options(drop_default=True) == {"spark_master": "local[1]", "streaming": True}


# Every transform whose constructor takes **kwargs, and where they go.
KEYWORDS_GO_TO = {
    # the user's function (as Beam: extra arguments of the DoFn/CombineFn/callable)
    "CombineGlobally": "user", "CombinePerKey": "user", "CombineValues": "user", "Filter": "user",
    "FlatMap": "user", "FlatMapTuple": "user", "Map": "user", "MapTuple": "user", "ParDo": "user",
    "Partition": "user", "WithKeys": "user",
    # named fields of a schema transform
    "GroupBy": "fields", "Select": "fields",
    # pandas' options: the supported ones are named parameters, the rest refused (above)
    "ReadFromCsv": "pandas", "WriteToCsv": "pandas", "ReadFromJson": "pandas", "WriteToJson": "pandas",
    # forwarded to a keyword-only constructor, which refuses unknown names
    "ReadFromCsvStream": "forwarded", "ReadFromJsonStream": "forwarded", "ReadFromKafka": "forwarded",
    "ReadFromParquetStream": "forwarded", "ReadFromRate": "forwarded", "ReadFromSocket": "forwarded",
    "ReadFromTextStream": "forwarded",
    # checked or refused in the constructor
    "Flatten": "checked", "WithShardedKey": "refused",
}


def _transforms():
    for module_name in ("sparkbeam", "sparkbeam.io", "sparkbeam.transforms.util", "sparkbeam.transforms.combiners",
                        "sparkbeam.transforms.stats", "sparkbeam.testing.test_stream", "sparkbeam.io.streaming"):
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            candidates = [value]
            if isinstance(value, type):
                candidates += [v for v in vars(value).values() if isinstance(v, type)]
            for candidate in candidates:
                if isinstance(candidate, type) and issubclass(candidate, PTransform):
                    yield candidate.__name__, candidate.__init__
                elif callable(candidate) and not isinstance(candidate, type) and name[:1].isupper():
                    yield name, candidate


def test_every_transform_taking_any_keyword_says_where_it_goes():
    swallowing = set()
    for name, constructor in _transforms():
        try:
            parameters = inspect.signature(constructor).parameters.values()
        except (TypeError, ValueError):
            continue
        if any(p.kind == p.VAR_KEYWORD for p in parameters):
            swallowing.add(name)
    assert swallowing <= set(KEYWORDS_GO_TO), sorted(swallowing - set(KEYWORDS_GO_TO))
    assert {"Map", "ReadFromCsv", "ReadFromTextStream"} <= swallowing  # the audit sees them
