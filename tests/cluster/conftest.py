"""A real multi-node Ray cluster on this machine (head + 2 GPU-typed workers, separate raylets),
running the application deployments/cluster.yaml describes, scaled down (cluster_app.py), its
model served by the gated fake engine: every engine call waits at a gate on the head node that
the tests open and close (cluster_gate.py), so a test decides which requests are in flight when
it kills something.

The cluster lives in a child process (localcluster): this pytest process may
already hold the session's single-node Ray (tests/service), and one process has one Ray.
"""

from __future__ import annotations

import pytest

from cluster_app import GPU_WORKER, HEAD, SERVE_ENV, deploy, scaled_down
from cluster_gate import NODE_PYTHONPATH, ClusterGate


@pytest.fixture(scope="module")
def cluster(stand_ins):
    """The cluster with the scaled-down application (gated engine) on a free loopback port; its
    gate open (``cluster.gate``). A request waits up to 60 s for a replica to accept it (a hang
    guard): the tests decide what is in flight, so only a machine busy with other work makes a
    request wait, and its answer must not depend on how busy."""
    from dialscore_server.gateway.embedded import free_port
    from localcluster import LocalCluster

    with LocalCluster(head=HEAD, workers=[GPU_WORKER, GPU_WORKER],
                      env={"PYTHONPATH": NODE_PYTHONPATH, **SERVE_ENV}) as local:
        local.gate = ClusterGate(local)
        local.gate.open()
        args = scaled_down(stand_ins, engine="gated_engines:GatedNLLEngine", queue_timeout_s=60)
        local.url = deploy(local, args, http_port=free_port())
        yield local


@pytest.fixture()
def gate(cluster):
    """The cluster's gate, closed for the test and open again afterwards."""
    cluster.gate.close()
    yield cluster.gate
    cluster.gate.open()
