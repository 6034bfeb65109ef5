"""The embedded default: run the application on a local Ray instance, on a free loopback port.

Used by `dialscore demo`, the load tests, the benchmarks and the test fixture, so all of them start
the service the same way (and `HF_HUB_OFFLINE` reaches the replicas).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path

import yaml

from dialscore_server.gateway.args import AppArgs

#: The embedded default's Serve config (deployments/local.yaml, shipped inside the package).
LOCAL_CONFIG = Path(str(files("dialscore_server.deployments") / "local.yaml"))


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


@contextmanager
def serve_locally(args: AppArgs, *, num_cpus: int | None = None, name: str = "dialscore",
                  host: str = "127.0.0.1", port: int | None = None) -> Iterator[str]:
    """Start Ray and the app on `host`:`port` (default 127.0.0.1 and a free port); yield its base
    URL (http://HOST:PORT); shut both down after.

    The replicas import the same code as this process: the folders that hold the imported
    `dialscore_server` and `dialscore` packages go first on their PYTHONPATH, so a benchmark run
    from another virtual environment (one with lm-eval, say, whose own install of the project may
    be older) still serves the code it measures in-process."""
    import os

    import dialscore
    import ray
    from ray import serve

    import dialscore_server
    from dialscore_server.gateway.build import build_app
    from dialscore_server.gateway.proxy_guard import proxy_environment

    port = port or free_port()
    # Serve's proxies inherit this from the raylet this call starts (gateway/proxy_guard.py).
    for key, value in proxy_environment().items():
        os.environ.setdefault(key, value)
    roots = [str(Path(pkg.__file__).resolve().parents[1]) for pkg in (dialscore_server, dialscore)]
    pythonpath = os.pathsep.join(p for p in (*roots, os.environ.get("PYTHONPATH")) if p)
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                                       "PYTHONPATH": pythonpath}})
    try:
        serve.start(http_options={"host": host, "port": port})
        serve.run(build_app(args), name=name, route_prefix="/")
        yield f"http://{host}:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()
