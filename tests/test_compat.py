"""One guard per entry of ``dialscore_server.compat``: each fails, naming the entry, when an upgrade
of the project it reaches into changes what the entry relies on. (What each entry does for the
service is tested where it is used; these tests check the foreign API itself.)"""

from __future__ import annotations

import inspect

import pytest

from dialscore_server import compat


def broken(entry: str, why: str) -> None:
    pytest.fail(f"compat entry {entry!r}: {why}", pytrace=False)


def test_every_entry_has_a_guard():
    guards = {name.removeprefix("test_entry_") for name in globals() if name.startswith("test_entry_")}
    assert guards == set(compat.ENTRIES)


def test_entry_replica_accepted():
    from ray.serve.handle import DeploymentResponse

    fetch = getattr(DeploymentResponse, "_fetch_future_result_async", None)
    if fetch is None:
        broken("replica_accepted", "DeploymentResponse._fetch_future_result_async is gone: the "
               "queue deadline (queue_timeout_s) no longer applies")
    if not inspect.iscoroutinefunction(fetch):
        broken("replica_accepted", "DeploymentResponse._fetch_future_result_async is no longer a "
               "coroutine function")
    if list(inspect.signature(fetch).parameters) != ["self"]:
        broken("replica_accepted", "DeploymentResponse._fetch_future_result_async takes "
               f"{list(inspect.signature(fetch).parameters)}, not (self)")

    class NoHook:
        pass

    assert compat.replica_accepted(NoHook()) is None
