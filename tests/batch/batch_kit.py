"""Helpers of the batch tests: a job's models served by the fake engines (no model loaded), the
same models behind the service's own app in-process (:class:`fake_api.FakeAPI`), request lines,
and running ``dialscore batch`` as a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from dialscore_server.batch.models import JobModels
from dialscore_server.gateway.args import AppArgs

TESTS = Path(__file__).resolve().parents[1]

#: The job's models: a causal dialogue model and a classifier, on the fake engines.
FAKE_ARGS: dict[str, Any] = {
    "models": [{"name": "dialogpt-medium", "serve_as": "fake-gpt",
                "serving": {"engine": "fake_api:FakeNLLEngine"}}],
    "classifiers": [{"name": "roberta-large-mnli", "serve_as": "fake-nli",
                     "serving": {"engine": "fake_api:FakeDetector"}}],
}


def job_models(args: dict[str, Any] = FAKE_ARGS) -> JobModels:
    app = AppArgs.model_validate(args)
    return JobModels(nll=app.model_configs(), classifiers=app.classifier_configs(),
                     limits=app.limits)


def fake_api(models: JobModels):
    """The service's app over the same fake models (same cards, so the same bodies)."""
    from fake_api import FakeAPI

    cards = [engine_card(cfg, opts) for cfg, opts in models.nll + models.classifiers]
    return FakeAPI(cards=cards, limits=models.limits)


def engine_card(cfg, opts):
    """The card of the engine the job builds for `cfg`."""
    from dialscore_server.contract.engine import engine_class

    return engine_class(opts.engine, object).from_options(cfg, opts).card()


def nll_line(custom_id: str, context: list[str], target: str, model: str = "fake-gpt") -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/nll",
            "body": {"model": model, "items": [{"context": context, "target": target}]}}


def write_lines(path: Path, lines: list[Any]) -> Path:
    """`lines`: dicts (written as JSON) or raw strings (written as they are)."""
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def read_output(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def write_config(path: Path, args: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"applications": [{"name": "batch", "route_prefix": "/",
                                                      "import_path": "x:y", "args": args}]}))
    return path


def run_batch_command(argv: list[str], env: dict[str, str] | None = None,
                      timeout_s: float = 600) -> subprocess.CompletedProcess:
    """``dialscore batch ARGV`` in a child process that can import the test fakes."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(TESTS), full_env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "dialscore.cli", "batch", *argv],
                          env=full_env, capture_output=True, text=True, timeout=timeout_s)
