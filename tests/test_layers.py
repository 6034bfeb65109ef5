"""The server's layers import one way.

Read: every module under services/dialscore_server, every import in it (at module level or
inside a function, ``from . import`` included), without importing anything. Checked:

* **checkpoints** (the registry, loading, stand-ins, int8 weights: what the contract names) imports
  no contract, scheduling, training, endpoint, gateway, batch or command module;
* **contract** (what every endpoint stands on) imports no scheduling, endpoint, gateway, batch
  or command module;
* **scheduling** (one layer, called by the endpoints) imports no endpoint, gateway, batch or
  command module: what a request is, is the endpoint's;
* the **endpoints** (nll, contradiction, rerank) never import the gateway, the batch job or the
  commands;
* **engines** (each endpoint's ``engine/`` package) import no Ray: they run without it and are
  injected into the deployments.

A violation fails naming the module, the import and the rule.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "services" / "dialscore_server"
ENDPOINTS = ("nll", "contradiction", "rerank")
ABOVE_ENDPOINTS = ("gateway", "batch", "commands", "directory")

#: layer -> the dialscore_server packages it must not import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "checkpoints": ("contract", "scheduling", "training", *ENDPOINTS, *ABOVE_ENDPOINTS),
    "contract": ("scheduling", *ENDPOINTS, *ABOVE_ENDPOINTS),
    "scheduling": (*ENDPOINTS, *ABOVE_ENDPOINTS),
    **{endpoint: ("gateway", "batch", "commands") for endpoint in ENDPOINTS},
}


def module_name(path: Path) -> list[str]:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def imports(path: Path) -> list[str]:
    """Every module `path` imports, absolute (``dialscore_server.x.y``, ``ray.serve``...)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path)[:-1]
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[:len(package) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from dialscore_server import metrics`` imports the module dialscore_server.metrics
            found += [f"{base}.{alias.name}" for alias in node.names] if base == "dialscore_server" \
                else [base]
    return found


def violations() -> list[str]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if len(name) < 2:
            continue
        layer, rel = name[1], path.relative_to(PACKAGE)
        in_engine = len(name) > 2 and name[2] == "engine"
        for imported in imports(path):
            parts = imported.split(".")
            if parts[0] == "dialscore_server" and len(parts) > 1 and parts[1] != layer \
                    and parts[1] in FORBIDDEN.get(layer, ()):
                out.append(f"{rel}: imports {imported} ({layer} must not import {parts[1]})")
            if in_engine and parts[0] == "ray":
                out.append(f"{rel}: imports {imported} (an engine runs without Ray)")
    return out


def test_the_layers_import_one_way():
    assert not violations(), "\n".join(violations())


@pytest.mark.parametrize("source, expected", [
    ("from dialscore_server.nll.engine.encoding import NLLItem", "must not import nll"),
    ("from ..gateway.app import x", "must not import gateway"),
    ("def f():\n    import ray.serve", "runs without Ray"),
])
def test_a_violation_is_named(tmp_path, monkeypatch, source, expected):
    """The checker itself: an upward import, a relative one and a lazy Ray import in an engine
    are each reported."""
    package = tmp_path / "dialscore_server"
    where = {"must not import nll": "scheduling/x.py", "must not import gateway": "nll/x.py",
             "runs without Ray": "nll/engine/x.py"}[expected]
    for folder in ("scheduling", "nll", "nll/engine", "gateway"):
        (package / folder).mkdir(parents=True, exist_ok=True)
        (package / folder / "__init__.py").write_text("")
    (package / where).write_text(source + "\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    assert any(expected in v for v in violations()), violations()
