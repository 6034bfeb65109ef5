"""The container image (Dockerfile), built, started, probed and stopped with Podman.

The image is built by tests/image_build.py (on the Dockerfile's default base when it is on this
machine, else on the stand-in base from Debian's packages), in the background from the end of
collection, and this test runs last. The container runs `dialscore serve` on the embedded default
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
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
import yaml

import image_build
from dialscore.client import DialscoreClient
from dialscore.probes import SAMPLE_DATA
from dialscore.probes.data import load_dialogues
from dialscore.probes.run import run_probes
from image_build import HANG_S, podman
from raw_socket import read_response, rest_until_closed

pytestmark = pytest.mark.slow

PORT = 8000  # inside the container

#: Hang guard, in seconds, for the service's start (Ray, five replicas loading stand-ins).
READY_LIMIT_S = 600
#: Starts of Ray inside the container (each fails after Ray's fixed 30 s wait for its raylet, a
#: wait a saturated host outlasted three times in a row): as many as READY_LIMIT_S holds.
RAY_START_TRIES = 8


@pytest.fixture(scope="module")
def image() -> str:
    """The image, built on the default base when it is here already, else on the stand-in; its
    build started in the background after collection (tests/image_build.py)."""
    why = image_build.unavailable()
    if why:
        pytest.skip(why)
    outcome = image_build.outcome()
    if "skip" in outcome:
        pytest.skip(outcome["skip"])
    return outcome["image"]


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
           "--shm-size", "512m", "--env", f"DIALSCORE_RAY_START_TRIES={RAY_START_TRIES}",
           "--volume", f"{models_volume}:/models/stand-ins:ro",
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
