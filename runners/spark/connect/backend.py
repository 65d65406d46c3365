"""The physical plan's strategies with DataFrame operations only: sparkbeam on Spark Connect.

A second implementation of the strategies ``runners/core/physical.py`` chooses from, for a
session that has no RDDs, no SparkContext, no accumulators and no broadcast variables. What
it registers under ``CONNECT`` is what the plan may choose; the rest is declined by the
plan with "the Spark Connect backend does not run it" (a run on the driver), or refused
before the run (``refusals.py``).

A step's data between stages is a ``Frame``: a DataFrame of ``tasks.ROWS``, elements
pickled in chunks. Each stage is one chain of DataFrame operations ending in
``localCheckpoint`` (one Spark job): its rows are computed once, whatever reads them next
(several outputs, a collect, downstream stages), and the tasks' reports, rows of their
own, are read from what was kept, so that a failed attempt's counts and metrics are
dropped with its rows (with the rows of the outputs the run collects, in the same job).
A stage whose outputs the driver alone reads (captures, side inputs; no later stage, no
sink) is not kept either: one ``collect`` computes its rows and fetches them with the
reports. A stage whose one output one later stage alone reads is not kept: its rows, its
reports among them (each naming its stage), go on into that stage's job. A bounded read's
elements are read in the task of the stage that takes them (``frames.feed``, ``reads.py``):

- ``FUSED_MAP``: ``mapInArrow`` of the stage's fused body over the union of its inputs
  (kept, or handed on unmaterialised as above);
- ``MAP_SIDE_PASS``: nothing run nor kept: the body goes with its input to the batch
  combine that alone reads its output, whose map-side task runs it (``UpstreamPass``);
  its counts come back as a report of their own in that stage's rows;
- ``BATCH_COMBINE``: ``mapInArrow`` of the engine's map-side table (a partial per key and
  window), ``repartition`` by the key's hash, ``mapInArrow`` merging the partials into panes
  and running the stage's body over them;
- ``UNLIFTED_GROUPING`` (batch): ``mapInArrow`` keying the elements, ``repartition`` by
  the key's hash, ``mapInArrow`` of the engine's grouping step (windows, triggers, holds)
  and the stage's body;
- ``STATEFUL`` (batch): as a grouping, with the engine's stateful step (state cells,
  timers, window expiry) after the shuffle; no state outlives the batch's one step;
- in a stream, ``UNLIFTED_GROUPING`` and ``STATEFUL`` keep their state between steps as
  rows of hash buckets (``keyed_steps.py``), and ``SKIP_IDLE`` carries it through a step
  with nothing new and nothing due;
- ``LIFTED_GROUPING`` (a combine in a stream, or in batch with a trigger or sessions): as
  a stream's grouping, with the partition's partials per key and window shuffled instead
  of its elements (``tasks.lifted_map_task``), in batch too (one step);
- ``AS_READ``: a source the driver holds, handed on as it is;
- sources: Create, Impulse and a TestStream's events from the driver; ReadFromText and ``Read(BoundedSource)``
  split and read on the server through a Python data source (``reads.py``); a schema'd
  segment's SQL plan, its panes made on the server or the client (``sql_segments.py``);
- sinks (``writes.py``): WriteToText's shards in batch, and each step's directory of a file
  sink in a stream (WriteToText, and the ``WriteFilesPerStep`` of CSV, JSON, Parquet and
  ``WriteShardedFiles``), written by tasks and committed by one task on the server;
  ``WriteToKafka``'s records by Spark's Kafka writer (``kafka.py``).

The implementations are in ``stages.py``, ``keyed_steps.py`` and ``side_input_steps.py``;
what a step hands between stages (``Frame``) in ``frames.py``. Side inputs, collected by
the step loop, travel inside the tasks' functions (no
broadcast). Shuffles partition by a column the tasks computed (``repartition(n, "h")``)
rather than through ``groupBy().applyInArrow``: a partition function sees all its keys at
once and ends with one report, where a per-group function has no end of its own.
"""

from __future__ import annotations

import contextlib
import functools
import pickle
import secrets
from collections.abc import Callable, Iterator
from typing import Any

from sparkbeam.errors import hide_engine_frames
from sparkbeam.io import commits
from sparkbeam.metrics.execution import MetricUpdates
from sparkbeam.runners.core.elements.execution import backend_ops
from sparkbeam.runners.core.loop.steps import StageResult, StageSummary, StepParams
from sparkbeam.runners.core.lowering.errors import rebuild_user_error
from sparkbeam.runners.core.lowering.ops import (
    BoundedSourceReadOp,
    CreateOp,
    ImpulseOp,
    ReadTextOp,
    StreamReadOp,
    TestStreamOp,
    WriteFilesPerStepOp,
    WriteKafkaOp,
    WriteTextOp,
)
from sparkbeam.runners.core.lowering.strategies import Capabilities, StateStore, Strategy
from sparkbeam.runners.core.plan.physical import PlannedStage, StepFacts, choose
from sparkbeam.runners.core.plan.plan import Stage
from sparkbeam.runners.core.schema.schema_segments import SchemaAggregateOp
from sparkbeam.runners.core.sources.sources import SourceEmission
from sparkbeam.runners.spark.connect import (
    kafka,
    keyed_steps,
    side_input_steps,
    sql_segments,
    stages,
    tasks,
    writes,
)
from sparkbeam.runners.spark.connect.frames import ConnectRun, Frame, driver_alone_reads
from sparkbeam.runners.spark.connect.session import made_active
from sparkbeam.runners.spark.state_chunks import bucketed_partition
from sparkbeam.utils.timestamp import MAX_TIMESTAMP
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["CONNECT", "ConnectBackend", "user_errors"]

#: what the Spark Connect backend runs: per source op type, per strategy
CONNECT = backend_ops("Spark Connect")

#: a stream's keyed stage cuts its state rows' lineage every this many steps (see ``materialise``)
CUT_EVERY = 4


class ConnectBackend:
    def __init__(self, session: Any, *, num_partitions: int | None = None, overlapping_window_rule: bool = True) -> None:
        self.session = session
        self.num_partitions = num_partitions or int(session.conf.get("spark.sql.shuffle.partitions", "4"))
        self.overlapping_window_rule = overlapping_window_rule
        #: the run's key: tasks sign the user errors they raise with it, and the client
        #: unpickles none that it does not verify (runners/core/errors.py)
        self.error_key = secrets.token_bytes(32)
        #: the metric updates the step's tasks committed (read from their reports)
        self.updates = MetricUpdates()
        #: the step's materialised DataFrames, released at its end
        self.kept: list[Any] = []
        #: stage id -> the counts of its body, run in a batch combine's map side (``map_side_pass``)
        self.handed_counts: dict[int, StageSummary] = {}
        #: a stream's keyed stages: stage id -> its state rows (``keyed_steps.py``)
        self.states: dict[int, Any] = {}
        #: a stream's keyed stages whose state rows are the last step's output, each in the
        #: partition of its keys (a step with nothing new runs over them unshuffled)
        self.placed: set[int] = set()
        #: a stream's keyed stages: stage id -> the summary of its last step that ran
        self.last_summaries: dict[int, StageSummary] = {}
        #: a stream's stages waiting for side inputs: stage id -> the watermark each side
        #: input must reach before anything parked can go (the tasks' ``ReleaseAt``, reported)
        self.release_at: dict[int, dict[int, int]] = {}
        #: a real stream's: the key its write-ahead log is sealed with, and the run's id
        #: (set by ``StreamRun.attach``, ``stream_intake.py``)
        self.wal_sealer: Any = None
        self.run_id = secrets.token_hex(16)
        #: the tag of every operation the run executes on the server (``running``): what
        #: ``cancel_jobs`` interrupts, and what the server's UI shows beside the session's own
        self.job_tag = f"sparkbeam-{self.run_id[:12]}"
        self.truncates_at_checkpoints = False
        #: a stream's keyed stages: stage id -> the checkpoint files its state was last
        #: saved to (base and deltas, ``state_files.py``)
        self.chains: dict[int, Any] = {}
        #: a stream's keyed stages: stage id -> the steps its state rows' lineage spans
        #: since it was last cut (``materialise``)
        self.uncut: dict[int, int] = {}

    def capabilities(self) -> Capabilities:
        return CONNECT.capabilities()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Around the run in its thread: operations executed meanwhile carry the run's tag (Connect's
        tags are the client thread's; the session may be the user's, so it is taken off after)."""
        fresh = self.job_tag not in self.session.getTags()
        if fresh:
            self.session.addTag(self.job_tag)
        try:
            yield
        finally:
            if fresh:
                self.session.removeTag(self.job_tag)

    def cancel_jobs(self) -> None:
        """Interrupt the run's operations in progress on the server (a second Ctrl-C: the
        step is abandoned), from any thread."""
        self.session.interruptTag(self.job_tag)

    def state_store(self, planned: PlannedStage) -> Any:
        """What a keyed stage's tasks build to hold a partition's state for a step, for the
        store the plan chose (``StateStore``): a picklable factory."""
        return CONNECT.state_store(planned.stage.name, planned.state_store)

    # -- datasets ------------------------------------------------------------------------
    def source_dataset(self, planned: PlannedStage, emission: SourceEmission) -> Frame:
        head = planned.stage.head
        if head is None:
            msg = f"'{planned.stage.name}' is not a source stage"
            raise TypeError(msg)
        read = CONNECT.sources.lookup(head)
        if emission.is_empty:
            return Frame(None, known_empty=True, size=0)
        return read(self, head, emission)

    def from_driver(self, pcoll: int, elements: list[WindowedValue], *, hold: bool = False) -> Frame:
        """Elements the driver holds, in chunks spread over at most ``num_partitions``;
        ``hold``: the frame keeps the chunks too, for the driver's own reads (``collect``)."""
        if not elements:
            return Frame(None, known_empty=True, size=0)
        per_chunk = max(1, min(tasks.CHUNK, -(-len(elements) // self.num_partitions)))
        rows = [
            (pcoll, 0, pickle.dumps(elements[at : at + per_chunk], protocol=pickle.HIGHEST_PROTOCOL))
            for at in range(0, len(elements), per_chunk)
        ]
        df = self.session.createDataFrame(rows, schema=tasks.ROW_TYPE)
        if len(rows) > 1:
            df = df.repartition(min(len(rows), self.num_partitions))
        return Frame(df, size=len(elements), held=[chunk for _, _, chunk in rows] if hold else None)

    def union(self, frames: list[Frame]) -> Frame:
        live = [frame for frame in frames if not frame.known_empty]
        if not live:
            return Frame(None, known_empty=True, size=0)
        if len(live) == 1:
            return live[0]
        sizes = [frame.size for frame in live]
        df = functools.reduce(lambda left, right: left.union(right), (frame.df for frame in live))
        return Frame(df, size=sum(s for s in sizes if s is not None) if None not in sizes else None)

    def collect(self, frame: Frame) -> list[WindowedValue]:
        """The frame's elements on the driver. The chunks were pickled by the backend's
        own tasks (``tasks.py``), never by a record."""
        if frame.known_empty:
            return []
        if frame.held is not None:
            return [wv for chunk in frame.held for wv in pickle.loads(chunk)]
        with self.user_errors():
            rows = frame.df.select("chunk").collect()
        return [wv for row in rows for wv in pickle.loads(row[0])]

    # -- stages --------------------------------------------------------------------------
    def run_stage(
        self, planned: PlannedStage, inputs: dict[int, Frame], params: StepParams, side_inputs: dict[int, list[WindowedValue]]
    ) -> StageResult:
        """Run the stage's step by the strategy the plan's ``choose`` names for it."""
        frames = list(inputs.values())
        sizes = [frame.size for frame in frames]
        counted = sum(s for s in sizes if s is not None) if None not in sizes else None
        stage_id = planned.stage.id
        facts = StepFacts(
            params,
            nothing_new=all(frame.known_empty for frame in frames),
            counted=counted,
            has_state=stage_id in self.states,
            previous=self.last_summaries.get(stage_id),
            release_at=self.release_at.get(stage_id),
        )
        run = ConnectRun(planned, inputs, params, side_inputs, facts)
        implementation: Callable[[ConnectBackend, ConnectRun], StageResult] = CONNECT.strategies.lookup(choose(planned, facts))
        return implementation(self, run)

    def materialise(
        self, stage: Stage, df: Any, collected: frozenset[int] = frozenset(), *, keeps_state: bool = False
    ) -> tuple[dict[int, Frame], StageSummary]:
        """Compute ``df`` (rows of ``tasks.ROWS``) once: the stage's outputs, and the sum
        of its tasks' reports (their metric updates go to the step's). The ``collected``
        outputs' rows come to the driver with the reports. When nothing but the driver reads
        the outputs (and the stage keeps no state rows, ``keeps_state``), one collect of
        ``df`` computes and fetches it all: nothing is kept on the server, one job and one
        request fewer. Either way a failed task attempt's rows are dropped with its reports.

        A lazy checkpoint keeps the partitions the collect computes but does not cut their
        lineage: Connect collects through ``submitJob``, after which Spark does not check
        what to checkpoint (only ``runJob`` does). So a stream's state rows, each step's
        read from the last step's, would keep every earlier step's shuffle files and kept
        partitions reachable on the server for as long as the stream runs. Every
        ``CUT_EVERY`` steps a keyed stage's checkpoint is eager (a job of its own, which
        cuts the lineage there); in between they stay lazy."""
        fetched = [tasks.REPORT, *sorted(collected)]
        kept = None
        with self.user_errors(), made_active(self.session):
            if not keeps_state and driver_alone_reads(stage, collected):
                rows = df.select("pcoll", "chunk").collect()
            else:
                eager = False
                if keeps_state:
                    spans = self.uncut.get(stage.id, 0) + 1
                    eager = spans >= CUT_EVERY
                    self.uncut[stage.id] = 0 if eager else spans
                kept = df.localCheckpoint(eager=eager)
                rows = kept.filter(kept["pcoll"].isin(fetched)).select("pcoll", "chunk").collect()
                self.kept.append(kept)
        held: dict[int, list[bytes]] = {pcoll: [] for pcoll in collected}
        reports: list[bytes] = []
        for pcoll, chunk in rows:
            (reports if pcoll == tasks.REPORT else held[pcoll]).append(chunk)
        summary = StageSummary()
        release: dict[int, int] | None = None
        for chunk in reports:
            report = tasks.read_report(chunk)
            if report.of_stage is None or report.of_stage == stage.id:
                summary = summary.merge(report.summary)
            else:
                self.handed_counts[report.of_stage] = self.handed_counts.get(report.of_stage, StageSummary()).merge(report.summary)
            self.updates = self.updates.combine(report.updates)
            if report.release_at is not None:
                release = {} if release is None else release
                for pcoll, watermark in report.release_at:
                    release[pcoll] = min(watermark, release.get(pcoll, MAX_TIMESTAMP.micros))
        if release is not None:
            self.release_at[stage.id] = release
        empty = summary.elements_out == 0
        outputs = {
            pcoll: Frame(
                None if empty or kept is None else kept.filter(kept["pcoll"] == pcoll), known_empty=empty, held=held.get(pcoll)
            )
            for pcoll in stage.outputs
        }
        return outputs, summary

    def user_errors(self) -> contextlib.AbstractContextManager[None]:
        return user_errors(self.error_key)

    def step_metrics(self) -> tuple[MetricUpdates, MetricUpdates]:
        """The step's committed metric updates, and those of failed attempts: none are
        known (a failed attempt's report is dropped with its rows; no listener yet)."""
        updates, self.updates = self.updates, MetricUpdates()
        return updates, MetricUpdates()

    # -- sinks and bookkeeping -------------------------------------------------------------
    def write(self, stage: Stage, datasets: dict[int, Frame], params: StepParams) -> None:
        """The stage's sinks, each written and committed on the server (``writes.py``): in
        batch Beam's files, in a stream a directory per step."""
        for sink in stage.sinks:
            (pcoll,) = sink.inputs
            frame = datasets.get(pcoll, Frame(None, known_empty=True, size=0))
            CONNECT.sinks.lookup(sink)(self, sink, frame, params)

    # -- checkpoints (a stream's, ``streaming.StreamRun``) -----------------------------------
    def save_state(self, directory: str, sealer: Any, step: int) -> dict[int, Any]:
        """Write each keyed stage's state under ``directory`` in the classic checkpoint format,
        a base or a delta, from the server's tasks (``state_files.py``); what each wrote."""
        from sparkbeam.runners.spark.backend import StateWrite
        from sparkbeam.runners.spark.connect.state_files import PLACEMENT, write_stage_state
        from sparkbeam.runners.spark.state_checkpoints import needs_base

        written = {}
        for stage_id, state in self.states.items():
            chain = self.chains.get(stage_id)
            base = chain is None or chain.placement != PLACEMENT or needs_base(chain, step, self.num_partitions)
            since = None if chain is None or base else chain.files[-1][0]
            name = f"state-{stage_id}" if base else f"delta-{stage_id}"
            size = write_stage_state(self, stage_id, state, commits.join(directory, name), sealer, since)
            written[stage_id] = StateWrite(name, base, size)
        return written

    def chains_after(self, step: int, written: dict[int, Any]) -> dict[int, Any]:
        """Each stage's chain once the checkpoint of ``step`` wrote ``written``: a new base,
        or the chain so far and a delta (as ``SparkBackend.chains_after``)."""
        from sparkbeam.runners.spark.connect.state_files import PLACEMENT
        from sparkbeam.runners.spark.state_checkpoints import Chain

        chains = {}
        for stage_id, (name, base, size) in written.items():
            chain = self.chains.get(stage_id)
            if base or chain is None:
                chains[stage_id] = Chain([(step, name)], self.num_partitions, size, 0, PLACEMENT)
            else:
                chains[stage_id] = Chain([*chain.files, (step, name)], chain.partitions, chain.base_bytes, chain.delta_bytes + size, PLACEMENT)
        return chains

    def read_back_state(self, chains: dict[int, Any], path_of: Callable[[int, str], str], sealer: Any, *, cut: bool = True) -> None:
        """After a checkpoint: the chains its next one extends. The state rows are not read
        back: their lineage is cut every ``CUT_EVERY`` steps by an eager ``localCheckpoint``
        (``materialise``; a classic run reads them back to cut it, ``SparkBackend.read_back_state``)."""
        self.chains = dict(chains)

    def snapshot(self) -> dict[str, Any]:
        return {"last_summaries": dict(self.last_summaries), "num_partitions": self.num_partitions}

    def restore(
        self, snapshot: dict[str, Any], state_paths: dict[int, str], chains: dict[int, Any], path_of: Callable[[int, str], str], sealer: Any
    ) -> None:
        """Load each keyed stage's state rows from its chain, on the server
        (``state_files.load_chain``: what a Connect run cannot read is refused, named)."""
        from sparkbeam.runners.spark.connect.state_files import load_chain
        from sparkbeam.runners.spark.state_checkpoints import StateFileError

        if state_paths:
            stage_id, path = next(iter(state_paths.items()))
            msg = (
                f"{path}: the keyed state of stage {stage_id} was written by an earlier sparkbeam (checkpoint format 5 "
                "or before), which a Spark Connect run does not read; resume it on a classic Spark session"
            )
            raise StateFileError(msg)
        self.last_summaries = dict(snapshot["last_summaries"])
        self.chains = {}
        for stage_id, chain in chains.items():
            self.states[stage_id] = load_chain(self, stage_id, chain, path_of, sealer)
            self.uncut[stage_id] = 0  # loaded by an eager checkpoint: no lineage behind it
            self.placed.discard(stage_id)  # shuffled into its partitions by its first step
            self.chains[stage_id] = chain

    def end_step(self, step: int) -> None:
        # Dropping the references lets the client release what the server keeps for them
        # (a stream's state rows keep the step's result they were filtered from).
        self.kept.clear()
        self.handed_counts.clear()

    def close(self) -> None:
        self.kept.clear()
        self.states.clear()


@contextlib.contextmanager
def user_errors(key: bytes) -> Iterator[None]:
    """Re-raise a task's failure as the user's exception, when its text carries a payload
    signed with the run's ``key`` (``tasks.ConnectTaskFailure``); any other failure as it is."""
    try:
        yield
    except Exception as failure:
        original = rebuild_user_error(_full_text(failure), key)
        if original is None:
            raise
        raise hide_engine_frames(original) from None


def _full_text(failure: BaseException) -> str:
    """A Connect error's text with what the server sent of the Python worker's failure."""
    parts = [str(failure)]
    for name in ("getMessage", "getServerStackTrace"):
        get = getattr(failure, name, None)
        if callable(get):
            with contextlib.suppress(Exception):
                parts.append(str(get() or ""))
    return "\n".join(parts)


CONNECT.strategies.register(Strategy.FUSED_MAP)(stages.fused_map)
CONNECT.strategies.register(Strategy.MAP_SIDE_PASS)(stages.map_side_pass)
CONNECT.strategies.register(Strategy.AS_READ)(stages.as_read)
CONNECT.strategies.register(Strategy.BATCH_COMBINE)(stages.batch_combine)
CONNECT.strategies.register(Strategy.UNLIFTED_GROUPING)(stages.unlifted_grouping)
CONNECT.strategies.register(Strategy.LIFTED_GROUPING)(stages.lifted_grouping)
CONNECT.strategies.register(Strategy.STATEFUL)(stages.stateful)
CONNECT.strategies.register(Strategy.SKIP_IDLE)(keyed_steps.skip_idle)
CONNECT.strategies.register(Strategy.SIDE_INPUT_WAIT)(side_input_steps.side_input_wait)
CONNECT.strategies.register(StateStore.HASH_BUCKETS)(bucketed_partition)
CONNECT.sources.register(TestStreamOp)(keyed_steps.scripted_step)
CONNECT.sources.register(CreateOp, ImpulseOp)(stages.driver_elements)
CONNECT.sources.register(ReadTextOp, BoundedSourceReadOp)(stages.bounded_read)
CONNECT.sources.register(StreamReadOp)(stages.write_ahead_log)
CONNECT.sources.register(SchemaAggregateOp)(sql_segments.read_segment)
CONNECT.sinks.register(WriteTextOp)(writes.text_sink)
CONNECT.sinks.register(WriteFilesPerStepOp)(writes.step_files_sink)
CONNECT.sinks.register(WriteKafkaOp)(kafka.write_sink)
