"""The suite's slowest test files, slowest first: ``tests/conftest.py`` hands them to the
xdist workers first (with ``--no-loadscope-reorder``; xdist would otherwise start with the
files of most tests), so that no two-minute file starts when the other worker is nearly done.

Measured with ``python -m pytest -v --durations=0`` (the sum of each file's setup, call and
teardown times); remeasure when a file's cost changes much. A file not listed runs after
these, in collection order. Last measured at session 11 (a loaded machine: the order, not
the seconds, is what counts).
"""

SLOW_FILES: tuple[str, ...] = (
    "tests/runners/test_stream_recovery.py",  # 376 s
    "tests/transforms/test_side_inputs.py",  # 352 s
    "tests/schemas/test_group_by.py",  # 336 s
    "tests/runners/test_streaming_oracle.py",  # 286 s
    "tests/transforms/test_util.py",  # 276 s
    "tests/runners/test_batch_oracle.py",  # 270 s
    "tests/runners/test_sql_plans.py",  # 234 s
    "tests/conformance/test_invariants.py",  # 229 s
    "tests/beam_frontend/test_examples_unmodified.py",  # 223 s
    "tests/transforms/test_hot_key_fanout.py",  # 204 s
    "tests/test_notebooks.py",  # 198 s
    "tests/runners/test_executor_loss.py",  # 191 s
    "tests/conformance/test_stateful_oracle.py",  # 186 s
    "tests/beam_frontend/test_runners_agree.py",  # 182 s
    "tests/runners/test_kafka.py",  # 179 s
    "tests/schemas/test_shapes_and_errors.py",  # 178 s
    "tests/runners/test_error_output.py",  # 173 s
    "tests/beam_frontend/test_selection.py",  # 169 s
    "tests/runners/test_sql_plan_panes.py",  # 168 s
    "tests/runners/test_checkpoint_lease.py",  # 167 s
    "tests/transforms/test_combiners.py",  # 166 s
    "tests/conformance/test_sparkbeam_transcripts_spark.py",  # 156 s
    "tests/runners/test_combiner_lifting.py",  # 145 s
    "tests/runners/test_real_sources.py",  # 142 s
    "tests/conformance/test_transcripts_spark.py",  # 142 s
    "tests/runners/test_dependencies.py",  # 134 s
    "tests/compat/test_examples.py",  # 132 s
    "tests/io/test_fileio.py",  # 131 s
    "tests/runners/test_hdfs.py",  # 126 s
    "tests/runners/test_local_cluster.py",  # 78 s and the cluster metrics (125 s on their own local cluster)
    "tests/beam_frontend/test_nexmark.py",  # 105 s
    "tests/runners/test_checkpoint_security.py",  # 101 s
    "tests/runners/test_connect_files.py",  # 99 s
    "tests/runners/test_checkpoint_resume.py",  # 96 s
    "tests/beam_frontend/test_stateful.py",  # 90 s
    "tests/runners/test_physical_plans.py",  # 89 s
    "tests/io/test_streaming_sinks.py",  # 86 s
    "tests/beam_frontend/test_fn_runner_suite.py",  # 80 s
    "tests/runners/test_standalone_cluster.py",  # 78 s
    "tests/transforms/test_library_surface.py",  # 75 s
    "tests/runners/test_streaming_systems.py",  # 71 s
    "tests/runners/test_connect.py",  # 70 s
    "tests/transforms/test_stateful_batching.py",  # 65 s
    "tests/io/test_parquetio.py",  # 61 s
    "tests/io/test_textio_coders.py",  # 60 s
    "tests/runners/test_stream_time_zones.py",  # 60 s
    "tests/io/test_csvio.py",  # 59 s
    "tests/runners/test_object_store.py",  # 59 s
    "tests/transforms/test_stats.py",  # 58 s
    "tests/beam_frontend/test_splittable.py",  # 54 s
    "tests/runners/test_stream_memory.py",  # 49 s
    "tests/runners/test_state_spill.py",  # 28-40 s quiet: a stream job with its own JVM (session 13)
    "tests/runners/test_disk_full.py",  # 40-80 s: a stream job run twice with its own JVM (session 14)
    "tests/runners/test_stream_intake.py",  # a stream job with its own JVM and a 40 MB file (2.5 min at load 15-20)
    "tests/io/test_jsonio.py",  # 49 s
    "tests/io/test_textio_exact.py",  # 42 s
    "tests/sdk/test_custom_windows.py",  # 41 s
    "tests/transforms/test_combine_side_inputs.py",  # 40 s
)
