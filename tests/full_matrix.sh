#!/usr/bin/env bash
# The tests the README's test command leaves out to stay within its time (marked `full`):
# on the local S3 server, a stream with --checkpoint_dir=s3a://... and its sinks on s3a://
# killed with SIGKILL and resumed exactly, and the wrong-key and unreachable-endpoint buckets.
# Needs what the README's test command needs, and Maven (tools/maven_jars.py) the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
SPARKBEAM_FULL_MATRIX=1 exec python -m pytest -n 1 -m full "$@" tests
