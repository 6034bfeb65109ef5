"""The benchmarks and load tests (loadtests/) still import against the code they measure, so a
renamed or removed API fails here instead of in a benchmark run months later.

Nothing is run: every module is imported, and every name any of them imports from the project's
packages, in function bodies too, must exist. Locust's scenarios are imported only where Locust
(the `load` extra) is installed, and in a process of their own: importing Locust patches the
standard library for gevent, in whatever process imports it. No module may touch ``sys.path`` or ``PYTHONPATH``: they run
from the repository root as ``python -m loadtests.<name>`` (as this test suite does,
``python -m pytest``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOADTESTS = ROOT / "loadtests"
MODULES = sorted(p.stem for p in LOADTESTS.glob("*.py") if p.stem != "__init__")
#: Modules imported in a process of their own, where their package is installed: module -> package.
APART = {"locustfile": "locust"}
#: The packages whose names the modules must find.
PROJECT = ("dialscore_server", "dialscore", "loadtests", "tests")


def project_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of every import of a project module in `path`: `name` None for
    ``import module``."""
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in PROJECT:
                out += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, None) for alias in node.names
                    if alias.name.split(".")[0] in PROJECT]
    return out


def test_every_module_is_checked():
    assert {"common", "bench_probe", "soak"} <= set(MODULES), MODULES


def import_from_root(modules: list[str]) -> subprocess.CompletedProcess:
    """Import `modules` in a fresh interpreter started at the repository root as a user starts a
    benchmark (``python -m loadtests.<name>``): without the test folders the test suite puts on
    ``PYTHONPATH``, so a module that only imports inside the test run fails here."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", "; ".join(f"import {m}" for m in modules)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_imports():
    done = import_from_root([f"loadtests.{name}" for name in MODULES if name not in APART])
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("name", sorted(APART))
def test_imports_apart(name):
    if importlib.util.find_spec(APART[name]) is None:
        pytest.skip(f"{APART[name]} is not installed")
    done = import_from_root([f"loadtests.{name}"])
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("name", MODULES)
def test_every_project_name_it_imports_exists(name):
    missing = []
    for line, module, attr in project_imports(LOADTESTS / f"{name}.py"):
        try:
            found = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"line {line}: module {module} ({exc})")
            continue
        if attr is None or hasattr(found, attr):
            continue
        try:
            importlib.import_module(f"{module}.{attr}")
        except ImportError:
            missing.append(f"line {line}: {module}.{attr}")
    assert not missing, f"loadtests/{name}.py imports what does not exist: {missing}"


@pytest.mark.parametrize("name", MODULES)
def test_no_path_manipulation(name):
    tree = ast.parse((LOADTESTS / f"{name}.py").read_text())
    found = [node.lineno for node in ast.walk(tree)
             if (isinstance(node, ast.Attribute) and node.attr == "path"
                 and isinstance(node.value, ast.Name) and node.value.id == "sys")
             or (isinstance(node, ast.Constant) and node.value == "PYTHONPATH")]
    assert not found, f"loadtests/{name}.py touches sys.path or PYTHONPATH at lines {found}"
