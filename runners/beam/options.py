"""sparkbeam's Spark options on a Beam command line, and their mapping onto sparkbeam's settings.

``SparkBeamOptions`` registers sparkbeam's own flags (``--spark_master``, ``--spark_conf``,
``--checkpoint_dir``, ..., and ``--drain`` for Beam pipelines) with Beam's options machinery: Beam collects the flags of every
``PipelineOptions`` subclass, so once this module is imported (the runner imports it),
``python my_beam_pipeline.py --runner=sparkbeam.SparkRunner --spark_master=local[4]``
parses as one command line. Flags both know (``--streaming``, ``--job_name``,
``--requirements_file``, ``--setup_file``) are Beam's and keep their meaning.
``sparkbeam_settings`` reads a Beam options object into the settings sparkbeam's runner
takes (``RunSettings``), validated by sparkbeam's own option table.
"""

from __future__ import annotations

from typing import Any

from apache_beam.options import pipeline_options as beam_options

from sparkbeam.options import pipeline_options as options
from sparkbeam.options.pipeline_options import SparkRunnerOptions
from sparkbeam.runners.core.lowering.settings import RunSettings

__all__ = ["SparkBeamOptions", "sparkbeam_settings"]

#: sparkbeam's option table (name -> parse, default, help, flag kind), the one source of its options
_TABLE = options._OPTIONS


class SparkBeamOptions(beam_options.PipelineOptions):
    """sparkbeam's Spark runner options, for ``view_as`` on a Beam ``PipelineOptions``."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        for name in SparkRunnerOptions._names:
            option = _TABLE[name]
            # Defaults stay None: an absent flag takes sparkbeam's default (sparkbeam_settings).
            if option.is_flag:
                parser.add_argument(f"--{name}", dest=name, action="store_true", default=None, help=option.help)
                parser.add_argument(f"--no_{name}", dest=name, action="store_false", help=f"turn off --{name}")
            elif option.repeated:
                parser.add_argument(f"--{name}", dest=name, action="append", default=None, help=option.help)
            else:
                parser.add_argument(f"--{name}", dest=name, default=None, help=option.help)
        # Beam pipelines only: sparkbeam's own SDK has no splittable DoFns to truncate.
        parser.add_argument(
            "--drain",
            action="store_true",
            default=False,
            help=(
                "run the pipeline as Beam's runners run a drained one: each splittable DoFn's "
                "restrictions truncated by its RestrictionProvider.truncate before they are "
                "processed (by default a bounded restriction is kept and an unbounded one dropped)"
            ),
        )


def sparkbeam_settings(beam: Any) -> RunSettings:
    """The settings of sparkbeam's runner for a Beam options object; a bad value fails
    naming the option."""
    chosen: dict[str, Any] = {}
    spark = beam.view_as(SparkBeamOptions)
    for name in SparkRunnerOptions._names:
        value = getattr(spark, name, None)
        if value is not None:
            chosen[name] = value
    chosen["streaming"] = bool(beam.view_as(beam_options.StandardOptions).streaming)
    setup = beam.view_as(beam_options.SetupOptions)
    for name in ("requirements_file", "setup_file"):
        value = getattr(setup, name, None)
        if value is not None:
            chosen[name] = value
    job_name = beam.view_as(beam_options.GoogleCloudOptions).job_name
    if job_name is not None:
        chosen["job_name"] = job_name
    return RunSettings.from_options(options.PipelineOptions(**chosen))
