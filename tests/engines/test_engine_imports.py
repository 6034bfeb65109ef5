"""Engines are plain Python over torch and transformers: importing one loads neither Ray nor the
web stack (FastAPI, Starlette, uvicorn), so an engine runs, and is tested, outside the service.
Each import runs in a fresh interpreter, where nothing else has loaded them."""

from __future__ import annotations

import subprocess
import sys

import pytest

SERVICE_ONLY = ("ray", "fastapi", "starlette", "uvicorn")


@pytest.mark.parametrize("module", [
    "dialscore_server.nll.engine.engine",
    "dialscore_server.contradiction.engine.engine",
    "dialscore_server.rerank.engine.reranker",
])
def test_an_engine_imports_without_ray_or_the_web_stack(module):
    code = (f"import sys, {module}\n"
            f"sys.exit(sorted(m for m in {SERVICE_ONLY!r} if m in sys.modules) or 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, f"{module} loads {done.stderr.strip()}"
