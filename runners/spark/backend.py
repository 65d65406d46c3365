"""The step loop's data movement on Spark: RDDs of WindowedValue, keyed state in partitions.

How each stage runs is the physical plan's choice (``runners/core/plan/physical.py``), made
before the first step from what this backend registered and what its session allows
(``capabilities``): for every stage, a strategy, and alternatives for what only a step's
data decides (an idle step skipped, a tiny stage on the driver), checked by the plan's one
shared ``choose``. ``run_stage`` gathers the step's facts, asks ``choose`` and runs the
strategy registered for the answer; it makes no choice of its own:

- the element-wise strategies (a fused map, a map-side pass into a batch grouping, a
  source handed on as read, a run on the driver, a batch combine by key) are in
  ``element_stages.py``;
- the keyed ones (lifted or unlifted grouping, a stateful DoFn, a side-input wait, an idle
  step skipped) in ``keyed_stages.py``.

What Spark reads per source op type is registered under ``SPARK.sources``: the sources in
``source_reads.py`` (Create, Impulse, ReadFromText, bounded sources, TestStream, real
streams) and ``sql_plan.py``; the file sinks are ``sinks.py``'s.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from pyspark import StorageLevel

from sparkbeam.io import commits
from sparkbeam.metrics.execution import MetricUpdates
from sparkbeam.runners.core.elements.execution import backend_ops
from sparkbeam.runners.core.loop.steps import StageResult
from sparkbeam.runners.core.lowering.ops import (
    BoundedSourceReadOp,
    CreateOp,
    ImpulseOp,
    ReadTextOp,
    StreamReadOp,
    TestStreamOp,
)
from sparkbeam.runners.core.lowering.step_values import StageSummary, StepParams
from sparkbeam.runners.core.lowering.strategies import Capabilities, StateStore, Strategy
from sparkbeam.runners.core.plan.physical import PlannedStage, choose
from sparkbeam.runners.core.plan.plan import Stage
from sparkbeam.runners.core.schema.schema_segments import SchemaAggregateOp
from sparkbeam.runners.core.sources.sources import SourceEmission
from sparkbeam.runners.spark import (
    attempt_reports,
    driver_stages,
    element_stages,
    keyed_stages,
    metrics,
    sealed_files,
    sinks,
    source_reads,
    sql_plan,
    stage_records,
    state_checkpoints,
)
from sparkbeam.runners.spark.counters import read_and_release
from sparkbeam.runners.spark.datasets import Dataset, StageRun, step_facts
from sparkbeam.runners.spark.errors import user_errors
from sparkbeam.runners.spark.sealing import Sealer
from sparkbeam.runners.spark.state_chunks import bucketed_partition, unpack_state
from sparkbeam.utils.windowed_value import WindowedValue

__all__ = ["SPARK", "Dataset", "SparkBackend", "StateWrite", "spark_capabilities"]

#: what the Spark backend runs: per source op type, per strategy, per sink op type
SPARK = backend_ops("Spark")

#: the longest lineage of keyed state, in steps, that a stream run lets grow between its
#: checkpoints before a local checkpoint cuts it (``truncate_lineage_now_and_then``)
LINEAGE_STEPS = 50

#: How every RDD the backend caches is kept (``SparkBackend.keep``): keyed state, parked elements, what
#: a restore or a checkpoint's lineage cut reads back, and a step's RDDs read by several
#: jobs. PySpark's default, MEMORY_ONLY, drops a block that does not fit in the storage
#: memory and recomputes it when read: for keyed state that is every step since the last
#: lineage cut run again (user code included), and its reads of log batches or checkpoint
#: files that pruning may have deleted since. MEMORY_AND_DISK writes such a block to the
#: executor's local disk instead (``spark.local.dir``), read back at disk speed. PySpark's
#: records are pickled bytes already, so there is no ``_SER`` level to choose (this one is
#: serialised); no replication, which would copy all the state to a second executor every
#: step to save a rebuild from the checkpoint's files that only executor loss needs.
KEPT = StorageLevel.MEMORY_AND_DISK


class StateWrite(NamedTuple):
    """What a checkpoint wrote of one stage's state: the file's name, whether it is a base
    (else a delta, ``state_checkpoints.py``) and about how many bytes of state it holds."""

    name: str
    base: bool
    size: int


def spark_capabilities(*, driver_runs_tiny_stages: bool) -> Capabilities:
    """What the physical plan may use on Spark: every strategy registered here; tiny stages
    on the driver where the session allows (``driver_stages.driver_can_run_stages``); a
    stream's keyed summary jobs put off to run as one; lazy RDDs (a stage nothing reads
    needs a job of its own)."""
    return SPARK.capabilities(driver_runs_tiny_stages=driver_runs_tiny_stages, puts_off_summaries=True, lazy=True)


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
        #: per keyed stage, the checkpoint files its state is read from (base and deltas)
        self.chains: dict[int, state_checkpoints.Chain] = {}
        self.steps_since_checkpoint: dict[int, int] = {}
        self.checkpoint_every = 16
        #: a stream run cuts keyed state's lineage at each of its checkpoints instead
        #: (``read_back_state``); see ``truncate_lineage_now_and_then``
        self.truncates_at_checkpoints = False
        self.state_results: dict[int, Any] = {}
        self.last_summaries: dict[int, StageSummary] = {}
        self.step_cache: list[Any] = []
        self.broadcasts: list[Any] = []
        #: per stage reading side inputs: side input -> the watermark it must reach before
        #: anything parked can be released
        self.release_at: dict[int, dict[int, int]] = {}
        #: opens a real stream's write-ahead-log batches (a stream run sets it, see streaming.py)
        self.wal_sealer: Sealer | None = None
        #: names this run in what sinks mark their records with (a stream: its checkpoint's id)
        self.run_id = uuid.uuid4().hex
        #: the Spark job group of this run's jobs (to cancel them, and to follow them)
        self.job_group = f"sparkbeam-{uuid.uuid4().hex[:12]}"
        self.current_stage: str | None = None
        #: user metrics: the step's accumulator (made at its first stage) and the listener
        #: for failed attempts' updates (runners/spark/metrics.py)
        self.metrics_channel: metrics.MetricsChannel | None = None
        self.attempt_reports: attempt_reports.AttemptReports | None = None
        #: the run's key: executors sign the user errors they send back with it, and the
        #: driver unpickles none that it does not verify (runners/core/lowering/errors.py)
        self.error_key = secrets.token_bytes(32)
        #: keyed stages of the step whose summary job is put off, to run as one job with
        #: the others' (stage id, stage name, result RDD); see ``keyed_stages.run_put_off``
        self.put_off: list[tuple[int, str, Any]] = []
        #: whether tiny stages on what the driver holds may run here (driver_stages.py)
        self.driver_runs_stages = driver_stages.driver_can_run_stages(self.sc)

    def capabilities(self) -> Capabilities:
        return spark_capabilities(driver_runs_tiny_stages=self.driver_runs_stages)

    def strategy(self, strategy: Strategy) -> Callable[[SparkBackend, StageRun], StageResult]:
        """How this backend runs ``strategy``."""
        return SPARK.strategies.lookup(strategy)

    def state_store(self, planned: PlannedStage) -> Any:
        """What a keyed stage's tasks build to hold a partition's state for a step, for the
        store the plan chose (``StateStore``): a picklable factory."""
        return SPARK.state_store(planned.stage.name, planned.state_store)

    # -- sources -----------------------------------------------------------------------
    def source_dataset(self, planned: PlannedStage, emission: SourceEmission) -> Dataset:
        stage = planned.stage
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
        plain = dataset.rdd.mapPartitions(self.keyed(stage_records.as_plain_tuples))
        plain._jrdd_deserializer = stage_records.ElementsToTheDriver(plain._jrdd_deserializer)
        with user_errors(self.error_key):
            return plain.collect()

    # -- stages ------------------------------------------------------------------------
    def run_stage(
        self,
        planned: PlannedStage,
        inputs: dict[int, Dataset],
        params: StepParams,
        side_inputs: dict[int, list[WindowedValue]],
    ) -> StageResult:
        """Run the stage's step by the strategy the plan's ``choose`` names for it."""
        stage = planned.stage
        # Named so that the Spark UI, its job descriptions and sparkbeam's progress show the
        # transform's label for every Spark job run for the stage.
        self.current_stage = stage.name
        self.sc.setJobGroup(self.job_group, f"{stage.name} (step {params.step})", True)
        side = None
        if side_inputs:
            side = self.sc.broadcast(side_inputs)
            self.broadcasts.append(side)
        facts = step_facts(
            planned,
            inputs,
            params,
            has_state=stage.id in self.states,
            previous=self.last_summaries.get(stage.id),
            release_at=self.release_at.get(stage.id),
        )
        run = StageRun(planned, inputs, params, side_inputs, side, facts)
        return self.strategy(choose(planned, facts))(self, run)

    def keep(self, rdd: Any) -> Any:
        """``rdd`` persisted at ``KEPT``: the one way the backend and its strategies cache an
        RDD (``rdd.persist()`` would be MEMORY_ONLY)."""
        return rdd.persist(KEPT)

    def once(self, records: Any) -> Any:
        """Persist an RDD that several jobs or RDDs read (before deriving them, or PySpark
        fuses its function into each reader and runs it once per reader), for this step."""
        self.step_cache.append(self.keep(records))
        return records

    def truncate_lineage_now_and_then(self, stage_id: int, state: Any) -> None:
        """Keyed state of step n derives from step n-1's: cut that lineage every
        ``checkpoint_every`` steps (a local checkpoint writes the state, so not every step).
        ``state`` is persisted already.

        A local checkpoint lives in the executors' block managers only: once an executor is
        lost, Spark can neither read nor rebuild its blocks, and the next job fails. So a
        stream run, whose checkpoints cut the lineage instead (``read_back_state``), takes
        one only if its checkpoints are further apart than ``LINEAGE_STEPS`` (a lineage
        that long makes every task's description long to build and to ship)."""
        steps_since = self.steps_since_checkpoint.get(stage_id, 0) + 1
        if steps_since >= (LINEAGE_STEPS if self.truncates_at_checkpoints else self.checkpoint_every):
            state.localCheckpoint()
            steps_since = 0
        self.steps_since_checkpoint[stage_id] = steps_since

    # -- metrics --------------------------------------------------------------------------
    def channel(self) -> metrics.MetricsChannel:
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

    def metered(self, function: Any, *args: Any) -> Any:
        """``function`` bound to ``args`` for ``mapPartitions``, its task's metrics reported."""
        return functools.partial(metrics.metered, self.channel(), function, *args)

    def keyed(self, function: Any, *args: Any) -> Any:
        """``function`` bound to ``args`` for ``mapPartitions``, its task given the run's key
        for user errors (``metrics.with_channel``): no user code of its own to meter."""
        return functools.partial(metrics.with_channel, self.channel(), function, *args)

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
                sinks.write(self.sc, sink, dataset.rdd, dataset.known_empty, params, self.channel(), run=self.run_id)

    def end_step(self, step: int) -> None:
        if self.put_off:
            keyed_stages.run_put_off(self)  # a backend driven by hand, with no summary asked for
        for rdd in self.step_cache:
            rdd.unpersist()
        self.step_cache.clear()
        for broadcast in self.broadcasts:
            broadcast.unpersist()
        self.broadcasts.clear()

    # -- checkpoints ----------------------------------------------------------------------
    def save_state(self, directory: str, sealer: Sealer, step: int) -> dict[int, StateWrite]:
        """Write each keyed stage's state under ``directory``, sealed with ``sealer``
        (``sealed_files.py``): a base, or the delta of the buckets written since the stage's
        last checkpoint (``state_checkpoints.py``); what each stage wrote."""
        written = {}
        self.sc.setJobGroup(self.job_group, f"checkpoint of the keyed state in {directory}", True)
        for stage_id, state in self.states.items():
            chain = self.chains.get(stage_id)
            base = chain is None or state_checkpoints.needs_base(chain, step, self.num_partitions)
            since = None if chain is None or base else chain.files[-1][0]
            name = f"state-{stage_id}" if base else f"delta-{stage_id}"
            with user_errors(self.error_key):
                size = state_checkpoints.write_state(self.sc, state, commits.join(directory, name), sealer, since)
            written[stage_id] = StateWrite(name, base, size)
        return written

    def chains_after(self, step: int, written: dict[int, StateWrite]) -> dict[int, state_checkpoints.Chain]:
        """Each stage's chain of state files once the checkpoint of ``step`` has written
        ``written`` (``save_state``): a new base, or the chain so far and a delta."""
        chains = {}
        for stage_id, (name, base, size) in written.items():
            chain = self.chains.get(stage_id)
            if base or chain is None:
                chains[stage_id] = state_checkpoints.Chain([(step, name)], self.num_partitions, size, 0)
            else:
                chains[stage_id] = state_checkpoints.Chain(
                    [*chain.files, (step, name)], chain.partitions, chain.base_bytes, chain.delta_bytes + size
                )
        return chains

    def read_back_state(
        self, chains: dict[int, state_checkpoints.Chain], path_of: Callable[[int, str], str], sealer: Sealer, *, cut: bool = True
    ) -> None:
        """After a checkpoint: the chains the next checkpoint extends and, with ``cut``, each
        stage's keyed state from now on read from the files of its chain (``chains_after``;
        ``path_of(step, name)`` their paths: base and deltas, ``state_checkpoints``), each
        record back into its partition, so that its lineage starts at those files. Without
        ``cut`` (the files the lineage reaches outlive this checkpoint's pruning,
        ``StreamRun._cuts_lineage``) the cached state stays as it is.

        Spark rebuilds a lost cached partition from its lineage. Without this cut, the
        lineage of the state went back through every step since the last truncation, to
        write-ahead-log batches and checkpoint files that pruning deletes (a run restored
        from a checkpoint read its state from files two checkpoints prune); an executor lost
        then failed the run with a missing file. The files of the newest checkpoint's chains
        and the log batches after it outlive the next checkpoint (``CheckpointStore.prune``
        keeps every file the kept manifests name), and every later state derives from them
        alone.

        Costs, once per checkpoint: no write (the checkpoint's files are read), but the next
        step reads the state from the files and shuffles it once into its partitions (the
        cached copy is dropped now) instead of reading it from Spark's cache."""
        if not cut:
            self.chains = dict(chains)
            return
        for stage_id, chain in chains.items():
            directories = [path_of(at, file) for at, file in chain.files]
            state = state_checkpoints.read_chain(self.sc, stage_id, directories, sealer, self.partition_fn, self.num_partitions)
            self.keep(state.setName(f"stage {stage_id} keyed state, read back from {directories[-1]}"))
            stale = self.state_results.get(stage_id)
            if stale is not None:
                stale.unpersist()
            self.states[stage_id] = self.state_results[stage_id] = state
            self.steps_since_checkpoint[stage_id] = 0
        self.chains = dict(chains)  # a stage with no state now starts a new chain

    def snapshot(self) -> dict[str, Any]:
        return {"last_summaries": dict(self.last_summaries), "num_partitions": self.num_partitions}

    def restore(
        self, snapshot: dict[str, Any], state_paths: dict[int, str], chains: dict[int, state_checkpoints.Chain], path_of: Callable[[int, str], str], sealer: Sealer
    ) -> None:
        """Load keyed state: each stage's chain of base and deltas (``state_checkpoints``),
        or, written by format 5 or earlier, the one file ``state_paths`` names
        (re-partitioned with this run's partitioner). Each piece is checked with
        ``sealer`` before it is unpickled."""
        self.last_summaries = dict(snapshot["last_summaries"])
        self.chains = {}
        for stage_id, chain in chains.items():
            directories = [path_of(at, file) for at, file in chain.files]
            state = state_checkpoints.read_chain(self.sc, stage_id, directories, sealer, self.partition_fn, chain.partitions)
            if chain.partitions == self.num_partitions and chain.placement == state_checkpoints.PORTABLE_HASH:
                self.chains[stage_id] = chain  # the next checkpoint adds a delta to it
            else:
                # --state_partitions changed, or a Spark Connect run wrote the state (its
                # partitions hold other keys): every key placed again, and a new base.
                state = state.mapPartitions(unpack_state).partitionBy(self.num_partitions, self.partition_fn)
            self.states[stage_id] = self.state_results[stage_id] = self.keep(state)
        for stage_id, path in state_paths.items():
            # Chunks back to (key, KeyedState), which this run's partitioner places.
            saved = sealed_files.read_records(self.sc, path, sealer, "state").mapPartitions(unpack_state)
            state = self.keep(saved.partitionBy(self.num_partitions, self.partition_fn))
            self.states[stage_id] = state
            self.state_results[stage_id] = state

    def running(self) -> contextlib.AbstractContextManager[None]:
        """Around the run in its thread: nothing to set here (each stage names its jobs'
        group as it starts, ``run_stage``)."""
        return contextlib.nullcontext()

    def cancel_jobs(self) -> None:
        """Cancel the run's Spark jobs in progress (a second Ctrl-C: the step is abandoned)."""
        self.sc.cancelJobGroup(self.job_group)

    def close(self) -> None:
        if self.attempt_reports is not None:
            self.attempt_reports.close()
            self.attempt_reports = None
        # Summary jobs put off by a step that failed: nobody reads them, and after a
        # cluster failure running them would only fail again.
        self.put_off.clear()
        self.end_step(-1)
        for rdd in self.state_results.values():
            rdd.unpersist()
        self.state_results.clear()
        self.states.clear()


# How Spark runs each strategy of the physical plan (element_stages.py, keyed_stages.py).
SPARK.strategies.register(Strategy.FUSED_MAP)(element_stages.fused_map)
SPARK.strategies.register(Strategy.MAP_SIDE_PASS)(element_stages.map_side_pass)
SPARK.strategies.register(Strategy.AS_READ)(element_stages.as_read)
SPARK.strategies.register(Strategy.DRIVER_RUN)(element_stages.on_driver)
SPARK.strategies.register(Strategy.BATCH_COMBINE)(element_stages.batch_combine)
SPARK.strategies.register(Strategy.LIFTED_GROUPING)(keyed_stages.lifted_grouping)
SPARK.strategies.register(Strategy.UNLIFTED_GROUPING)(keyed_stages.unlifted_grouping)
SPARK.strategies.register(Strategy.STATEFUL)(keyed_stages.stateful)
SPARK.strategies.register(Strategy.SIDE_INPUT_WAIT)(keyed_stages.side_input_wait)
SPARK.strategies.register(Strategy.SKIP_IDLE)(keyed_stages.skip_idle)
# Where keyed state lives between steps: hash buckets, read only where a step touches them.
SPARK.strategies.register(StateStore.HASH_BUCKETS)(bucketed_partition)

# What each source gives a step (source_reads.py), and a schema'd segment: one SQL query,
# its panes back through Arrow (sql_plan.py).
SPARK.sources.register(CreateOp, ImpulseOp)(source_reads.driver_elements)
SPARK.sources.register(ReadTextOp)(source_reads.text_lines)
SPARK.sources.register(BoundedSourceReadOp)(source_reads.bounded_source)
SPARK.sources.register(TestStreamOp)(source_reads.test_stream_step)
SPARK.sources.register(StreamReadOp)(source_reads.write_ahead_log)
SPARK.sources.register(SchemaAggregateOp)(sql_plan.read_segment)
