"""The cluster tests' nodes and application: deployments/cluster.yaml's, scaled down (see
`scaled_down`). (Its own module name: `conftest` is ambiguous on sys.path across test folders.)

The cluster lives in a child process (localcluster): this pytest process may
already hold the session's single-node Ray (tests/service), and one process has one Ray.
Workers declare logical GPUs, so the cluster config's `num_gpus: 1` places each model replica on
a GPU worker, never on the head; torch there sees no CUDA, so the engines run on CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import yaml

from dialscore_server.gateway.embedded import PROXY_HEALTH_ENV

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "cluster-test-token"
#: What a pod's env is on KubeRay: the API-token secret on every node, head included.
NODE_ENV = {"DIALSCORE_API_TOKEN": TOKEN}
#: Logical resources. The head has no GPU (as in rayservice.yaml: num-gpus 0); each worker one.
HEAD = {"num_cpus": 2, "num_gpus": 0, "env_vars": NODE_ENV}
GPU_WORKER = {"num_cpus": 2, "num_gpus": 1, "env_vars": NODE_ENV}
MODEL = "dialogpt-medium"
#: The header of every authenticated request to the cluster's application.
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: A new connection per request: the kernel spreads connections over the nodes' proxies (they
#: share the port), and a proxy prefers the gateway replica on its own node.
FRESH = httpx.Limits(max_keepalive_connections=0)
#: Serve's own start-up deadline for a proxy (default 5 s, then it is killed and started again,
#: and `serve.start` fails) raised to a hang guard: on a machine whose cores are busy with other
#: work, a proxy can take longer than 5 s to start.
#: And Serve's proxy health checks as on KubeRay's head (deployments/kuberay/rayservice.yaml) and
#: in the embedded default.
SERVE_ENV = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60", **PROXY_HEALTH_ENV}


def scaled_down(stand_ins: Path, engine: str | None = None, **overrides: Any) -> dict[str, Any]:
    """deployments/cluster.yaml's application args, scaled down to fit 2 cores:

    * the stand-in checkpoints instead of hub ids, and only the first dialogue model (each
      replica loads its model; the classifiers and the rerank deployment add nothing to placement);
    * fractional CPUs (a quarter per replica, one torch thread) instead of 1-2;
    * the model's fixed 2 replicas instead of autoscaling 1-4 (autoscaling: test_autoscaling.py);
    * the queue timeout 5 s (a request waiting for a re-placed replica gets 503, then retries).

    Kept as they are: `num_gpus: 1` per model replica, 2 gateway replicas at most 1 per node,
    `auth_required`, the request timeout, the batching options. `engine` (an import path)
    replaces the model's engine class (the tests serve the gated fake engine).
    """
    args = yaml.safe_load((ROOT / "deployments" / "cluster.yaml").read_text())["applications"][0]["args"]
    model = args["models"][0]
    assert model["name"] == MODEL and model["serving"]["num_gpus"] >= 1
    serving = {k: v for k, v in model["serving"].items() if k != "autoscaling_config"}
    serving.update(num_cpus=0.25, num_threads=1, num_replicas=2)
    if engine is not None:
        serving["engine"] = engine
    args.update(stand_ins=str(stand_ins), models=[{"name": MODEL, "serving": serving}], classifiers=[],
                gateway_num_cpus=0.25, rerank_num_cpus=0.1, queue_timeout_s=5)
    args.update(overrides)
    return args


def deploy(cluster: Any, app_args: Any, *, attempts: int = 5, **kwargs: Any) -> str:
    """``cluster.deploy(app_args, **kwargs)`` (a LocalCluster), tried again while `serve.start`
    gives up waiting for its proxies: it waits a fixed 60 s (Ray Serve's HTTP_PROXY_TIMEOUT), and
    on a machine busy with other work they can take longer. Serve goes on starting them, and the
    next try connects to the running Serve. `attempts` is a hang guard."""
    for attempt in range(1, attempts + 1):
        try:
            return cluster.deploy(app_args, **kwargs)
        except TimeoutError as exc:
            if "HTTP proxies not available" not in str(exc) or attempt == attempts:
                raise
    raise AssertionError("unreachable")


def running(cluster: Any, deployment: str) -> list[dict]:
    """The RUNNING replicas of `deployment` on `cluster` (a LocalCluster)."""
    return [r for r in cluster.replicas().get(deployment, []) if r["state"] == "RUNNING"]
