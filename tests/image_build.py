"""Building the container image for tests/deploy/test_image.py, in the background of the run.

A cold build (the stand-in base from Debian's packages, then the Dockerfile's dependency layer)
takes minutes, and nothing else in the suite needs the image. So when the image test is
collected, tests/conftest.py starts :func:`start` right after collection and moves the image test
to the end of the run: the build overlaps the rest of the suite, and the test waits for its
:func:`outcome`. Run alone (``python tests/image_build.py RESULT.json``) it builds and writes the
outcome there.

The base is the Dockerfile's default (rayproject/ray) when that image is already on this machine;
otherwise (no public registry is reachable here or in CI) the stand-in base that
deployments/image/standin-base.sh builds. pip inside the build gets the CPU torch from where this
machine's pip gets it (its find-links, extra indexes and CA bundle, mounted read-only for the
build). Only the standard library is imported here: the client-only test run loads conftest too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
CONTAINERS_CONF = ROOT / "deployments" / "image" / "containers.conf"
STANDIN_BASE = ROOT / "deployments" / "image" / "standin-base.sh"
IMAGE = "localhost/dialscore-test:latest"

#: Hang guards, in seconds: a build (a cold one downloads the dependencies), and any single step.
BUILD_LIMIT_S = 1500
HANG_S = 120

#: Tools the test needs, and the Debian package that brings each.
TOOLS = {"podman": "podman", "runc": "runc", "mmdebstrap": "mmdebstrap", "nsenter": "util-linux",
         "ss": "iproute2"}


def unavailable() -> str | None:
    """Why the image cannot be built and run here (a missing tool, naming its Debian package, or
    not root: rootful Podman for mmdebstrap and published ports), or None."""
    missing = [f"{tool} (Debian package {package})" for tool, package in TOOLS.items()
               if shutil.which(tool) is None]
    if missing:
        return f"the image test needs {', '.join(missing)}: `make test` installs them as root"
    if os.geteuid() != 0:
        return "the image test runs rootful Podman (mmdebstrap, published ports): run as root"
    return None


def podman(*args: str, timeout: float = HANG_S, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    result = subprocess.run(["podman", *args], capture_output=True, text=True, env=env,
                            timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {result.returncode}\n"
                             f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def default_base() -> str:
    match = re.search(r"^ARG BASE_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert match, "the Dockerfile names its default base in `ARG BASE_IMAGE=`"
    return match.group(1)


def pip_settings() -> tuple[list[str], list[str]]:
    """Build arguments and read-only volumes that give pip in the build what this machine's pip
    uses (its find-links, extra indexes and CA bundle): the CPU torch where this machine has it.
    Settings that name nothing local are passed without a volume."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                            text=True, timeout=HANG_S).stdout
    found: dict[str, str] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        name = key.rpartition(".")[2]
        if name in ("find-links", "extra-index-url", "cert"):
            found[name] = value.strip().strip("'\"")
    if os.environ.get("PIP_CERT"):
        found["cert"] = os.environ["PIP_CERT"]
    args, volumes = [], set()
    for name, value in found.items():
        words = value.split()
        for word in words:
            path = urlparse(word).path if word.startswith("file:") else word
            if path.startswith("/") and Path(path).exists():
                volumes.add(str(Path(path).parent) if word.startswith("file:") else path)
        args += ["--build-arg", f"PIP_{name.upper().replace('-', '_')}={' '.join(words)}"]
    mounts = []
    for path in sorted(volumes):
        mounts += ["--volume", f"{path}:{path}:ro"]
    return args, mounts


def build() -> dict[str, str]:
    """Build the base when needed, then the image: ``{"image": IMAGE, "base": ...}``, or
    ``{"skip": why}`` where Podman cannot run a container here. Raises when a build fails."""
    why = unavailable()
    if why:
        return {"skip": why}
    base = default_base()
    if podman("image", "exists", base, check=False).returncode != 0:
        built = subprocess.run([str(STANDIN_BASE), "podman"], capture_output=True, text=True,
                               env={**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)},
                               timeout=BUILD_LIMIT_S)
        assert built.returncode == 0, built.stderr[-4000:]
        base = built.stdout.split()[-1]
        ran = podman("run", "--rm", base, "python", "-c", "print('ok')", check=False)
        if ran.returncode != 0:
            return {"skip": f"podman cannot run a container here: {ran.stderr.strip()[-500:]}"}
    args, mounts = pip_settings()
    podman("build", "--format", "docker", "--tag", IMAGE, "--build-arg", f"BASE_IMAGE={base}",
           *args, *mounts, str(ROOT), timeout=BUILD_LIMIT_S)
    return {"image": IMAGE, "base": base}


class Background:
    """A build running in a process of its own (its own session: :meth:`stop` ends it whole)."""

    def __init__(self) -> None:
        folder = Path(tempfile.mkdtemp(prefix="dialscore-image-"))
        self.result = folder / "result.json"
        self.log = folder / "build.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen([sys.executable, __file__, str(self.result)],
                                            stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def outcome(self) -> dict[str, str]:
        """Wait for the build (hang guard :data:`BUILD_LIMIT_S`); its :func:`build` outcome."""
        code = self.process.wait(timeout=2 * BUILD_LIMIT_S)
        assert code == 0 and self.result.exists(), \
            f"the image build failed (exit {code}):\n{self.log.read_text()[-6000:]}"
        return json.loads(self.result.read_text())

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


#: The build conftest started for this run, if any.
started: Background | None = None


def start() -> None:
    """Start building in the background (once per run; nothing where the test would skip)."""
    global started
    if started is None and unavailable() is None:
        started = Background()


def outcome() -> dict[str, str]:
    """The background build's outcome, or a build here and now when none was started."""
    return started.outcome() if started is not None else build()


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(build()))
