"""Autoscaling across nodes with Ray's fake autoscaler (`python -m loadtests.autoscale_cluster`, shortened):
under load Serve asks for a second model replica (`num_gpus: 1`), the autoscaler starts a second
GPU-typed worker node for it; after the load the replica stops and the idle node is removed.
Loopback traffic from 8 clients for 25-120 s; the whole test is bounded by the script's limits."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow]


def test_replicas_and_nodes_scale_up_under_load_and_down_after(stand_ins, tmp_path):
    from loadtests.autoscale_cluster import plot, record_timeline

    # At least 25 s of load, longer (up to 120 s) if the second replica is still starting: on a
    # machine shared with other test runs its checkpoint load can take a while.
    rows, summary = record_timeline(stand_ins, load_s=15, idle_s=75, max_load_s=120)
    plot(rows, summary, tmp_path / "timeline.png")
    print(f"\nautoscaling: {summary}")
    good = [r for r in rows if "error" not in r]
    # No GPU node before the application asked for one (min_workers: 0).
    assert good[0]["worker_nodes"] == 0
    assert summary["max_worker_nodes"] == 2 and summary["max_replicas"] == 2, summary
    assert summary["second_node_after_load_start_s"] is not None
    assert summary["second_replica_running_after_load_start_s"] is not None
    # Both came down after the load, in that order, and no request failed on the way.
    assert summary["replica_stopped_after_load_end_s"] is not None, summary
    assert summary["node_gone_after_load_end_s"] is not None, summary
    assert summary["node_gone_after_load_end_s"] >= summary["replica_stopped_after_load_end_s"]
    assert summary["requests_failed"] == 0 and summary["requests_ok"] > 0
    assert max(r["queue_length"] for r in good) > 0          # the gauge saw the load
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
