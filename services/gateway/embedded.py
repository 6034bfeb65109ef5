"""The embedded default: run the application on a local Ray instance, on a free loopback port.

Used by `dialscore demo`, the load tests, the benchmarks and the test fixture, so all of them start
the service the same way (and `HF_HUB_OFFLINE` reaches the replicas).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from services.gateway.config import AppArgs

ROOT = Path(__file__).resolve().parents[2]
LOCAL_CONFIG = ROOT / "deployments" / "local.yaml"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def app_args_from_yaml(path: str | Path = LOCAL_CONFIG) -> AppArgs:
    """The first application's `args` of a Serve config; a relative `stand_ins` folder is taken
    relative to the repository root (as `serve run` from the root would)."""
    raw = yaml.safe_load(Path(path).read_text())["applications"][0]["args"]
    if raw.get("stand_ins") and not Path(raw["stand_ins"]).is_absolute():
        raw["stand_ins"] = str(ROOT / raw["stand_ins"])
    return AppArgs.model_validate(raw)


@contextmanager
def serve_locally(args: AppArgs, *, num_cpus: int | None = None, name: str = "dialscore",
                  port: int | None = None) -> Iterator[str]:
    """Start Ray and the app on 127.0.0.1:`port` (default: a free one); yield its base URL
    (http://127.0.0.1:PORT); shut both down after.

    The replicas import this checkout's code: its root goes first on their PYTHONPATH, so a
    benchmark run from another virtual environment (one with lm-eval, say, whose own install of
    the project may be older) still serves the code it measures in-process."""
    import os

    import ray
    from ray import serve

    from services.gateway.app import build_app

    port = port or free_port()
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                                       "PYTHONPATH": pythonpath}})
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(build_app(args), name=name, route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()
