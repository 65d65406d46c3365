"""apache_beam pipelines on sparkbeam's engine: ``--runner=sparkbeam.SparkRunner``.

The one package of sparkbeam that imports apache_beam (installed with
``pip install 'sparkbeam[beam]'``). It translates a Beam pipeline's graph, after Beam's own
expansion, into the lowered ops that sparkbeam's SDK also produces, and runs Beam's DoFns
through Beam's own DoFnRunner; the stage planner, the step loop, the watermarks and the
Spark backend are the same for both front ends.
"""

try:
    import apache_beam  # noqa: F401
except ImportError as missing:
    msg = (
        "sparkbeam.runners.beam runs apache_beam pipelines and needs apache-beam: "
        "pip install 'sparkbeam[beam]' (sparkbeam's own pipeline API needs nothing more)"
    )
    raise ImportError(msg) from missing

from sparkbeam.runners.beam.capture import capture
from sparkbeam.runners.beam.options import SparkBeamOptions
from sparkbeam.runners.beam.runner import BeamPipelineResult, SparkRunner
from sparkbeam.runners.beam.translate import supported_primitives, translate

__all__ = ["BeamPipelineResult", "SparkBeamOptions", "SparkRunner", "capture", "supported_primitives", "translate"]
