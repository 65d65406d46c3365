"""Running a pipeline on real sources: pacing, the step journal, checkpoints and recovery.

``StreamRun`` is the step loop's ``StepHooks`` for a pipeline with Structured Streaming
sources. Before each step it picks the step's processing time and the write-ahead-log
batches each source has made durable, and journals them; after every
``--checkpoint_interval`` steps it writes a checkpoint. At start it takes the checkpoint
directory's lease (``lease.py``: one run at a time) and claims the directory (refusing one
of another pipeline), restores the newest complete checkpoint and
replays the journaled steps after it with their recorded input and time, so that a run
killed at any point resumes where it was: nothing lost, nothing counted twice, no
watermark moving backwards.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
import time
from typing import Any

from sparkbeam.io import commits
from sparkbeam.runners.core.loop.clock import Clock, WallClock
from sparkbeam.runners.core.loop.steps import StepLoop
from sparkbeam.runners.core.lowering.settings import RunSettings
from sparkbeam.runners.core.plan.plan import StagePlan
from sparkbeam.runners.core.sources.stream_sources import StreamSourceState
from sparkbeam.runners.spark import old_paths
from sparkbeam.runners.spark.checkpoint_key import load_key
from sparkbeam.runners.spark.checkpoints import LOOP_FILE, CheckpointStore, pipeline_shape
from sparkbeam.runners.spark.intake import SourceFailedError, StreamIntake
from sparkbeam.runners.spark.lease import CheckpointLease
from sparkbeam.runners.spark.output_owners import check_outputs, claim_outputs

__all__ = ["PinnedClock", "StreamRun", "check_before_start"]

_LOG = logging.getLogger(__name__)


class PinnedClock:
    """The step loop's clock in a real stream: the time chosen (or replayed) for the step."""

    def __init__(self) -> None:
        self.micros = WallClock().now_micros()

    def now_micros(self) -> int:
        return self.micros

    def advance(self, micros: int) -> None:
        self.micros += micros


def check_before_start(plan: StagePlan, settings: RunSettings) -> None:
    """Before Spark starts: refuse a local ``--checkpoint_dir`` that is not this pipeline's
    (another pipeline's or shape, another key) or that a live run holds, and outputs the
    checkpoint did not write (``output_owners.py``). The run checks again, under its lease,
    once Spark is up (a checkpoint on a cluster file system only then)."""
    root = settings.checkpoint_dir
    known_id = None  # this checkpoint's identity (None: a new checkpoint)
    pending = False  # a checkpoint on a cluster file system: its identity is read once Spark is up
    if root is not None:
        root = commits.absolute(root)
        if commits.local_path(root) is not None:
            key, key_path = load_key(settings.checkpoint_key_file)
            store = CheckpointStore(root, pipeline_shape(plan), key=key, key_path=key_path)
            identity = store.read_identity()
            CheckpointLease(store.root).check_free()
            known_id = identity["id"] if identity is not None else None
        else:
            pending = True
    check_outputs(plan, known_id, root, overwrite=settings.overwrite_output, identity_pending=pending, local_only=True)


class StreamRun:
    #: what holds each source's query and write-ahead log (``StreamIntake``'s constructor)
    intake_type: type[StreamIntake] = StreamIntake

    def __init__(self, spark: Any, plan: StagePlan, backend: Any, settings: RunSettings, wall: Clock | None = None) -> None:
        self.spark = spark
        self.plan = plan
        self.backend = backend
        self.clock = PinnedClock()
        self.wall = wall or WallClock()
        self.interval = settings.checkpoint_interval
        self.step_interval = settings.step_interval
        self.available_now = settings.available_now
        #: --keep_open: the run stops, undrained, once its sources have given everything
        self.keep_open = settings.keep_open
        self.read_everything = False
        self.overwrite_output = settings.overwrite_output
        given = settings.checkpoint_dir
        self.temporary = given is None
        if self.temporary:
            # Removed at the end, never resumed: a key of this run alone seals it.
            root, key, key_path = self._temporary_root(), os.urandom(32), "(this run's own key)"
        else:
            key, key_path = load_key(settings.checkpoint_key_file)
            root = given
        self.store = CheckpointStore(root, pipeline_shape(plan), key=key, key_path=key_path)
        self.lease = CheckpointLease(self.store.root)
        self.loop: StepLoop | None = None
        self.sources: dict[int, StreamSourceState] = {}
        self.intakes: dict[int, StreamIntake] = {}
        self.replay: dict[int, dict[str, Any]] = {}
        self.restored_step: int | None = None
        #: the step of the checkpoint whose files the keyed state's lineage starts at (its
        #: last read-back, or the restore); None: the run's start (``_cuts_lineage``)
        self.cut_at: int | None = None
        self._last_start: float | None = None
        self._stopping = threading.Event()  # set by cancel(): no more waiting between steps

    def _temporary_root(self) -> str:
        """A new private directory for a run without ``--checkpoint_dir`` (removed at its end)."""
        return tempfile.mkdtemp(prefix="sparkbeam-stream-")

    # -- start and stop -------------------------------------------------------------------
    def attach(self, loop: StepLoop) -> None:
        """Take the directory's lease, claim it, restore the newest checkpoint, start the
        sources' queries. Nothing in the directory is changed before the lease is held."""
        self.loop = loop
        self.store.read_identity()  # a directory that is not this pipeline's: refused untouched
        self.lease.acquire()
        self.store.claim()
        checkpoint_dir = None if self.temporary else self.store.root
        claim_outputs(self.plan, self.store.checkpoint_id, checkpoint_dir, overwrite=self.overwrite_output)
        self.backend.wal_sealer = self.store.sealer
        self.backend.truncates_at_checkpoints = True
        self.backend.run_id = self.store.checkpoint_id
        self.sources = {rt.stage.id: rt.source for rt in loop.runtimes if isinstance(rt.source, StreamSourceState)}
        self._check_session()
        manifest = self.store.restore_point()
        finished = manifest is not None and bool(manifest.get("finished"))
        if manifest is not None:
            self._restore(manifest)
        if finished:
            # Every source was exhausted and every stage drained when this checkpoint was
            # written; the sources read on from where they ended (as Spark's availableNow
            # does on an existing checkpoint), with the watermarks where they are.
            for source in self.sources.values():
                source.done = False
        self.replay = self.store.journal_from(loop.step)
        if manifest is not None or self.replay:
            self._remove_sink_leftovers()
        for stage_id, source in self.sources.items():
            self.intakes[stage_id] = self._intake(stage_id, source)
        for intake in self.intakes.values():
            intake.start()
        for intake in self.intakes.values():
            intake.wait_until_running()
        if finished and manifest is not None:
            self._after_finished(manifest["step"] - 1)
        elif self.keep_open and manifest is not None and not self.replay and not self._news():
            # Kept open by an earlier run, and nothing arrived since: no step runs (an empty
            # one could still move watermarks by idleness, which Spark's availableNow would not).
            loop.max_steps = loop.step
            print(
                f"sparkbeam: nothing arrived since step {manifest['step'] - 1} of the stream in "
                f"--checkpoint_dir={self.store.root}; its windows stay open (--keep_open)",
                file=sys.stderr,
                flush=True,
            )

    def _check_session(self) -> None:
        """Warn about a session setting that hurts a long stream (a Connect run has none to check)."""
        if self.spark.sparkContext.getConf().get("spark.hadoop.cloneConf", "false").lower() != "true":
            _LOG.warning(
                "this SparkSession runs with spark.hadoop.cloneConf=false: Spark keeps the JobConf of every "
                "micro-batch's write-ahead log read (about 100 KB each) until its heap runs low; start the "
                "session with spark.hadoop.cloneConf=true (sparkbeam does when it starts the session) to keep "
                "a long stream's memory flat"
            )

    def _intake(self, stage_id: int, source: StreamSourceState) -> StreamIntake:
        """The source's query and write-ahead log (``intake_type``: a Spark Connect run's is its own)."""
        return self.intake_type(
            self.spark,
            source.op,
            self.store.source_dir(stage_id),
            trigger_seconds=self.step_interval,
            available_now=self.available_now,
            drop_before=source.drop_before,
            sealer=self.store.sealer,
        )

    def _news(self) -> bool:
        """With ``--available_now``, once the sources' queries have read what is there:
        whether any batch past what the run consumed holds records (or bad or dropped ones)."""
        while not all(intake.finished() for intake in self.intakes.values()) and not self._stopping.is_set():
            self._stopping.wait(0.05)
        return any(
            batch.records or batch.bad or batch.dropped
            for stage_id, source in self.sources.items()
            for batch in self.intakes[stage_id].take(source.consumed_through)[0]
        )

    def _after_finished(self, last_step: int) -> None:
        """Started again on a stream that finished: with ``--available_now``, once the
        sources' queries have read what arrived since, no step runs if that is nothing
        (a replayed step would rewrite committed output); otherwise the run goes on, and
        one line says what becomes of the new records."""
        loop = self.loop
        if loop is None:
            return
        where = f"sparkbeam: the stream in --checkpoint_dir={self.store.root} finished at step {last_step}"
        if self.available_now and not self._news():
            loop.max_steps = loop.step
            print(f"{where}; nothing to do (give a new checkpoint directory to run it again)", file=sys.stderr, flush=True)
            return
        line = (
            f"{where}; reading what arrived since: its watermarks are at the end of time, so windows and "
            "groupings count the new records as late data (element-wise steps and their sinks take them)"
        )
        print(line, file=sys.stderr, flush=True)

    def _remove_sink_leftovers(self) -> None:
        """Resuming: the temporary step directories a crash left beside the file sinks' output."""
        from sparkbeam.runners.spark import sinks

        for stage in self.plan.stages:
            for op in stage.sinks:
                removed = sinks.remove_leftovers(op)
                if removed:
                    _LOG.info("%s: removed %d temporary folder(s) of interrupted steps", op.label, len(removed))

    def request_stop(self) -> None:
        """Cut short the wait before the next step (the loop itself stops at the boundary)."""
        self._stopping.set()

    def checkpoint_on_stop(self) -> None:
        """After a cancelled run: a checkpoint at the step where it stopped, so a restart
        resumes there, if the run has a checkpoint directory of its own and none is there yet."""
        loop = self.loop
        if self.temporary or loop is None:
            return
        newest = self.store.newest()
        if newest is None or newest["step"] != loop.step:
            self.checkpoint()

    def checkpoint_on_finish(self) -> None:
        """After a run that ended by itself: if every source is exhausted, a checkpoint marked
        finished, so that starting the stream again on this directory does nothing."""
        loop = self.loop
        if self.temporary or loop is None or not self.intakes:
            return
        if self.read_everything:
            # --keep_open: open windows, pending timers and state wait in this checkpoint.
            newest = self.store.newest()
            if newest is None or newest["step"] != loop.step:
                self.checkpoint()
            print(
                f"sparkbeam: read everything the sources held; stopped at step {loop.step - 1} without draining "
                f"(--keep_open): open windows wait in --checkpoint_dir={self.store.root} for the next run",
                file=sys.stderr,
                flush=True,
            )
            return
        if not all(source.done for source in self.sources.values()):
            return  # stopped by --max_steps: a restart goes on
        self.checkpoint(finished=True)

    def close(self) -> None:
        for intake in self.intakes.values():
            intake.stop()
        self.lease.release()
        if self.temporary:
            commits.remove(self.store.root, missing_ok=True)

    # -- around each step ---------------------------------------------------------------------
    def before_step(self, step: int) -> None:
        self.lease.check()  # a run that lost its directory writes nothing more to it
        entry = self.replay.pop(step, None)
        if entry is None:
            self._pace()
            try:
                entry = self._take(step)
                while not self.read_everything and self._before_first_batch(entry) and not self._stopping.is_set():
                    # Nothing has been read yet and no watermark can move (no source knows a
                    # partition): a step would do nothing, so wait for the first batch instead.
                    self._stopping.wait(min(self.step_interval, 0.1))
                    entry = self._take(step)
            except SourceFailedError as error:
                raise self._stopped_by(error, step) from None
            self.store.write_journal(entry)
        self.clock.micros = entry["now"]
        for stage_id, source in self.sources.items():
            taken = entry["sources"][str(stage_id)]
            source.feed(self.intakes[stage_id].batches(taken["batches"]), entry["now"], exhausted=taken["exhausted"])

    def _stopped_by(self, error: SourceFailedError, step: int) -> SourceFailedError:
        """A source failed between steps: everything up to ``step`` is consistent, so a
        checkpoint is written there (with a directory of the run's own) and the error says
        how to resume once the source is back."""
        if self.temporary or self.loop is None:
            return error
        newest = self.store.newest()
        if newest is None or newest["step"] != step:
            self.checkpoint()
        msg = (
            f"{error}\nsparkbeam: stopped before step {step}, checkpoint written; once the source is back, "
            f"run again with --checkpoint_dir={self.store.root} to resume at step {step}"
        )
        return SourceFailedError(msg)

    def _take(self, step: int) -> dict[str, Any]:
        """The journal entry of a new step: its time and the batches each source takes."""
        entry: dict[str, Any] = {"step": step, "now": self.wall.now_micros(), "sources": {}}
        ended = []
        for stage_id, source in self.sources.items():
            intake = self.intakes[stage_id]
            # Asked before taking: once the query has ended, no batch can follow these.
            finished = intake.finished()
            batches, left = intake.take(source.consumed_through)
            ended.append(finished and not left)
            # With --keep_open no source is ever exhausted: its watermark stays where its
            # events put it, and the next run on the checkpoint reads on from its offsets.
            exhausted = finished and not left and not self.keep_open
            entry["sources"][str(stage_id)] = {"batches": [b.batch_id for b in batches], "exhausted": exhausted}
        if self.keep_open and all(ended) and self.loop is not None:
            # This step takes the sources' last batches (the ones Spark had when the run
            # started): the loop stops after it, at a checkpoint (checkpoint_on_finish).
            self.read_everything = True
            limit = self.loop.max_steps
            self.loop.max_steps = step + 1 if limit is None else min(limit, step + 1)
        return entry

    def _before_first_batch(self, entry: dict[str, Any]) -> bool:
        """No source has delivered a batch with records yet, none takes one now (empty
        batches, as Spark's first often is, wait with the next step), and no watermark could
        move: every source of the pipeline is a real one whose watermark valve has no
        partition (idleness moves only known partitions' watermarks), none exhausted."""
        loop = self.loop
        if loop is None or any(rt.source is not None and rt.stage.id not in self.sources for rt in loop.runtimes):
            return False  # a bounded source's elements go at the first step
        for stage_id, source in self.sources.items():
            taken = entry["sources"][str(stage_id)]
            batches = self.intakes[stage_id].batches(taken["batches"])
            if any(b.records or b.bad or b.dropped for b in batches) or taken["exhausted"]:
                return False
            if source.consumed_through >= 0 or source.valve.statuses():
                return False
        return True

    def _pace(self) -> None:
        now = time.monotonic()
        if self._last_start is not None:
            wait = self._last_start + self.step_interval - now
            if wait > 0:
                self._stopping.wait(wait)
        self._last_start = time.monotonic()

    def after_step(self, step: int) -> None:
        if (step + 1) % self.interval == 0:
            self.checkpoint()

    # -- checkpoints ----------------------------------------------------------------------------
    def checkpoint(self, *, finished: bool = False) -> None:
        """Write the state that resumes at the loop's next step; the manifest last.
        ``finished``: the run has ended with every source exhausted (see ``attach``)."""
        from pyspark import cloudpickle

        loop = self.loop
        if loop is None:
            return
        started = time.perf_counter()
        resume_at = loop.step
        self.lease.check()  # a run that lost the directory's lease writes nothing more to it
        written = self.store.begin(resume_at)
        state_files = self.backend.save_state(written, self.store.sealer, resume_at)
        self.store.write_sealed(
            commits.join(written, LOOP_FILE),
            "loop",
            cloudpickle.dumps({"loop": loop.snapshot(), "backend": self.backend.snapshot()}),
        )
        watermarks = {rt.stage.name: [rt.input_watermark, rt.output_watermark] for rt in loop.runtimes}
        self.lease.check()  # the manifest makes the checkpoint count: only while the lease is still ours
        sources = {}
        for stage_id, source in self.sources.items():
            last = self.intakes[stage_id].batch(source.consumed_through)
            sources[str(stage_id)] = {
                "consumed_through": source.consumed_through,
                "offsets": last.offsets if last is not None else None,
            }
        self.store.place(resume_at, written)
        chains = self.backend.chains_after(resume_at, state_files)
        self.store.commit(
            resume_at,
            {
                "files": [LOOP_FILE, *(write.name for write in state_files.values())],
                # the file each stage's state got in this checkpoint (a base or a delta) ...
                "state": {stage_id: write.name for stage_id, write in state_files.items()},
                # ... and the base and deltas that make it (state_checkpoints.py)
                "chains": {str(stage_id): chain.to_json() for stage_id, chain in chains.items()},
                "watermarks": watermarks,
                "sources": sources,
                "finished": finished,
            },
        )
        # From now on the keyed state's lineage starts at this checkpoint's files, before
        # pruning removes what the lineage reached until now (executor loss, backend.py),
        # unless what it reaches outlives this checkpoint's pruning.
        # The checkpoints as they are now, read once for the cut and the pruning (nothing
        # writes a manifest in between: one run holds the directory's lease).
        manifests = self.store.manifests()
        cut = self._cuts_lineage(resume_at, finished, manifests)
        self.backend.read_back_state(chains, self.store.state_path, self.store.sealer, cut=cut)
        if cut:
            self.cut_at = resume_at
        oldest = self.store.prune(manifests)
        if oldest is not None:
            for stage_id, intake in self.intakes.items():
                intake.forget_through(oldest["sources"][str(stage_id)]["consumed_through"])
        _LOG.info("checkpoint for step %d written in %.3fs", resume_at, time.perf_counter() - started)

    def _cuts_lineage(self, step: int, finished: bool, manifests: list[dict[str, Any]]) -> bool:
        """Whether the checkpoint of ``step``, just committed, must cut the keyed state's
        lineage (``SparkBackend.read_back_state``: the state read back from its files).

        The lineage reaches the files of the chains of the checkpoint it was last cut at and
        the log batches after that checkpoint. Pruning keeps both while that checkpoint's
        manifest is among the ``keep`` newest: it keeps every file their chains name and
        forgets the log only through the oldest kept checkpoint. So the cut is needed only
        when this checkpoint's pruning drops that manifest (with ``keep`` = 2, every other
        checkpoint), when nothing has cut it yet (the log from the run's start), and when
        this checkpoint replaces the files the lineage reads (written again at the same
        step, or marked finished). A cut costs a read of the whole state from the files and
        a shuffle of it, in the next step (docs/state_store.md)."""
        if finished or self.cut_at is None or self.cut_at == step:
            return True
        kept = [manifest["step"] for manifest in manifests[: self.store.keep]]
        return self.cut_at not in kept

    def _restore(self, manifest: dict[str, Any]) -> None:
        loop = self.loop
        if loop is None:
            return
        directory = self.store.checkpoint_path(manifest["step"])
        # Unpickled only once its seal checks out (the key is outside the directory).
        saved = old_paths.loads(self.store.read_sealed(commits.join(directory, LOOP_FILE), "loop"))
        loop.restore(saved["loop"])
        chains = self.store.chains(manifest)
        # Written by format 5 or earlier: one file of the stage's whole state.
        state_paths = {int(k): commits.join(directory, v) for k, v in manifest["state"].items() if int(k) not in chains}
        self.backend.restore(saved["backend"], state_paths, chains, self.store.state_path, self.store.sealer)
        self.restored_step = manifest["step"]
        self.cut_at = manifest["step"]  # the state is read from its files
        _LOG.info("restored the checkpoint of step %d from %s", manifest["step"], self.store.root)
