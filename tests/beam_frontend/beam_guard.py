"""Which runner Beam's own tests really ran their pipelines on.

Beam's test modules pin some pipelines to Beam's runners (``TestPipeline('FnApiRunner')``,
``beam.Pipeline(argv=['--runner=DirectRunner'])``, ``BundleBasedDirectRunner``), run
transforms eagerly on a list (``[1, 2] | beam.Map(...)``, which runs Beam's DirectRunner),
or build ``beam.Pipeline(options=...)`` with no runner, which Beam then runs on its
DirectRunner: ``--test-pipeline-options`` reaches none of these. A test that passes that
way has shown nothing about sparkbeam. While a ``RunGuard`` is installed, every
``apache_beam.Pipeline.run`` whose runner is not sparkbeam's raises ``BeamRunnerUsed``
before Beam's runner starts, and is recorded, so the test fails even when it catches the
error itself; runs on sparkbeam are counted, so a test that ran no pipeline at all can be
reported apart from those that did.
"""

from __future__ import annotations

from typing import Any

import attrs

#: the user property a test's report carries: how many pipelines it ran on sparkbeam
SPARKBEAM_RUNS = "sparkbeam_pipeline_runs"
#: the user property naming the Beam runners it tried to run pipelines on
BEAM_RUNS = "beam_runner_runs"


class BeamRunnerUsed(AssertionError):
    """A test's pipeline would have run on one of Beam's runners instead of sparkbeam's."""


@attrs.define
class RunRecord:
    """What one test ran: pipelines on sparkbeam, and the Beam runners it tried."""

    sparkbeam_runs: int = 0
    beam_runners: list[str] = attrs.Factory(list)


def _describe(pipeline: Any) -> str:
    from apache_beam.options.pipeline_options import StandardOptions

    runner = type(pipeline.runner).__name__
    asked = pipeline.options.view_as(StandardOptions).runner
    how = f"--runner={asked}" if asked else "given to the pipeline, or Beam's default"
    return f"{runner} ({how})"


class RunGuard:
    """Installed around a test: refuses and records pipelines run on Beam's runners, counts
    the pipelines run on sparkbeam's ``SparkRunner``."""

    def __init__(self) -> None:
        self.record = RunRecord()
        self._originals: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        from apache_beam.pipeline import Pipeline

        from sparkbeam.runners.beam.runner import SparkRunner

        guard = self
        pipeline_run = Pipeline.run
        runner_run_pipeline = SparkRunner.run_pipeline

        def run(pipeline: Any, *args: Any, **kwargs: Any) -> Any:
            if not isinstance(pipeline.runner, SparkRunner):
                described = _describe(pipeline)
                guard.record.beam_runners.append(described)
                msg = (
                    f"this test's pipeline would run on Beam's {described} instead of sparkbeam: "
                    "Beam's test pins the runner, runs a transform eagerly, or builds its "
                    "pipeline with no runner, which --test-pipeline-options does not reach"
                )
                raise BeamRunnerUsed(msg)
            return pipeline_run(pipeline, *args, **kwargs)

        def run_pipeline(runner: Any, pipeline: Any, options: Any) -> Any:
            # Beam's runner-API round trip runs a copy of the pipeline: counted here, once.
            guard.record.sparkbeam_runs += 1
            return runner_run_pipeline(runner, pipeline, options)

        self._patch(Pipeline, "run", run)
        self._patch(SparkRunner, "run_pipeline", run_pipeline)

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._originals.append((owner, name, owner.__dict__.get(name)))
        setattr(owner, name, replacement)

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._originals):
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._originals.clear()

    def __enter__(self) -> RunGuard:
        self.install()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.uninstall()

    def problem(self) -> str | None:
        """Why the guarded test must fail though it may have passed, or None."""
        if not self.record.beam_runners:
            return None
        return (
            "ran pipelines on Beam's runners instead of sparkbeam: "
            + "; ".join(self.record.beam_runners)
        )
