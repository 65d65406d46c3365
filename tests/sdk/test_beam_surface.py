"""Every name Beam has is either in sparkbeam or says it is not supported, by name: module
attributes (``beam.io.ReadFromPubSub``) and module imports (``import sparkbeam.io.gcp``)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import sparkbeam
from sparkbeam import _beam_names
from sparkbeam.beam_surface import UnsupportedBeamFeature
from tests.sdk.beam_names import MIRRORED, record


def every_recorded_name():
    for ours, beams in sorted(MIRRORED.items()):
        for name in _beam_names.NAMES[beams]:
            yield ours, beams, name


def test_every_beam_name_is_there_or_not_supported_by_name():
    missing = []
    for ours, beams, name in every_recorded_name():
        module = importlib.import_module(ours)
        try:
            getattr(module, name)
        except UnsupportedBeamFeature as error:
            assert name in str(error) and "not supported by sparkbeam" in str(error)
        except AttributeError:
            missing.append(f"{ours}.{name} ({beams}.{name})")
    assert not missing, missing


def test_the_record_is_that_of_the_installed_beam():
    import apache_beam

    if apache_beam.__version__ != _beam_names.BEAM_VERSION:
        pytest.skip(f"the record is of apache-beam {_beam_names.BEAM_VERSION}; regenerate with python -m tests.sdk.beam_names")
    current = record()
    assert current["names"] == _beam_names.NAMES
    assert frozenset(current["modules"]) == _beam_names.MODULES
    assert _beam_names.MIRRORED == MIRRORED


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("sparkbeam.io.ReadFromPubSub", "Pub/Sub"),
        ("sparkbeam.io.WriteToBigQuery", "BigQuery"),
        ("sparkbeam.dataframe", "DataFrame API"),
        ("sparkbeam.transforms.core.RestrictionProvider", "splittable"),
        ("sparkbeam.ExternalTransform", "cross-language"),
        ("sparkbeam.GroupByEncryptedKey", "encrypted grouping"),
        ("sparkbeam.transforms.util.GcpSecret", "encrypted grouping"),
        ("sparkbeam.runners.DataflowRunner", "runs pipelines on Spark"),
        ("sparkbeam.coders.RowCoder", "apache_beam.coders.RowCoder"),
    ],
)
def test_unsupported_names_say_why(expression, message):
    with pytest.raises(NotImplementedError, match=message):
        eval(expression, {"sparkbeam": sparkbeam})


def test_from_imports_of_unsupported_names_say_so_too():
    with pytest.raises(NotImplementedError, match=r"apache_beam\.io\.ReadFromPubSub"):
        from sparkbeam.io import ReadFromPubSub  # noqa: F401
    with pytest.raises(NotImplementedError, match="splittable"):
        from sparkbeam.io import restriction_trackers  # noqa: F401


@pytest.mark.parametrize(
    ("module", "named"),
    [
        ("sparkbeam.io.gcp.bigquery", "apache_beam.io.gcp "),  # the first package sparkbeam lacks
        ("sparkbeam.io.gcp", "apache_beam.io.gcp "),
        ("sparkbeam.ml.inference", "apache_beam.ml "),
        ("sparkbeam.runners.dataflow", "apache_beam.runners.dataflow "),
        ("sparkbeam.yaml", "apache_beam.yaml "),
    ],
)
def test_imports_of_beams_modules_that_sparkbeam_lacks_say_so(module, named):
    with pytest.raises(NotImplementedError, match=named):
        importlib.import_module(module)


def test_names_beam_lacks_too_are_plain_attribute_errors():
    with pytest.raises(AttributeError, match="nor has Beam's"):
        sparkbeam.NoSuchTransform  # noqa: B018
    assert getattr(sparkbeam.transforms, "no_such_thing", None) is None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sparkbeam.no_such_module")


def test_beam_module_attributes_reach_sparkbeams_modules():
    import sparkbeam.transforms.core as core

    assert sparkbeam.transforms.combiners.core is core
    assert sparkbeam.testing.util.assert_that is not None  # a submodule not imported by sparkbeam


def test_the_beam_names_in_beams_examples_resolve_or_say_so():
    """Attribute chains Beam's own example pipelines use (beam.X.Y...), each resolved."""
    chains = [
        "beam.io.ReadFromText", "beam.io.WriteToText", "beam.combiners.Count.PerElement", "beam.CombinePerKey",
        "beam.transforms.window.FixedWindows", "beam.transforms.trigger.AfterWatermark", "beam.pvalue.AsSingleton",
        "beam.typehints.Tuple", "beam.coders.StrUtf8Coder", "beam.coders.registry", "beam.DoFn.SetupContextParam",
        "beam.DoFn.BundleFinalizerParam", "beam.FlattenWith", "beam.transforms.core.CombineFn",
        "beam.metrics.Metrics", "beam.io.ReadFromPubSub", "beam.testing.util.equal_to", "beam.transforms.combiners.core",
    ]
    for chain in chains:
        value = sparkbeam
        try:
            for part in chain.split(".")[1:]:
                value = getattr(value, part)
        except NotImplementedError:
            continue
        assert value is not None, chain


def test_the_sdk_still_imports_without_pyspark_and_without_the_record():
    # The record is read only when a name is missing: importing sparkbeam does not load it.
    code = "import sys, sparkbeam; print('sparkbeam._beam_names' in sys.modules, 'pyspark' in sys.modules)"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert output == ["False", "False"]
