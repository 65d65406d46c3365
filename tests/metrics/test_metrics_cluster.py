"""Metrics on local-cluster[2,1,1024] with Spark's RPC encrypted: a failed and retried
attempt still reports what it counted, over TLS. (The metrics of executor processes
without encryption are checked by tests/runners/test_local_cluster.py, in its one job.)"""

from __future__ import annotations

import pytest

from tests.runners.test_local_cluster import run_cluster_job

pytestmark = pytest.mark.cluster


def test_with_spark_s_rpc_encrypted_a_failed_attempt_reports_over_tls():
    encrypted = run_cluster_job("encrypted")
    assert encrypted["listeners"] == [{"encrypted": True, "certificate": True}]
    committed_seen, attempted_seen = encrypted["retried"]["Flaky:seen"]
    assert committed_seen == 10 and 11 <= attempted_seen <= 20
    assert encrypted["retried"]["Flaky:failures"] == [0, 1]
