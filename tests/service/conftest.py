"""The real Serve application on loopback, started once per session."""

from __future__ import annotations

from pathlib import Path

import pytest


class Served:
    """The real Serve application on loopback: its base URL and the arguments it was built from."""

    def __init__(self, url: str, args):
        self.url = url
        self.args = args

    def config(self, name: str):
        """The served ModelConfig of `name` (for building the same engine in-process)."""
        every = self.args.model_configs() + self.args.classifier_configs()
        return {c.name: c for c, _ in every}[name]


def serve_args(stand_ins: Path, sharp: dict[str, Path], trained: Path):
    from dialscore_server.gateway.args import AppArgs

    one_thread = {"num_cpus": 0.2, "num_threads": 1}
    return AppArgs.model_validate({
        "stand_ins": str(stand_ins),
        "request_timeout_s": 60,
        # A request no replica accepts within 3 s (e.g. while a killed replica is replaced) is a 503.
        "queue_timeout_s": 3,
        "models": [
            {"name": "dialogpt-medium", "overrides": {"source": str(sharp["gpt2"])},
             "serving": {**one_thread, "max_ongoing_requests": 64}},
            {"name": "bart-base", "overrides": {"source": str(sharp["bart"])}, "serving": one_thread},
            # A deliberately tiny queue, for the overload test.
            {"name": "dialogpt-medium", "serve_as": "tiny-queue",
             "serving": {**one_thread, "max_ongoing_requests": 1, "max_queued_requests": 1}},
            # For the CEDAR probe end-to-end test: trained and untrained decoder-only stand-ins.
            {"name": "dialogpt-medium", "serve_as": "trained-gpt2", "overrides": {"source": str(trained)},
             "serving": one_thread},
            {"name": "dialogpt-medium", "serve_as": "untrained-gpt2", "serving": one_thread},
            # Only tests/test_replica_failure.py uses it: its replica is killed mid-run.
            {"name": "dialogpt-medium", "serve_as": "victim", "serving": one_thread},
        ],
        "classifiers": [
            {"name": "roberta-large-mnli", "overrides": {"source": str(sharp["nli-contradiction-first"])},
             "serving": one_thread},
            # Only tests/test_replica_failure.py uses it: its replica is killed during a rerank load.
            {"name": "roberta-large-mnli", "serve_as": "victim-nli",
             "overrides": {"source": str(sharp["nli-contradiction-first"])}, "serving": one_thread},
        ],
    })


@pytest.fixture(scope="session")
def served(stand_ins, sharp_stand_ins, trained_gpt2):
    """Start Ray and the Serve app once per session on a free loopback port; wait on /readyz."""
    import time

    import httpx

    from dialscore_server.gateway.embedded import serve_locally

    args = serve_args(stand_ins, sharp_stand_ins, trained_gpt2)
    with serve_locally(args, num_cpus=4) as url:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError("the Serve app did not become ready within 120 s")
        yield Served(url, args)
