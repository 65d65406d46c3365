"""A run's settings are read once from the options into one typed, frozen value; a bad
value is refused there, naming the option."""

from __future__ import annotations

import attrs
import pytest

from sparkbeam.options.pipeline_options import PipelineOptions
from sparkbeam.runners.core.lowering.settings import RunMode, RunSettings


def test_the_defaults_are_the_options_defaults():
    assert RunSettings.from_options(PipelineOptions()) == RunSettings()


def test_every_setting_is_an_option_of_the_same_name():
    options = PipelineOptions().get_all_options()
    assert {field.name for field in attrs.fields(RunSettings)} <= options.keys()


def test_options_become_typed_settings():
    settings = RunSettings.from_options(
        PipelineOptions(["--spark_conf=a=1", "--spark_conf=b=2", "--state_partitions=3", "--step_interval=0", "--no_block_on_run"])
    )
    assert settings.spark_conf == ("a=1", "b=2")
    assert (settings.state_partitions, settings.step_interval, settings.block_on_run) == (3, 0.0, False)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        settings.quiet = True  # type: ignore[misc]


@pytest.mark.parametrize(
    ("chosen", "message"),
    [
        ({"state_partitions": 0}, "--state_partitions: expected a positive integer, got 0"),
        ({"checkpoint_interval": None}, "--checkpoint_interval: expected a positive integer, got None"),
        ({"step_interval": -1.0}, "--step_interval: expected a non-negative number, got -1.0"),
        ({"spark_log_max_age_days": 0}, "--spark_log_max_age_days: expected a positive number, got 0"),
        ({"quiet": "yes"}, "--quiet: expected true or false, got 'yes'"),
        ({"spark_master": 7}, "--spark_master: expected a string, got 7"),
    ],
)
def test_a_bad_value_is_refused_naming_the_option(chosen, message):
    with pytest.raises(ValueError, match=f"^pipeline option {message}$"):
        RunSettings.from_options(chosen)


def test_a_run_is_a_stream_when_asked_or_when_some_input_never_ends():
    assert RunSettings().mode(unbounded_input=False) is RunMode.BATCH
    assert RunSettings().mode(unbounded_input=True) is RunMode.STREAMING
    assert RunSettings(streaming=True).mode(unbounded_input=False) is RunMode.STREAMING


def test_the_documented_example_runs():
    import doctest

    from sparkbeam.runners.core.lowering import settings

    assert doctest.testmod(settings).failed == 0
