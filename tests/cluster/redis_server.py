"""A throwaway Redis for GCS fault tolerance tests: Debian's ``redis-server`` on a free loopback
port, everything it writes in its own folder, no persistence (no RDB snapshot, no AOF), ended by
its process id. The GCS keeps the cluster's state there while the head's GCS server is gone."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: What the tests' skip reason names when Redis is missing.
MISSING = ("redis-server is not installed (Debian: apt-get install redis-server; `make` installs "
           "it when run as root with apt-get)")
#: A hang guard for Redis to answer PING, not a speed requirement.
START_LIMIT_S = 60.0


def available() -> bool:
    return shutil.which("redis-server") is not None


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """Start ``redis-server`` with `folder` as its working folder and log; yield its address
    (``127.0.0.1:PORT``); end it (SIGTERM, then SIGKILL) after."""
    folder.mkdir(parents=True, exist_ok=True)
    from dialscore_server.gateway.embedded import free_port

    port = free_port()
    proc = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--bind", "127.0.0.1", "--port", str(port),
         "--dir", str(folder), "--logfile", str(folder / "redis.log"), "--save", "",
         "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_LIMIT_S
        while not _pong(port):
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {proc.returncode}: "
                                   f"{(folder / 'redis.log').read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"redis-server did not answer PING within {START_LIMIT_S:.0f} s")
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
