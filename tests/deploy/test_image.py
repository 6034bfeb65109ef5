"""The container image (Dockerfile), built, started, probed and stopped with Podman.

The base is the Dockerfile's default (rayproject/ray) when that image is already on this machine;
otherwise (no public registry is reachable here or in CI) the stand-in base that
deployments/image/standin-base.sh builds from Debian's packages. pip inside the build gets the
CPU torch from where this machine's pip gets it (its find-links, extra indexes and CA bundle,
mounted read-only for the build). The container runs `dialscore serve` on the embedded default
(deployments/local.yaml) with the stand-in checkpoints mounted read-only, on a published loopback
port. The test waits for /readyz (polling; the limit is only a hang guard), scores a probe with
the client, then sends SIGTERM while a request is in flight and checks that it drains: the
request in flight is answered 200 and the container exits with status 0.

The request in flight is held by construction: its body is sent in two parts, and the second
part only after the container's front door has read the first (the kernel says so: the
connection's bytes received, none left unread) and has logged that it is draining with that one
request in flight. Nothing depends on how fast the machine is.

Skips, naming the Debian package, where podman, runc, mmdebstrap, nsenter or ss is missing, and
where this is not root (rootful Podman: mmdebstrap and published ports)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
import yaml

from dialscore.client import DialscoreClient
from dialscore.probes import SAMPLE_DATA
from dialscore.probes.data import load_dialogues
from dialscore.probes.run import run_probes
from raw_socket import read_response, rest_until_closed

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = ROOT / "deployments" / "image" / "containers.conf"
STANDIN_BASE = ROOT / "deployments" / "image" / "standin-base.sh"
IMAGE = "localhost/dialscore-test:latest"
PORT = 8000  # inside the container

#: Hang guards, in seconds: a build (a cold one downloads the dependencies), the service's start
#: (Ray, five replicas loading stand-ins), and any single step that must happen.
BUILD_LIMIT_S = 1500
READY_LIMIT_S = 600
HANG_S = 120

#: Tools the test needs, and the Debian package that brings each.
TOOLS = {"podman": "podman", "runc": "runc", "mmdebstrap": "mmdebstrap", "nsenter": "util-linux",
         "ss": "iproute2"}


def default_base() -> str:
    match = re.search(r"^ARG BASE_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert match, "the Dockerfile names its default base in `ARG BASE_IMAGE=`"
    return match.group(1)


def podman(*args: str, timeout: float = HANG_S, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    result = subprocess.run(["podman", *args], capture_output=True, text=True, env=env,
                            timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {result.returncode}\n"
                             f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


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


@pytest.fixture(scope="module")
def base_image() -> str:
    """The base to build on: the default when it is here already, else the stand-in."""
    missing = [f"{tool} (Debian package {package})" for tool, package in TOOLS.items()
               if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the image test needs {', '.join(missing)}: `make test` installs them as root")
    if os.geteuid() != 0:
        pytest.skip("the image test runs rootful Podman (mmdebstrap, published ports): run as root")
    default = default_base()
    if podman("image", "exists", default, check=False).returncode == 0:
        return default
    built = subprocess.run([str(STANDIN_BASE), "podman"], capture_output=True, text=True,
                           env={**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)},
                           timeout=BUILD_LIMIT_S)
    assert built.returncode == 0, built.stderr[-4000:]
    name = built.stdout.split()[-1]
    ran = podman("run", "--rm", name, "python", "-c", "print('ok')", check=False)
    if ran.returncode != 0:
        pytest.skip(f"podman cannot run a container here: {ran.stderr.strip()[-500:]}")
    return name


@pytest.fixture(scope="module")
def image(base_image) -> str:
    args, mounts = pip_settings()
    podman("build", "--format", "docker", "--tag", IMAGE, "--build-arg", f"BASE_IMAGE={base_image}",
           *args, *mounts, str(ROOT), timeout=BUILD_LIMIT_S)
    return IMAGE


@pytest.fixture(scope="module")
def models_volume(stand_ins, tmp_path_factory) -> Path:
    """The stand-in checkpoints, readable by the container's uid 1000 (safetensors writes its
    files 0600)."""
    root = tmp_path_factory.mktemp("image-models") / "stand-ins"
    shutil.copytree(stand_ins, root)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


@pytest.fixture(scope="module")
def serve_config(tmp_path_factory) -> Path:
    """The embedded default's config with the stand-ins at their mount point, and a body deadline
    long enough that the drain test's held body is cut only by a hang."""
    from dialscore_server.gateway.embedded import LOCAL_CONFIG

    config = yaml.safe_load(LOCAL_CONFIG.read_text())
    args = config["applications"][0]["args"]
    args["stand_ins"] = "/models/stand-ins"
    args["body_timeout_s"] = READY_LIMIT_S
    path = tmp_path_factory.mktemp("image-config") / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o644)
    return path


class Container:
    def __init__(self, name: str):
        self.name = name

    @property
    def url(self) -> str:
        published = podman("port", self.name, str(PORT)).stdout.split()[0]
        return f"http://{published}"

    def running(self) -> bool:
        state = podman("inspect", "--format", "{{.State.Running}}", self.name).stdout.strip()
        return state == "true"

    def logs(self) -> str:
        result = podman("logs", self.name)
        return result.stdout + result.stderr

    def wait_for_log(self, pattern: str) -> re.Match:
        deadline = time.monotonic() + HANG_S
        while not (match := re.search(pattern, self.logs())):
            assert time.monotonic() < deadline, f"no {pattern!r} in the logs:\n{self.logs()[-3000:]}"
            time.sleep(0.5)
        return match

    def wait_ready(self) -> None:
        """Poll /readyz until it says ready; fail at once if the container stops."""
        deadline = time.monotonic() + READY_LIMIT_S
        while True:
            assert self.running(), f"the container stopped:\n{self.logs()[-5000:]}"
            try:
                if httpx.get(f"{self.url}/readyz", timeout=10).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"not ready in {READY_LIMIT_S} s:\n{self.logs()[-5000:]}"
            time.sleep(1)

    def server_side_reads(self) -> list[tuple[int, int]]:
        """(unread bytes, bytes received) of each established connection to the container's
        port, as the container's kernel counts them."""
        pid = podman("inspect", "--format", "{{.State.Pid}}", self.name).stdout.strip()
        listed = subprocess.run(["nsenter", "-t", pid, "-n", "ss", "-Htin", "state", "established",
                                 f"( sport = :{PORT} )"], capture_output=True, text=True,
                                timeout=HANG_S, check=True).stdout
        out, unread = [], None
        for line in listed.splitlines():
            if not line.startswith((" ", "\t")):
                unread = int(line.split()[0])
            elif unread is not None:
                received = re.search(r"bytes_received:(\d+)", line)
                out.append((unread, int(received.group(1)) if received else 0))
                unread = None
        return out


@pytest.fixture()
def container(image, models_volume, serve_config) -> Iterator[Container]:
    name = f"dialscore-test-{os.getpid()}"
    podman("rm", "--force", name, check=False)
    podman("run", "--detach", "--name", name, "--publish", f"127.0.0.1::{PORT}",
           "--shm-size", "512m", "--volume", f"{models_volume}:/models/stand-ins:ro",
           "--volume", f"{serve_config}:/etc/dialscore/serve.yaml:ro", image,
           "dialscore", "serve", "--config", "/etc/dialscore/serve.yaml", "--host", "0.0.0.0",
           "--port", str(PORT), "--drain-s", str(HANG_S))
    try:
        yield Container(name)
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)


def test_the_image_serves_a_probe_and_drains_on_sigterm(container, tmp_path):
    container.wait_ready()
    with DialscoreClient(container.url) as client:
        report = run_probes(client, load_dialogues(SAMPLE_DATA)[:4], ["dialogpt-medium"],
                            ["attribution"], seed=0, out_dir=tmp_path, progress=False, plots=False)
    scored = report.metrics("dialogpt-medium", "attribution", category="complete")
    assert scored.n > 0 and scored.accuracy is not None, scored

    body = json.dumps({"model": "dialogpt-medium",
                       "items": [{"context": ["Hi, how are you?"], "target": "Fine, thanks."}]}
                      ).encode()
    address = urlparse(container.url)
    head = (f"POST /v1/nll HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    half = len(body) // 2
    with socket.create_connection((address.hostname, address.port), timeout=HANG_S) as sock, \
            sock.makefile("rb") as reader:
        sock.sendall(head + body[:half])
        deadline = time.monotonic() + HANG_S
        while not any(unread == 0 and received >= len(head) + half
                      for unread, received in container.server_side_reads()):
            assert time.monotonic() < deadline, container.server_side_reads()
            time.sleep(0.2)
        podman("kill", "--signal", "TERM", container.name)
        draining = container.wait_for_log(r"front door: draining: (\d+) connection")
        assert draining.group(1) == "1", container.logs()[-3000:]
        assert container.running()
        sock.sendall(body[half:])
        answer = read_response(reader)
        assert answer.status == 200, answer.raw[:500]
        assert len(answer.json()["results"]) == 1
        assert rest_until_closed(sock, HANG_S) == b""
    exit_code = podman("wait", container.name, timeout=READY_LIMIT_S).stdout.strip()
    assert exit_code == "0", container.logs()[-5000:]
    assert "stopped" in container.logs()
