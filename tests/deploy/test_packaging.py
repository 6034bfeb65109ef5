"""Packaging: the client installs alone (httpx and pydantic only, no torch, transformers or Ray,
no server commands), the server's wheel carries its configs, the client's its probe sample, and
neither installs a top-level package that could collide with an application's own."""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients"


def requirement_name(spec: str) -> str:
    return re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0].lower().replace("_", "-")


def closure(names: list[str]) -> set[str]:
    """The installed distributions `names` need on this Python, recursively (no extras)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for spec in md.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(requirement_name(req.name))
    return seen


def test_client_requires_only_httpx_and_pydantic():
    meta = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert sorted(requirement_name(r) for r in meta["dependencies"]) == ["httpx", "pydantic"]
    heavy = {"torch", "transformers", "ray", "fastapi", "numpy", "matplotlib"}
    assert not heavy & closure(["httpx", "pydantic"])


def test_every_server_package_is_shipped():
    """setuptools lists the server's packages explicitly (deployments/ is mapped into it), so a
    new subpackage must be added there or the wheel silently lacks it."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT / "services").parts)
             for p in (ROOT / "services").rglob("__init__.py")}
    assert found | {"dialscore_server.deployments"} == listed


def test_client_alone_imports_and_offers_only_client_commands(tmp_path):
    """A Python that sees only the client's source and its dependency closure (no site-packages,
    so no torch, transformers, Ray or server distribution) imports the client and runs its CLI."""
    site = tmp_path / "site"
    site.mkdir()
    for dist_name in closure(["httpx", "pydantic"]):
        dist = md.distribution(dist_name)
        tops = (dist.read_text("top_level.txt") or "").split()
        files = [Path(str(f)) for f in dist.files or []]
        tops = tops or sorted({f.parts[0] for f in files if not f.parts[0].endswith(".dist-info")
                               and f.parts[0] != ".."})
        for top in tops + [f.parts[0] for f in files if f.parts[0].endswith(".dist-info")][:1]:
            for candidate in (Path(dist.locate_file(top)), Path(str(dist.locate_file(top)) + ".py")):
                if candidate.exists() and not (site / candidate.name).exists():
                    (site / candidate.name).symlink_to(candidate)
    script = (
        "import sys, importlib.util\n"
        "for name in ('torch', 'transformers', 'ray', 'numpy', 'dialscore_server'):\n"
        "    assert importlib.util.find_spec(name) is None, name\n"
        "import dialscore, dialscore.client, dialscore.errors\n"
        "from dialscore.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0\n"
    )
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join([str(site), str(CLIENT)])}
    # cwd: not the checkout, whose editable-install metadata would register the server commands.
    out = subprocess.run([sys.executable, "-S", "-c", script], env=env, capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    commands = re.search(r"\{([\w,-]+)\}", out.stdout).group(1).split(",")
    assert commands == ["probe", "models", "eval", "perplexity", "report"], out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("project,expected,forbidden", [
    (ROOT, "dialscore_server/deployments/local.yaml", ("services/", "clients/", "dialscore/")),
    (CLIENT, "dialscore/probes/cedar_sample.jsonl", ("services/", "clients/", "dialscore_server/")),
])
def test_wheels_carry_their_data_and_no_colliding_top_level(tmp_path, project, expected, forbidden):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                          "--no-build-isolation", "-w", str(tmp_path), str(project)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert expected in names
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert not any(t + "/" in forbidden for t in tops), tops
    assert len(tops) == 1, tops
