#!/usr/bin/env bash
# The Kafka matrix beyond the suite's subset: SIGKILL loops of a Kafka stream (reading and
# writing Kafka) and a broker that goes away mid-stream. One worker: each test starts Spark
# drivers of its own beside the session's.
set -euo pipefail
cd "$(dirname "$0")/.."
SPARKBEAM_FULL_MATRIX=1 exec python -m pytest -m kafka_full -n 1 tests/runners/test_kafka_full.py "$@"
