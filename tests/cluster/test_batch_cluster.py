"""`dialscore batch --address` on the local multi-node cluster (a head and two workers with one
logical GPU each, separate raylets): the job's actors ask for a GPU each, so they run on the
workers, one per worker, and nowhere else. Every engine call waits at a gate on the head
(gated_engines.GatedNLLEngine), so the test knows both actors hold a block when it kills one
worker node; then it opens the gate. Ray Data retries the lost block on the surviving actor: no
line lost, none duplicated, and the job's summary reports the lost node and its blocks re-run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cluster_gate import NODE_PYTHONPATH, ClusterGate

pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "batch"))
from batch_kit import nll_line, read_output, write_config, write_lines  # noqa: E402

N = 24
HANG_S = 300.0  # a hang guard, not a speed requirement


def test_worker_node_lost_mid_job_loses_and_duplicates_no_line(tmp_path):
    import os

    from localcluster import LocalCluster

    lines = [nll_line(f"id-{i}", [f"context {i}"], f"target {i}", model="gated") for i in range(N)]
    src = write_lines(tmp_path / "in.jsonl", lines)
    config = write_config(tmp_path / "gated.yaml", {
        "models": [{"name": "dialogpt-medium", "serve_as": "gated",
                    "serving": {"engine": "gated_engines:GatedNLLEngine"}}]})
    out = tmp_path / "out.jsonl"
    worker = {"num_cpus": 1, "num_gpus": 1}
    with LocalCluster(head={"num_cpus": 1, "num_gpus": 0}, workers=[worker, worker],
                      env={"PYTHONPATH": NODE_PYTHONPATH}) as cluster:
        gate = ClusterGate(cluster)  # closed: every engine call waits
        workers = {n["node_id"] for n in cluster.nodes() if not n["is_head"]}
        env = {**os.environ, "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join([NODE_PYTHONPATH, os.environ.get("PYTHONPATH", "")])}
        job = subprocess.Popen(
            [sys.executable, "-m", "dialscore.cli", "batch", "-i", str(src), "-o", str(out),
             "--config", str(config), "--address", cluster.address, "--concurrency", "2",
             "--num-cpus", "0.5", "--num-gpus", "1", "--batch-size", "2", "--no-progress",
             "--summary-json", str(tmp_path / "s.json")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            held = gate.wait_for(waiting=2, passed=0, limit_s=HANG_S)
            nodes = {c["node_id"] for c in held["waiting_callers"]}
            assert nodes == workers  # one actor per GPU worker, none on the head
            victim = sorted(nodes)[0]
            cluster.kill_worker(victim)
            gate.open()
            log, _ = job.communicate(timeout=HANG_S)
        finally:
            if job.poll() is None:
                job.kill()
    assert job.returncode == 0, log[-3000:]
    got = read_output(out)
    ids = [r["custom_id"] for r in got]
    assert sorted(ids) == sorted(f"id-{i}" for i in range(N))  # none lost, none twice
    assert all(r["error"] is None for r in got)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert (summary["done"], summary["failed"]) == (N, 0)
    (note,) = summary["notes"]
    assert note.startswith("1 node(s) lost during the job") and victim in note
    assert "batch: 1 node(s) lost" in log  # the summary line says so too
