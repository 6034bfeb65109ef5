"""The embedded default: run the application on a local Ray instance, behind the front door
(gateway/front_door.py), on a free loopback port or the one asked for.

Used by `dialscore serve`, `dialscore demo`, the load tests, the benchmarks and the test fixture,
so all of them start the service the same way (and `HF_HUB_OFFLINE` reaches the replicas).

With auth off, the embedded default refuses requests whose ``Host`` is not a loopback name or
address (DNS rebinding; contract/host_check.py) unless listed: :func:`embedded_args` sets the
list.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path
from typing import NamedTuple

import yaml

from dialscore_server.gateway.args import AppArgs
from dialscore_server.gateway.front_door import FrontDoorLimits
from dialscore_server.gateway.local_ray import start_local_ray
from dialscore_server.contract.host_check import allowed_hosts_from_environment

#: The embedded default's Serve config (deployments/local.yaml, shipped inside the package).
LOCAL_CONFIG = Path(str(files("dialscore_server.deployments") / "local.yaml"))

#: How long Serve's HTTP proxy may take to answer its health route after Serve starts, in seconds
#: (a hang guard: on a machine busy with other work a proxy can take minutes).
PROXY_START_LIMIT_S = 600.0

#: Ray's own settings for Serve's proxy health checks, for the embedded default (an operator's
#: own value in the environment wins; on a cluster they go in the head's environment, see
#: deployments/kuberay/rayservice.yaml). Serve's controller replaces a proxy after 3 failed health
#: checks in a row (a constant in Ray), one every ``RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S``
#: (Ray's default 10 s): a proxy that died refuses connections some 30 s before a new one starts.
#: Every 2 s, that part is about 6 s. Each check still waits up to
#: ``RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S`` (10 s) for an answer, so a busy proxy is no more
#: likely to be replaced than before. Read by the controller when it starts.
PROXY_HEALTH_ENV = {"RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S": "2"}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def app_args_from_yaml(path: str | Path = LOCAL_CONFIG) -> AppArgs:
    """The first application's `args` of a Serve config. A relative `stand_ins` folder is taken
    relative to the current directory, as `serve run` started there would."""
    raw = yaml.safe_load(Path(path).read_text())["applications"][0]["args"]
    return AppArgs.model_validate(raw)


def embedded_args(args: AppArgs, allowed_hosts: Sequence[str] | None = None,
                  environ: Mapping[str, str] | None = None) -> AppArgs:
    """`args` as the embedded default serves them: the Host check on, its extra names from
    `allowed_hosts` (``--allowed-hosts``) when given, else ``DIALSCORE_ALLOWED_HOSTS`` when set,
    else `args`' own ``allowed_hosts``, else none (loopback only)."""
    import os

    hosts = list(allowed_hosts) if allowed_hosts is not None else allowed_hosts_from_environment(
        os.environ if environ is None else environ)
    if hosts is None:
        hosts = args.allowed_hosts if args.allowed_hosts is not None else []
    return args.model_copy(update={"allowed_hosts": hosts})


class LocalService(NamedTuple):
    """The embedded default's two addresses: `url`, the front door's (what clients use), and
    `proxy_url`, Serve's HTTP proxy's behind it (loopback only; for measuring the front door)."""

    url: str
    proxy_url: str


@contextmanager
def serve_locally(args: AppArgs, *, num_cpus: int | None = None, name: str = "dialscore",
                  host: str = "127.0.0.1", port: int | None = None,
                  limits: FrontDoorLimits | None = None,
                  allowed_hosts: Sequence[str] | None = None,
                  drain_s: float = 0.0) -> Iterator[str]:
    """Start Ray and the app; yield its base URL (http://HOST:PORT, default 127.0.0.1 and a free
    port); shut both down after. As :func:`local_service`, which says more."""
    with local_service(args, num_cpus=num_cpus, name=name, host=host, port=port,
                       limits=limits, allowed_hosts=allowed_hosts, drain_s=drain_s) as service:
        yield service.url


@contextmanager
def local_service(args: AppArgs, *, num_cpus: int | None = None, name: str = "dialscore",
                  host: str = "127.0.0.1", port: int | None = None,
                  limits: FrontDoorLimits | None = None,
                  allowed_hosts: Sequence[str] | None = None,
                  drain_s: float = 0.0) -> Iterator[LocalService]:
    """Start Ray (:func:`~dialscore_server.gateway.local_ray.start_local_ray`: again while its
    node startup times out on a busy machine) and the app; yield its addresses; shut both down
    after.

    The app is `args` with the embedded default's Host check (:func:`embedded_args`:
    `allowed_hosts`, else ``DIALSCORE_ALLOWED_HOSTS``, else ``args.allowed_hosts``, else loopback
    only), which applies while auth is off.

    HOST:PORT (default 127.0.0.1 and a free port) is the front door's (gateway/front_door.py),
    with `limits` (default: from ``DIALSCORE_HEADER_TIMEOUT_S`` and
    ``DIALSCORE_MAX_CONNECTIONS``, read before Ray starts, so a bad value fails at once). Serve's
    HTTP proxy listens on another free port of 127.0.0.1, for the front door; Ray's proxy health
    checks are set from :data:`PROXY_HEALTH_ENV` (into this process's environment, where not set
    already, so that Serve's controller inherits them). The front door
    runs in this process, which records its counts to Ray's metrics agent as well as to its own
    registry (metric_recording.py). On exit the front door first drains for at most `drain_s` seconds
    (0: not at all; :meth:`FrontDoor.drain <dialscore_server.gateway.front_door.FrontDoor.drain>`):
    the requests in flight are answered before Serve shuts down.

    The replicas import the same code as this process: the folders that hold the imported
    `dialscore_server` and `dialscore` packages go first on their PYTHONPATH, so a benchmark run
    from another virtual environment (one with lm-eval, say, whose own install of the project may
    be older) still serves the code it measures in-process."""
    import os

    import dialscore
    import ray
    from ray import serve

    import dialscore_server
    from dialscore_server import metrics
    from dialscore_server.gateway.build import build_app
    from dialscore_server.gateway.front_door import front_door_thread

    limits = limits or FrontDoorLimits.from_environment()
    port = port or free_port()
    proxy_port = free_port()
    for variable, value in PROXY_HEALTH_ENV.items():   # Serve's controller inherits them
        os.environ.setdefault(variable, value)
    roots = [str(Path(pkg.__file__).resolve().parents[1]) for pkg in (dialscore_server, dialscore)]
    pythonpath = os.pathsep.join(p for p in (*roots, os.environ.get("PYTHONPATH")) if p)
    start_local_ray(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                    runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1",
                                              "TOKENIZERS_PARALLELISM": "false",
                                              "PYTHONPATH": pythonpath}})
    try:
        start_serve(proxy_port)
        metrics.SLOW_CLIENTS.record_to_ray_from_this_process()
        with front_door_thread(("127.0.0.1", proxy_port), host, port, limits, drain_s):
            serve.run(build_app(embedded_args(args, allowed_hosts)), name=name, route_prefix="/")
            yield LocalService(f"http://{host}:{port}", f"http://127.0.0.1:{proxy_port}")
    finally:
        metrics.SLOW_CLIENTS.record_to_ray_from_this_process(False)
        serve.shutdown()
        ray.shutdown()


def start_serve(proxy_port: int, limit_s: float = PROXY_START_LIMIT_S) -> None:
    """Start Serve with its HTTP proxy on 127.0.0.1:`proxy_port`, and return once the proxy
    answers HTTP (its health route, ``GET /-/healthz``, says 503 until an application is deployed).

    ``serve.start`` waits a fixed 60 s for the proxy, and Serve's controller restarts a proxy that
    is not ready within its ready-check deadline; on a busy machine either ends ``serve.start``
    with an error (``TimeoutError``, or ``ActorDiedError`` for the restarted proxy) while Serve
    goes on starting a proxy. Then Serve is started again (which connects to the running
    controller) and the proxy's health route is polled until it answers or `limit_s` passes
    (``TimeoutError``)."""
    import time

    import httpx
    from ray import serve
    from ray.exceptions import ActorDiedError

    options = {"host": "127.0.0.1", "port": proxy_port}
    try:
        serve.start(http_options=options)
    except (TimeoutError, ActorDiedError):
        serve.start(http_options=options)
    deadline = time.monotonic() + limit_s
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{proxy_port}/-/healthz", timeout=10)
            return  # any answer: the proxy listens (503 until an application's routes arrive)
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"Serve's HTTP proxy did not answer on port {proxy_port} "
                               f"within {limit_s:.0f} s")
        time.sleep(0.5)
