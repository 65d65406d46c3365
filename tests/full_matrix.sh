#!/usr/bin/env bash
# The tests the README's test command leaves out to stay within its time: those marked `full`
# where they are written (the SIGKILL stream on s3a://, two of the bad buckets, the million
# groups of an SQL plan) and those listed in tests/full_matrix.py with what still covers them
# in the suite (transcripts on Spark, a stream on the standalone cluster, Nexmark 7 and 9-11, the
# stream job on hdfs:// run to its end and killed with SIGKILL, ...).
# Needs what the README's test command needs, and Maven (tools/maven_jars.py) the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
SPARKBEAM_FULL_MATRIX=1 exec python -m pytest -n 1 -m full "$@" tests
