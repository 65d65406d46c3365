"""The step loop's data movement on Spark: RDDs of WindowedValue, keyed state in partitions.

Per step and stage:
- element-wise stages are one ``mapPartitions`` over the union of their inputs (lazy);
- a grouping stage shuffles its new elements with a fixed hash partitioner, unites them,
  partition by partition, with the state RDD of the previous step (same partitioner, so the
  state is never shuffled), runs the window and trigger logic and its fused body in one
  ``mapPartitions``, and collects one small summary per partition to the driver;
- in batch, a grouping whose trigger fires exactly once per window is a ``combineByKey``
  on (key, window) instead: the combiner is lifted before the shuffle;
- otherwise a combine is lifted too: each partition combines its new elements per (key,
  window) before the shuffle, and the engine merges the partials into the keyed state
  (``runners/core/lifting.py``);
- in a stream, a stage reading side inputs keeps the main-input elements that wait for
  them (``runners/core/side_input_wait.py``) in an RDD partitioned like grouping state:
  its new elements run in place, only those that must wait are shuffled into the parked
  state, and the parked state is released partition by partition, never shuffled.

What Spark runs per op type is registered under ``execution.backend_ops("Spark")``: the
sources in ``source_reads.py`` (Create, Impulse, ReadFromText, bounded sources, TestStream,
real streams) and ``sql_plan.py``, the grouping here, the file sinks in ``sinks.py``.
"""

from __future__ import annotations

import functools
import secrets
import uuid
from typing import Any

import attrs

from sparkbeam.io import commits
from sparkbeam.metrics.execution import MetricUpdates
from sparkbeam.runners.core import lifting
from sparkbeam.runners.core.execution import backend_ops
from sparkbeam.runners.core.grouping import engine_for
from sparkbeam.runners.core.grouping_step import nothing_due
from sparkbeam.runners.core.ops import (
    BoundedSourceReadOp,
    CreateOp,
    GroupOp,
    ImpulseOp,
    ReadTextOp,
    StatefulParDoOp,
    StreamReadOp,
    TestStreamOp,
)
from sparkbeam.runners.core.plan import Stage
from sparkbeam.runners.core.schema_segments import SchemaAggregateOp
from sparkbeam.runners.core.side_input_wait import must_wait
from sparkbeam.runners.core.sources import SourceEmission
from sparkbeam.runners.core.steps import StageResult, StageSummary, StepParams
from sparkbeam.runners.spark import (
    attempt_reports,
    batch_grouping,
    driver_stages,
    metrics,
    sealed_files,
    sinks,
    source_reads,
    sql_plan,
    stage_records,
    worker,
)
from sparkbeam.runners.spark.counters import read_and_release
from sparkbeam.runners.spark.errors import user_errors
from sparkbeam.runners.spark.sealing import Sealer
from sparkbeam.runners.spark.state_chunks import unpack_state
from sparkbeam.utils.timestamp import MAX_TIMESTAMP
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["SPARK", "Dataset", "SparkBackend"]

MAX = MAX_TIMESTAMP.micros
#: what the Spark backend runs, per op type
SPARK = backend_ops("Spark")


@attrs.frozen
class Dataset:
    """An RDD of WindowedValue; whether the driver knows it is empty (to skip idle work);
    and its elements when the stage's own job already fetched them."""

    rdd: Any
    known_empty: bool = False
    collected: list | None = None
    #: the bare body that makes ``rdd``, when a batch grouping may run it in its own pass
    #: (nothing else reads ``rdd``)
    upstream: batch_grouping.UpstreamBody | None = None
    #: the same elements' values alone, when each is in the global window at the minimum
    #: timestamp with an unknown pane (a text file's lines): a body reads them so
    values: Any = None
    #: how many elements there are, where the driver knows without holding them (a SQL
    #: plan's panes made on the executors)
    size: int | None = None


class EngineFactory:
    """Builds a stage's grouping engine on the executor (engines are cheap; specs pickle small)."""

    def __init__(self, op: GroupOp, overlapping_window_rule: bool, batch: bool) -> None:
        self.op = op
        self.overlapping_window_rule = overlapping_window_rule
        self.batch = batch

    def __call__(self) -> Any:
        return engine_for(self.op, overlapping_window_rule=self.overlapping_window_rule, batch=self.batch)


class SparkBackend:
    def __init__(
        self,
        spark: Any,
        *,
        num_partitions: int | None = None,
        overlapping_window_rule: bool = True,
    ) -> None:
        from pyspark.rdd import portable_hash

        self.spark = spark
        self.sc = spark.sparkContext
        self.num_partitions = num_partitions or max(2, self.sc.defaultParallelism)
        self.overlapping_window_rule = overlapping_window_rule
        # One partition function object for every shuffle into keyed state: Spark compares
        # partitioners by function identity when it unites state with new elements.
        self.partition_fn = portable_hash
        self.states: dict[int, Any] = {}
        self.steps_since_checkpoint: dict[int, int] = {}
        self.checkpoint_every = 16
        self.state_results: dict[int, Any] = {}
        self.last_summaries: dict[int, StageSummary] = {}
        self.step_cache: list[Any] = []
        self.broadcasts: list[Any] = []
        #: per stage reading side inputs: side input -> the watermark it must reach before
        #: anything parked can be released
        self.release_at: dict[int, dict[int, int]] = {}
        #: opens a real stream's write-ahead-log batches (a stream run sets it, see streaming.py)
        self.wal_sealer: Sealer | None = None
        #: the Spark job group of this run's jobs (to cancel them, and to follow them)
        self.job_group = f"sparkbeam-{uuid.uuid4().hex[:12]}"
        self.current_stage: str | None = None
        #: user metrics: the step's accumulator (made at its first stage) and the listener
        #: for failed attempts' updates (runners/spark/metrics.py)
        self.metrics_channel: metrics.MetricsChannel | None = None
        self.attempt_reports: attempt_reports.AttemptReports | None = None
        #: the run's key: executors sign the user errors they send back with it, and the
        #: driver unpickles none that it does not verify (runners/core/errors.py)
        self.error_key = secrets.token_bytes(32)
        #: keyed stages of the step whose summary job is put off, to run as one job with
        #: the others' (stage id, stage name, result RDD); see ``_run_put_off``
        self.put_off: list[tuple[int, str, Any]] = []
        #: whether tiny stages on what the driver holds may run here (driver_stages.py)
        self.driver_runs_stages = driver_stages.driver_can_run_stages(self.sc)

    # -- sources -----------------------------------------------------------------------
    def source_dataset(self, stage: Stage, emission: SourceEmission) -> Dataset:
        head = stage.head
        if head is None:
            msg = f"'{stage.name}' is not a source stage"
            raise TypeError(msg)
        read = SPARK.sources.lookup(head)
        if emission.is_empty:
            return self.empty()
        return read(self, head, emission)

    def empty(self) -> Dataset:
        return Dataset(self.sc.emptyRDD(), known_empty=True)

    def from_driver(self, elements: list[WindowedValue], keep: bool) -> Dataset:
        """Elements the driver holds, spread over the state's partitions; ``keep``: the
        dataset holds them too (collected without a job; a stage on them may run on the
        driver, ``driver_stages.py``)."""
        collected = elements if keep else None
        if not elements:
            return Dataset(self.sc.emptyRDD(), known_empty=True, collected=collected)
        slices = max(1, min(self.num_partitions, len(elements)))
        return Dataset(self.sc.parallelize(elements, slices), collected=collected)

    def union(self, datasets: list[Dataset]) -> Dataset:
        live = [d for d in datasets if not d.known_empty]
        if not live:
            return Dataset(self.sc.emptyRDD(), known_empty=True)
        if len(live) == 1:
            return live[0]
        return Dataset(self.sc.union([d.rdd for d in live]))

    def collect(self, dataset: Dataset) -> list[WindowedValue]:
        if dataset.collected is not None:
            return dataset.collected
        if dataset.known_empty:
            return []
        plain = dataset.rdd.mapPartitions(self._keyed(stage_records.as_plain_tuples))
        plain._jrdd_deserializer = stage_records.ElementsToTheDriver(plain._jrdd_deserializer)
        with user_errors(self.error_key):
            return plain.collect()

    # -- stages ------------------------------------------------------------------------
    def run_stage(
        self,
        stage: Stage,
        inputs: dict[int, Dataset],
        params: StepParams,
        side_inputs: dict[int, list[WindowedValue]],
        wanted: frozenset[int] = frozenset(),
    ) -> StageResult:
        # Named so that the Spark UI, its job descriptions and sparkbeam's progress show the
        # transform's label for every Spark job run for the stage.
        self.current_stage = stage.name
        self.sc.setJobGroup(self.job_group, f"{stage.name} (step {params.step})", True)
        side = None
        if side_inputs:
            side = self.sc.broadcast(side_inputs)
            self.broadcasts.append(side)
        grouping = stage.grouping
        if grouping is not None:
            group = SPARK.groupings.lookup(grouping)
            return group(self, grouping, stage, inputs, params, side, wanted)
        if must_wait(stage, params, stage.id in self.states):
            return self._run_waiting(stage, inputs, params, side, wanted)
        if stage.is_source and not stage.body and len(inputs) == 1:
            # A source whose elements the driver holds or has counted (a SQL plan's panes),
            # read as they are: no job runs an empty body over them.
            ((pcoll, held),) = inputs.items()
            count = len(held.collected) if held.collected is not None else held.size
            if count is not None and stage.outputs == (pcoll,):
                return StageResult({pcoll: held}, StageSummary(elements_in=count, elements_out=count))
        counters = (self.sc.accumulator(0), self.sc.accumulator(0))
        made_here = None
        if self.driver_runs_stages and driver_stages.runs_on_driver(stage, inputs):
            made_here = driver_stages.run_on_driver(stage, inputs, side_inputs, self._channel(), counters)
        source: Dataset | None = None
        body: Any = None
        if made_here is not None:
            outputs = {pcoll: self.from_driver(elements, keep=True) for pcoll, elements in made_here.items()}
        elif len(inputs) == 1 and len(stage.outputs) == 1:
            # The common chain: its elements need no PCollection ids in or out.
            ((pcoll, source),) = inputs.items()
            shipped = stage_records.shippable(stage)
            by_value = source.values is not None
            run = worker.run_bare_body_on_values if by_value else worker.run_bare_body
            entering = source.values if by_value else source.rdd
            body = entering.mapPartitions(self._metered(run, shipped, side, counters, pcoll))
            body.setName(stage.name)
            upstream = batch_grouping.UpstreamBody(entering, shipped, side, counters, pcoll, by_value)
            outputs = self._bare_output(stage, body, source.known_empty, wanted, upstream)
        else:
            entering = [
                Dataset(d.rdd.mapPartitions(functools.partial(worker.tagged, pcoll)), d.known_empty)
                for pcoll, d in inputs.items()
            ]
            source = self.union(entering)
            body = source.rdd.mapPartitions(self._metered(worker.run_body, stage_records.shippable(stage), side, counters))
            body.setName(stage.name)
            outputs = self._split(stage, body, source.known_empty, wanted)
        if source is not None and not stage.outputs and not stage.sinks and not source.known_empty:
            with user_errors(self.error_key):
                body.count()  # a leaf stage: nothing downstream will make Spark run it

        def summary() -> StageSummary:
            elements_in, elements_out = read_and_release(*counters)
            return StageSummary(elements_in=elements_in, elements_out=elements_out)

        return StageResult(outputs, summary)

    def _split(self, stage: Stage, tagged_rdd: Any, known_empty: bool, wanted: frozenset[int]) -> dict[int, Dataset]:
        if not stage.outputs:
            return {}
        # Read more than once (several outputs, one output read by several consumers, or
        # collected and consumed downstream): persist, so that the stage's DoFns run once.
        if len(stage.outputs) > 1 or wanted or stage.shared_outputs:
            tagged_rdd = tagged_rdd.persist()
            self.step_cache.append(tagged_rdd)
        return {
            pcoll: Dataset(tagged_rdd.mapPartitions(functools.partial(stage_records.select_tagged, pcoll)), known_empty)
            for pcoll in stage.outputs
        }

    def _bare_output(
        self, stage: Stage, rdd: Any, known_empty: bool, wanted: frozenset[int], upstream: batch_grouping.UpstreamBody | None = None
    ) -> dict[int, Dataset]:
        """``_split`` for a body that yields its one output's elements bare (``run_bare_body``);
        ``upstream``: that body, for a batch grouping to run in its own pass when it alone
        reads the output."""
        (pcoll,) = stage.outputs
        # Persisted only when read more than once (``shared_outputs`` counts the collect of
        # a captured or side-input output as a reader): an output only collected is read by
        # that one job, and storing it would pickle every element twice more on its way.
        if stage.shared_outputs:
            rdd = rdd.persist()
            self.step_cache.append(rdd)
            upstream = None
        return {pcoll: Dataset(rdd, known_empty, upstream=upstream)}

    def _run_grouping(
        self,
        grouping: GroupOp | StatefulParDoOp,
        stage: Stage,
        inputs: dict[int, Dataset],
        params: StepParams,
        side: Any,
        wanted: frozenset[int],
    ) -> StageResult:
        (source_pcoll,) = grouping.inputs
        new = inputs[source_pcoll]
        stateful = isinstance(grouping, StatefulParDoOp)
        if params.batch and not stateful and batch_grouping.applies(grouping):
            return self._run_batch_grouping(stage, grouping, new, side, wanted)
        previous = self.last_summaries.get(stage.id)
        if new.known_empty and nothing_due(previous, params, has_state=stage.id in self.states, side_inputs=side is not None):
            kept = previous or StageSummary()
            summary = kept.for_idle_step()
            return StageResult({pcoll: Dataset(self.sc.emptyRDD(), True) for pcoll in stage.outputs}, summary)
        state = self.states.get(stage.id)
        if new.known_empty and state is not None:
            combined = state  # only timers to fire: no shuffle at all
        else:
            if stateful:
                keyed = new.rdd.mapPartitions(self._keyed(worker.keyed_for_state, grouping))
            elif lifting.lifts(grouping):
                # The combine lifted: one record per key and window of each partition.
                keyed = new.rdd.mapPartitions(
                    self._metered(worker.precombined, grouping, self.overlapping_window_rule, params.output_watermark)
                )
            else:
                keyed = new.rdd.mapPartitions(self._keyed(worker.keyed_elements, grouping))
            shuffled = keyed.partitionBy(self.num_partitions, self.partition_fn)
            combined = shuffled if state is None else state.union(shuffled)
        if combined.getNumPartitions() != self.num_partitions:
            msg = (
                f"'{grouping.label}': Spark did not unite the state with the new elements partition by "
                "partition (their partitioners differ); this is a sparkbeam bug"
            )
            raise RuntimeError(msg)
        if stateful:
            # A stateful DoFn's state and timers live in the same keyed-state RDD as grouping
            # state: united with the step's elements partition by partition, never shuffled.
            step = self._metered(worker.stateful_partition_step, stage_records.shippable(stage), params, side)
        else:
            factory = EngineFactory(grouping, self.overlapping_window_rule, params.batch)
            step = self._metered(worker.grouping_partition, stage_records.shippable(stage), factory, params, side)
        result = combined.mapPartitions(step, preservesPartitioning=True)
        # The state of step n derives from step n-1's: truncate that lineage every few steps
        # (a checkpoint costs a write of the state, so not every step).
        # Persisting first also stops PySpark from pipelining the next mapPartitions into
        # this one, which would leave the checkpoint unwritten.
        result.setName(f"{stage.name} (keyed state and panes)").persist()
        steps_since = self.steps_since_checkpoint.get(stage.id, 0) + 1
        if steps_since >= self.checkpoint_every:
            result.localCheckpoint()
            steps_since = 0
        self.steps_since_checkpoint[stage.id] = steps_since
        self.states[stage.id] = result.mapPartitions(stage_records.strip_state, preservesPartitioning=True)
        stale = self.state_results.get(stage.id)
        self.state_results[stage.id] = result
        if stale is not None:
            self.step_cache.append(stale)  # unpersisted at the end of the step
        if not params.batch and not wanted:
            # In a stream, the summary job waits, to run with the step's other keyed stages'
            # as one job: a Spark job costs far more than the few records a step moves.
            self.put_off.append((stage.id, stage.name, result))
            outputs = {pcoll: Dataset(result.mapPartitions(functools.partial(stage_records.select, pcoll))) for pcoll in stage.outputs}
            return StageResult(outputs, functools.partial(self._put_off_summary, stage.id), deferred=True)
        # One job per stage and step: the summaries, and the outputs the loop will collect.
        with user_errors(self.error_key):
            fetched = result.mapPartitions(functools.partial(stage_records.summaries_and, wanted)).collect()
        summary, collected, _ = stage_records.sort_fetched(fetched, wanted)
        self.last_summaries[stage.id] = summary
        # With no pane fired, the fused body saw nothing and emitted nothing.
        outputs = {
            pcoll: Dataset(
                result.mapPartitions(functools.partial(stage_records.select, pcoll)),
                summary.elements_out == 0,
                collected.get(pcoll),
            )
            for pcoll in stage.outputs
        }
        return StageResult(outputs, summary)

    def _put_off_summary(self, stage_id: int) -> StageSummary:
        """A put-off stage's summary: the first one asked for runs every put-off job, as one."""
        if self.put_off:
            self._run_put_off()
        return self.last_summaries[stage_id]

    def _run_put_off(self) -> None:
        put_off, self.put_off = self.put_off, []
        names = ", ".join(name for _, name, _ in put_off)
        self.sc.setJobGroup(self.job_group, f"{names} (summaries)", True)
        summaries = [result.mapPartitions(functools.partial(stage_records.stage_summaries, stage_id)) for stage_id, _, result in put_off]
        with user_errors(self.error_key):
            fetched = (summaries[0] if len(summaries) == 1 else self.sc.union(summaries)).collect()
        parts: dict[int, list[StageSummary]] = {stage_id: [] for stage_id, _, _ in put_off}
        for stage_id, summary in fetched:
            parts[stage_id].append(summary)
        for stage_id, found in parts.items():
            self.last_summaries[stage_id] = functools.reduce(StageSummary.merge, found, StageSummary())

    def _run_waiting(
        self, stage: Stage, inputs: dict[int, Dataset], params: StepParams, side: Any, wanted: frozenset[int]
    ) -> StageResult:
        """A streaming step of a stage reading side inputs: release the parked elements whose
        side inputs are now ready, run the ready new ones in place, park the rest."""
        (source_pcoll,) = stage.inputs
        new = inputs[source_pcoll]
        state = self.states.get(stage.id)
        release_at = self.release_at.get(stage.id)
        stuck = release_at is not None and all(
            watermark < release_at.get(pcoll, MAX) for pcoll, watermark in params.side_input_watermarks
        )
        if new.known_empty and (state is None or stuck):
            # Nothing new, and no side input has reached a window something waits for.
            kept = self.last_summaries.get(stage.id) if state is not None else None
            summary = (kept or StageSummary()).for_idle_step()
            return StageResult({pcoll: Dataset(self.sc.emptyRDD(), True) for pcoll in stage.outputs}, summary)
        ship = stage_records.shippable(stage)
        passes = []  # RDDs of the step's records: outputs, summaries, parked elements
        parked_parts = []
        if state is not None:
            released = state.mapPartitionsWithIndex(
                self._metered(worker.waiting_partition, ship, side, params, self.num_partitions, True),
                preservesPartitioning=True,
            )
            passes.append(self._once(released))
            parked_parts.append(released.mapPartitions(stage_records.parked, preservesPartitioning=True))
        if not new.known_empty:
            fresh = new.rdd.mapPartitionsWithIndex(
                self._metered(worker.waiting_partition, ship, side, params, self.num_partitions, False)
            )
            passes.append(self._once(fresh))
            parked_parts.append(fresh.mapPartitions(stage_records.parked).partitionBy(self.num_partitions, self.partition_fn))
        parked = parked_parts[0] if len(parked_parts) == 1 else parked_parts[0].union(parked_parts[1])
        if parked.getNumPartitions() != self.num_partitions:
            msg = (
                f"'{stage.name}': Spark did not unite the parked elements with the new ones partition by "
                "partition (their partitioners differ); this is a sparkbeam bug"
            )
            raise RuntimeError(msg)
        parked.persist()
        steps_since = self.steps_since_checkpoint.get(stage.id, 0) + 1
        if steps_since >= self.checkpoint_every:
            parked.localCheckpoint()  # as grouping state: truncate the lineage now and then
            steps_since = 0
        self.steps_since_checkpoint[stage.id] = steps_since
        # One job: the summaries and wanted outputs of both passes, and the new parked state.
        collect = [records.mapPartitions(functools.partial(stage_records.reports_and, wanted)) for records in passes]
        with user_errors(self.error_key):
            fetched = self.sc.union([*collect, parked.mapPartitions(stage_records.materialise)]).collect()
        summary, collected, release = stage_records.sort_fetched(fetched, wanted)
        self.last_summaries[stage.id] = summary
        self.release_at[stage.id] = release
        stale = self.state_results.pop(stage.id, None)
        if stale is not None:
            self.step_cache.append(stale)  # unpersisted at the end of the step
        if summary.side_input_waiting:
            self.states[stage.id] = self.state_results[stage.id] = parked
        else:
            self.states.pop(stage.id, None)  # nothing waits: no state to keep or checkpoint
            self.step_cache.append(parked)
        out = passes[0] if len(passes) == 1 else self.sc.union(passes)
        outputs = {
            pcoll: Dataset(out.mapPartitions(functools.partial(stage_records.select, pcoll)), summary.elements_out == 0, collected.get(pcoll))
            for pcoll in stage.outputs
        }
        return StageResult(outputs, summary)

    def _once(self, records: Any) -> Any:
        """Persist an RDD that several jobs or RDDs read (before deriving them, or PySpark
        fuses its function into each reader and runs it once per reader), for this step."""
        records.persist()
        self.step_cache.append(records)
        return records

    def _run_batch_grouping(
        self, stage: Stage, grouping: GroupOp, new: Dataset, side: Any, wanted: frozenset[int]
    ) -> StageResult:
        (head_output,) = grouping.outputs
        counters = (self.sc.accumulator(0), self.sc.accumulator(0))
        panes = batch_grouping.group(
            new.rdd, grouping, self.num_partitions, self.overlapping_window_rule, counters[0], self._channel(), new.upstream
        )
        body_counters = (self.sc.accumulator(0), self.sc.accumulator(0))
        if len(stage.outputs) == 1:
            body = panes.mapPartitions(self._metered(worker.run_bare_body, stage_records.shippable(stage), side, body_counters, head_output))
            outputs = self._bare_output(stage, body, new.known_empty, wanted)
        else:
            entering = panes.mapPartitions(functools.partial(worker.tagged, head_output))
            body = entering.mapPartitions(self._metered(worker.run_body, stage_records.shippable(stage), side, body_counters))
            outputs = self._split(stage, body, new.known_empty, wanted)
        if not stage.outputs and not stage.sinks:
            with user_errors(self.error_key):
                body.count()

        def summary() -> StageSummary:
            elements_in, _, elements_out, _ = read_and_release(*counters, *body_counters)
            return StageSummary(elements_in=elements_in, elements_out=elements_out)

        return StageResult(outputs, summary)

    # -- metrics --------------------------------------------------------------------------
    def _channel(self) -> metrics.MetricsChannel:
        """The step's metrics channel: one accumulator for every stage of the step."""
        if self.attempt_reports is None:
            conf = self.sc.getConf()
            bind_host, advertised_host = attempt_reports.listen_addresses(conf)
            encrypted = attempt_reports.encrypted_channel_wanted(conf)
            self.attempt_reports = attempt_reports.AttemptReports(bind_host, advertised_host, encrypted=encrypted)
        if self.metrics_channel is None:
            accumulator = self.sc.accumulator(MetricUpdates(), metrics.MetricsParam())
            self.metrics_channel = metrics.MetricsChannel(accumulator, self.attempt_reports.channel(), self.error_key)
        return self.metrics_channel

    def _metered(self, function: Any, *args: Any) -> Any:
        """``function`` bound to ``args`` for ``mapPartitions``, its task's metrics reported."""
        return functools.partial(metrics.metered, self._channel(), function, *args)

    def _keyed(self, function: Any, *args: Any) -> Any:
        """``function`` bound to ``args`` for ``mapPartitions``, its task given the run's key
        for user errors (``metrics.with_channel``): no user code of its own to meter."""
        return functools.partial(metrics.with_channel, self._channel(), function, *args)

    def step_metrics(self) -> tuple[MetricUpdates, MetricUpdates]:
        """After the step's jobs: what its successful tasks committed, and what failed
        attempts reported."""
        channel, self.metrics_channel = self.metrics_channel, None
        committed = read_and_release(channel.accumulator)[0] if channel is not None else MetricUpdates()
        failed = self.attempt_reports.take() if self.attempt_reports is not None else MetricUpdates()
        return committed, failed

    # -- sinks and bookkeeping ----------------------------------------------------------
    def write(self, stage: Stage, datasets: dict[int, Dataset], params: StepParams) -> None:
        """Each sink as Spark writes it (``sinks.py``): in a stream, a directory per step."""
        for sink in stage.sinks:
            (pcoll,) = sink.inputs
            dataset = datasets[pcoll]
            with user_errors(self.error_key):
                sinks.write(self.sc, sink, dataset.rdd, dataset.known_empty, params, self._channel())

    def end_step(self, step: int) -> None:
        if self.put_off:
            self._run_put_off()  # a backend driven by hand, with no summary asked for
        for rdd in self.step_cache:
            rdd.unpersist()
        self.step_cache.clear()
        for broadcast in self.broadcasts:
            broadcast.unpersist()
        self.broadcasts.clear()

    # -- checkpoints ----------------------------------------------------------------------
    def save_state(self, directory: str, sealer: Sealer) -> dict[int, str]:
        """Write each grouping stage's keyed state under ``directory``, sealed with
        ``sealer`` (``sealed_files.py``); {stage id: file name}."""
        written = {}
        self.sc.setJobGroup(self.job_group, f"checkpoint of the keyed state in {directory}", True)
        for stage_id, state in self.states.items():
            name = f"state-{stage_id}"
            with user_errors(self.error_key):
                sealed_files.save_records(state, commits.join(directory, name), sealer, "state")
            written[stage_id] = name
        return written

    def snapshot(self) -> dict[str, Any]:
        return {"last_summaries": dict(self.last_summaries), "num_partitions": self.num_partitions}

    def restore(self, snapshot: dict[str, Any], state_paths: dict[int, str], sealer: Sealer) -> None:
        """Load keyed state saved by ``save_state`` (re-partitioned with this run's
        partitioner); each piece is checked with ``sealer`` before it is unpickled."""
        self.last_summaries = dict(snapshot["last_summaries"])
        for stage_id, path in state_paths.items():
            # Chunks back to (key, KeyedState), which this run's partitioner places.
            saved = sealed_files.read_records(self.sc, path, sealer, "state").mapPartitions(unpack_state)
            state = saved.partitionBy(self.num_partitions, self.partition_fn).persist()
            self.states[stage_id] = state
            self.state_results[stage_id] = state

    def close(self) -> None:
        if self.attempt_reports is not None:
            self.attempt_reports.close()
            self.attempt_reports = None
        self.end_step(-1)
        for rdd in self.state_results.values():
            rdd.unpersist()
        self.state_results.clear()
        self.states.clear()


# A stateful DoFn keeps its state and timers as a grouping does: the same keyed-state path.
SPARK.groupings.register(GroupOp, StatefulParDoOp)(SparkBackend._run_grouping)


# What each source gives a step (source_reads.py), and a schema'd segment: one SQL query,
# its panes back through Arrow (sql_plan.py).
SPARK.sources.register(CreateOp, ImpulseOp)(source_reads.driver_elements)
SPARK.sources.register(ReadTextOp)(source_reads.text_lines)
SPARK.sources.register(BoundedSourceReadOp)(source_reads.bounded_source)
SPARK.sources.register(TestStreamOp)(source_reads.test_stream_step)
SPARK.sources.register(StreamReadOp)(source_reads.write_ahead_log)
SPARK.sources.register(SchemaAggregateOp)(sql_plan.read_segment)
