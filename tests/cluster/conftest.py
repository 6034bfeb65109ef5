"""A real multi-node Ray cluster on this machine (head + 2 GPU-typed workers, separate raylets),
running the application deployments/cluster.yaml describes, scaled down (cluster_app.py).

The cluster lives in a child process (localcluster): this pytest process may
already hold the session's single-node Ray (tests/service), and one process has one Ray.
"""

from __future__ import annotations

import pytest

from cluster_app import GPU_WORKER, HEAD, scaled_down


@pytest.fixture(scope="module")
def cluster(stand_ins):
    """The cluster with the scaled-down application on a free loopback port."""
    from dialscore_server.gateway.embedded import free_port
    from localcluster import LocalCluster

    with LocalCluster(head=HEAD, workers=[GPU_WORKER, GPU_WORKER]) as local:
        local.url = local.deploy(scaled_down(stand_ins), http_port=free_port())
        yield local
