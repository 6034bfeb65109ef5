"""A multi-node Ray cluster on one machine, for tests, load tests and demos (never production).

The head and every worker are separate raylets (``ray.cluster_utils.Cluster``), each with its own
logical resources (workers may declare ``GPU``: Ray places GPU replicas there and sets
``CUDA_VISIBLE_DEVICES``; torch still finds no CUDA, so engines run on CPU) and its own
environment (what a pod's ``env`` is on KubeRay). With ``autoscaler=`` the head runs Ray's fake
autoscaler (autoscaler v1 with the ``fake_multinode`` provider), which starts and stops worker
raylets as the demand for resources changes, as KubeRay adds and removes pods.

The cluster lives in a child process of its own (:class:`LocalCluster` drives it): a process has
one Ray connection, and the caller (pytest with its session Serve app, a load test) keeps its
own. Everything the cluster writes is under its own temporary folder (``RAY_TMPDIR``), so its
address file and ``session_latest`` never reach ``/tmp/ray``, where a plain ``ray.init()``
elsewhere on the machine would find it and connect. Nothing here runs ``ray stop`` (it would end
every Ray on the machine): the cluster's processes, including the worker raylets the fake
autoscaler started, are ended by process id.

    with LocalCluster(head={"num_cpus": 2}, workers=[{"num_cpus": 2, "num_gpus": 1}] * 2) as cluster:
        url = cluster.deploy(app_args, http_port=free_port())
        cluster.kill_worker(node_id)      # SIGKILL of every process of a worker node
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

#: Environment every node of a local cluster gets. Serve drains a proxy for 30 s by default
#: before its node counts as idle; 5 s keeps an autoscaling demo's scale-down short.
CLUSTER_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "RAY_SERVE_PROXY_MIN_DRAINING_PERIOD_S": "5"}

#: Ray system config of a local cluster: metrics reach the agents every second (default 10 s),
#: so a test reads its own counts promptly.
SYSTEM_CONFIG = {"metrics_report_interval_ms": 1000}


@dataclass
class Autoscaler:
    """The fake autoscaler's worker type: `resources` per node, `min_workers`..`max_workers`
    nodes, a node idle for `idle_timeout_s` is stopped (the autoscaler checks every second)."""

    resources: dict[str, float] = field(default_factory=lambda: {"CPU": 2, "GPU": 1})
    min_workers: int = 0
    max_workers: int = 2
    idle_timeout_s: float = 6.0
    node_type: str = "gpu"
    env: dict[str, str] = field(default_factory=dict)


class LocalCluster:
    """Drives a cluster in a spawned child process; every method returns once the child has
    done it. `head` and `workers` are ``Cluster.add_node`` keyword arguments (``num_cpus``,
    ``num_gpus``, ``resources``, ``env_vars``); `env` goes to every node (and to the child)."""

    def __init__(self, head: dict[str, Any] | None = None, workers: list[dict[str, Any]] = (),
                 *, autoscaler: Autoscaler | None = None, env: dict[str, str] | None = None):
        # A short root: Unix socket paths under it must stay below 108 bytes.
        self.tmpdir = tempfile.mkdtemp(prefix="dsc-", dir="/tmp")
        self.env = {**CLUSTER_ENV, **(env or {})}
        self._pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"),
                                         initializer=_child_init, initargs=(self.tmpdir, self.env))
        self.address: str = self.call(_start, head or {}, list(workers), autoscaler)

    def call(self, fn, *args: Any) -> Any:
        """Run module-level `fn(*args)` in the cluster's child process (connected to Ray)."""
        return self._pool.submit(fn, *args).result()

    # -- nodes -------------------------------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        """Alive nodes: ``node_id``, ``is_head``, ``resources``, ``metrics_port``."""
        return self.call(_nodes)

    def add_worker(self, **node_args: Any) -> str:
        """Start one more worker raylet; returns its node id."""
        return self.call(_add_worker, node_args)

    def kill_worker(self, node_id: str) -> float:
        """SIGKILL every process of a worker node at once (what losing a machine or a
        pod looks like to Ray); returns the seconds it took."""
        return self.call(_kill_worker, node_id)

    def kill_gcs(self) -> int:
        """SIGKILL the head's GCS server (this cluster's only; the raylets, workers and actors
        go on running); returns its pid. Needs GCS fault tolerance (``RAY_REDIS_ADDRESS`` in
        `env`, and a fixed ``gcs_server_port`` in `head`) for :meth:`start_gcs` to recover."""
        return self.call(_kill_gcs)

    def start_gcs(self) -> int:
        """Start the head's GCS server again on its port (as KubeRay's restarted head pod does);
        it reloads the cluster's state from Redis and the raylets reconnect. Returns its pid."""
        return self.call(_start_gcs)

    def proxy_pids(self) -> dict[str, int]:
        """Per node id: the process id of Serve's proxy actor on that node (found among the
        node's processes by the title Ray gives an actor's process, ``ray::ProxyActor``)."""
        return self.call(_proxy_pids)

    def kill_proxy(self, node_id: str) -> int:
        """SIGKILL Serve's proxy actor process on node `node_id` (see :meth:`proxy_pids`) and
        return once it is gone; returns its pid. Serve's controller starts a new one after its
        health checks fail."""
        return self.call(_kill_proxy, node_id)

    # -- Serve -------------------------------------------------------------------------------

    def deploy(self, app_args: Any, *, http_port: int, name: str = "dialscore",
               route_prefix: str = "/", wait: bool = True) -> str:
        """Start Serve (a proxy on every node, on 127.0.0.1:`http_port`) and deploy the
        application of `app_args` (an AppArgs or its dict); returns its base URL."""
        args = app_args.model_dump() if hasattr(app_args, "model_dump") else dict(app_args)
        self.call(_deploy, args, http_port, name, route_prefix, wait)
        return f"http://127.0.0.1:{http_port}{route_prefix.rstrip('/')}"

    def status_messages(self, app: str) -> dict[str, str]:
        """Per deployment of `app`: Serve's status and message (why it failed, when it did)."""
        return self.call(_status_messages, app)

    def proxies(self) -> dict[str, str]:
        """Per node id: the status of Serve's proxy there (``serve.status().proxies``: HEALTHY
        once it has its routes and the replicas behind them)."""
        return self.call(_proxies)

    def delete_app(self, name: str) -> None:
        """``serve.delete`` one application."""
        self.call(_delete_app, name)

    def replicas(self, app: str = "dialscore") -> dict[str, list[dict[str, Any]]]:
        """Per deployment: its replicas (``replica_id``, ``state``, ``node_id``, ``actor_name``)."""
        return self.call(_replicas, app)

    def kill_actor(self, actor_name: str) -> None:
        """``ray.kill`` a named actor of namespace "serve" (a replica), without restart; returns
        once its process is gone."""
        self.call(_kill_actor, actor_name)

    def metrics(self) -> dict[str, str]:
        """Per node id: the Prometheus text of that node's metrics agent (read on 127.0.0.1)."""
        return self.call(_scrape)

    # -- lifecycle ---------------------------------------------------------------------------

    def shutdown(self, keep_logs: bool = False) -> None:
        """End every process of the cluster; remove its folder unless `keep_logs` (or
        ``DIALSCORE_KEEP_CLUSTER_LOGS=1``): the logs are under ``<tmpdir>/ray/session_latest``."""
        try:
            self.call(_shutdown)
        finally:
            self._pool.shutdown(wait=True)
            if not (keep_logs or os.environ.get("DIALSCORE_KEEP_CLUSTER_LOGS") == "1"):
                shutil.rmtree(self.tmpdir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


# ---------------------------------------------------------------- the child process

_STATE: dict[str, Any] = {}


def _child_init(tmpdir: str, env: dict[str, str]) -> None:
    os.environ["RAY_TMPDIR"] = tmpdir   # the address file and session_latest stay in here
    os.environ.update(env)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(head: dict[str, Any], workers: list[dict[str, Any]], autoscaler: Autoscaler | None) -> str:
    import ray
    from ray.cluster_utils import Cluster

    head = {"num_cpus": 1, "num_gpus": 0, "include_dashboard": False, "dashboard_port": _free_port(),
            "_system_config": SYSTEM_CONFIG, **head}
    if autoscaler is not None:
        head.update(_autoscaling_head(head, autoscaler))
    import psutil

    before = {p.pid for p in psutil.Process().children()}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    _STATE["cluster"] = cluster
    _STATE["roots"] = {cluster.head_node.node_id: [
        p for p in psutil.Process().children() if p.pid not in before]}
    for worker in workers:
        _add_worker(worker)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    return cluster.address


def _autoscaling_head(head: dict[str, Any], spec: Autoscaler) -> dict[str, Any]:
    """Head arguments that start Ray's monitor with the fake multi-node provider."""
    import ray.util

    from dialscore_server.compat import fake_head_node_id

    os.environ.update({"RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"})
    gcs_port = _free_port()
    ip = ray.util.get_node_ip_address()
    head_resources = {"CPU": head["num_cpus"], "GPU": head.get("num_gpus", 0)}
    config = {
        "cluster_name": "dialscore-local", "max_workers": spec.max_workers,
        "provider": {"type": "fake_multinode", "use_node_id_as_ip": True,
                     "disable_node_updaters": True, "disable_launch_config_check": True,
                     "gcs_address": f"{ip}:{gcs_port}"},
        "available_node_types": {
            "ray.head.default": {"resources": head_resources, "node_config": {}, "max_workers": 0},
            spec.node_type: {"resources": spec.resources, "node_config": {},
                             "min_workers": spec.min_workers, "max_workers": spec.max_workers},
        },
        "head_node_type": "ray.head.default", "upscaling_speed": 1.0,
        "idle_timeout_minutes": spec.idle_timeout_s / 60,
        # Fields the autoscaler's schema requires; nothing is installed or synced locally.
        "auth": {}, "docker": {}, "initialization_commands": [], "setup_commands": [],
        "head_setup_commands": [], "worker_setup_commands": [], "head_start_ray_commands": [],
        "worker_start_ray_commands": [], "file_mounts": {}, "cluster_synced_files": [],
        "file_mounts_sync_continuously": False, "rsync_exclude": [], "rsync_filter": [],
    }
    path = Path(os.environ["RAY_TMPDIR"]) / "autoscaling.json"
    path.write_text(json.dumps(config))
    # Worker raylets started by the fake provider inherit the monitor's environment.
    os.environ.update(spec.env)
    return {"gcs_server_port": gcs_port, "autoscaling_config": str(path),
            "env_vars": {**head.get("env_vars", {}), "RAY_OVERRIDE_NODE_ID_FOR_TESTING": fake_head_node_id()}}


def _nodes() -> list[dict[str, Any]]:
    import ray

    return [{"node_id": n["NodeID"], "is_head": "node:__internal_head__" in n["Resources"],
             "resources": n["Resources"], "metrics_port": n.get("MetricsExportPort")}
            for n in ray.nodes() if n["Alive"]]


def _add_worker(node_args: dict[str, Any]) -> str:
    """Start a worker node; the processes this child gains meanwhile are that node's roots (its
    raylet and agents, whose descendants are the node's Ray workers)."""
    import psutil

    before = {p.pid for p in psutil.Process().children()}
    node = _STATE["cluster"].add_node(**node_args)
    _STATE["roots"][node.node_id] = [p for p in psutil.Process().children() if p.pid not in before]
    return node.node_id


def _kill_worker(node_id: str) -> float:
    """SIGKILL every process of the node at once, as deleting its pod does: its raylet and agents
    and all their descendants (the replicas, proxies and idle workers it started). Ray's own
    ``remove_node`` kills only the processes it started itself: a replica's worker process
    would live on and could still answer a call it held. Then Ray's bookkeeping forgets it."""
    import psutil

    cluster = _STATE["cluster"]
    (node,) = [n for n in cluster.worker_nodes if n.node_id == node_id]
    start = time.monotonic()
    doomed: list[psutil.Process] = []
    for root in _STATE["roots"].pop(node_id, []):
        try:
            doomed += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    for process in doomed:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(doomed, timeout=30)
    cluster.remove_node(node, allow_graceful=False)
    return time.monotonic() - start


def _kill_gcs() -> int:
    from dialscore_server.compat import kill_gcs_server

    return kill_gcs_server(_STATE["cluster"].head_node)


def _start_gcs() -> int:
    from dialscore_server.compat import start_gcs_server

    return start_gcs_server(_STATE["cluster"].head_node)


def _proxy_pids() -> dict[str, int]:
    import psutil

    out = {}
    for node_id, roots in _STATE["roots"].items():
        for root in roots:
            try:
                for proc in root.children(recursive=True):
                    if " ".join(proc.cmdline()).strip().startswith("ray::ProxyActor"):
                        out[node_id] = proc.pid
            except psutil.Error:
                pass
    return out


def _kill_proxy(node_id: str) -> int:
    import signal

    import psutil

    pid = _proxy_pids()[node_id]
    os.kill(pid, signal.SIGKILL)
    try:
        psutil.Process(pid).wait(60)   # a hang guard; reaped by its raylet
    except psutil.NoSuchProcess:
        pass
    return pid


def _deploy(args: dict[str, Any], http_port: int, name: str, route_prefix: str, wait: bool) -> None:
    from ray import serve

    from dialscore_server.gateway.args import AppArgs
    from dialscore_server.gateway.build import build_app

    serve.start(http_options={"host": "127.0.0.1", "port": http_port, "location": "EveryNode"})
    app = build_app(AppArgs.model_validate(args))
    if wait:  # until every deployment is RUNNING (raises if one fails to deploy)
        serve.run(app, name=name, route_prefix=route_prefix)
    else:
        from ray.serve.api import _run

        _run(app, _blocking=False, name=name, route_prefix=route_prefix)


def _status_messages(app: str) -> dict[str, str]:
    from ray import serve

    status = serve.status().applications.get(app)
    if status is None:
        return {}
    return {name: f"{dep.status}: {dep.message}" for name, dep in status.deployments.items()}


def _proxies() -> dict[str, str]:
    from ray import serve

    return {node: str(status).rsplit(".", 1)[-1] for node, status in serve.status().proxies.items()}


def _delete_app(name: str) -> None:
    from ray import serve

    serve.delete(name)


def _replicas(app: str) -> dict[str, list[dict[str, Any]]]:
    from dialscore_server.compat import serve_replicas

    by_deployment: dict[str, list[dict[str, Any]]] = {}
    for replica in serve_replicas():
        if replica["app"] == app:
            by_deployment.setdefault(replica["deployment"], []).append(
                {k: replica[k] for k in ("replica_id", "state", "node_id", "actor_name")})
    return by_deployment


def _kill_actor(actor_name: str) -> None:
    """``ray.kill`` returns before the actor's process is gone; this returns after, so that
    nothing the actor holds can still be answered once the caller goes on (all nodes of a
    LocalCluster are on this machine)."""
    import psutil

    import ray
    from dialscore_server.compat import serve_replicas

    processes = []
    for replica in serve_replicas():
        if replica["actor_name"] == actor_name and replica["pid"]:
            try:
                processes.append(psutil.Process(replica["pid"]))
            except psutil.NoSuchProcess:
                pass
    ray.kill(ray.get_actor(actor_name, namespace="serve"), no_restart=True)
    _, alive = psutil.wait_procs(processes, timeout=60)
    assert not alive, f"{actor_name}'s process outlived ray.kill by 60 s"


def _scrape() -> dict[str, str]:
    import urllib.request

    out = {}
    for node in _nodes():
        if node["metrics_port"]:
            with urllib.request.urlopen(f"http://127.0.0.1:{node['metrics_port']}/metrics",
                                        timeout=10) as r:
                out[node["node_id"]] = r.read().decode()
    return out


def _shutdown() -> None:
    import ray

    cluster = _STATE.pop("cluster", None)
    if cluster is None:
        return
    # Worker raylets the fake autoscaler started descend from the head's monitor, not from
    # anything Ray's Cluster knows: collect every descendant of the nodes' processes before the
    # head goes, end what is left by pid after.
    import psutil

    launched = []
    for roots in _STATE.pop("roots", {}).values():
        for root in roots:
            try:
                launched += [root, *root.children(recursive=True)]
            except psutil.Error:
                pass
    try:
        from ray import serve

        serve.shutdown()
    except Exception:  # noqa: BLE001 - the cluster goes anyway
        pass
    ray.shutdown()
    cluster.shutdown()
    for proc in launched:
        try:
            proc.kill()
        except Exception:  # noqa: BLE001 - already gone
            pass
