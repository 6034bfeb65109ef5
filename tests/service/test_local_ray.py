"""Starting the embedded default's Ray again when its node startup times out
(gateway/local_ray.py), with a stand-in for ``ray.init`` that fails the way Ray does: no real
Ray is started here, so no wait on the machine's speed decides the outcome."""

from __future__ import annotations

import subprocess

import psutil
import pytest

from dialscore_server import compat
from dialscore_server.gateway.local_ray import (RAY_START_TRIES, RAY_START_TRIES_VARIABLE,
                                                ray_start_tries, start_local_ray)

TIMED_OUT = Exception(compat.RAY_START_TIMEOUT_MESSAGE + ". This could happen because ...")


class FlakyInit:
    """Fails `failures` times as Ray's timed-out node startup does, each time leaving a process
    behind as a failed start leaves its GCS and raylet, then succeeds."""

    def __init__(self, failures: int, error: Exception = TIMED_OUT) -> None:
        self.failures, self.error = failures, error
        self.calls: list[dict] = []
        self.left: list[subprocess.Popen] = []

    def __call__(self, **options) -> None:
        self.calls.append(options)
        if len(self.calls) <= self.failures:
            self.left.append(subprocess.Popen(["sleep", "600"]))
            raise self.error


def gone(process: subprocess.Popen) -> bool:
    process.poll()  # reaps it if it has exited
    return process.returncode is not None or not psutil.pid_exists(process.pid)


def test_a_timed_out_start_is_tried_again_after_its_processes_are_stopped():
    init = FlakyInit(failures=2)
    start_local_ray(init, tries=3, num_cpus=2)
    assert init.calls == [{"num_cpus": 2}] * 3
    assert all(gone(p) for p in init.left)


def test_the_last_tries_error_is_raised():
    init = FlakyInit(failures=3)
    with pytest.raises(Exception, match="timed out during startup"):
        start_local_ray(init, tries=3)
    assert len(init.calls) == 3
    assert all(gone(p) for p in init.left[:2])
    init.left[2].kill()
    init.left[2].wait()


def test_any_other_error_is_raised_at_once_and_nothing_is_stopped():
    init = FlakyInit(failures=1, error=ValueError("num_cpus must be a non-negative integer"))
    with pytest.raises(ValueError, match="num_cpus"):
        start_local_ray(init, tries=3)
    assert len(init.calls) == 1
    assert not gone(init.left[0])
    init.left[0].kill()
    init.left[0].wait()


def test_the_tries_come_from_the_environment(monkeypatch):
    monkeypatch.delenv(RAY_START_TRIES_VARIABLE, raising=False)
    assert ray_start_tries() == RAY_START_TRIES
    monkeypatch.setenv(RAY_START_TRIES_VARIABLE, "2")
    init = FlakyInit(failures=2)
    with pytest.raises(Exception, match="timed out during startup"):
        start_local_ray(init)
    assert len(init.calls) == 2
    for process in init.left:
        process.kill()
        process.wait()
    for bad in ("0", "-1", "two", "1.5"):
        monkeypatch.setenv(RAY_START_TRIES_VARIABLE, bad)
        with pytest.raises(ValueError, match=RAY_START_TRIES_VARIABLE):
            ray_start_tries()
