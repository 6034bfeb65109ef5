"""The client's tests need the client alone: httpx, pydantic, the `reports` and `evals` extras,
pytest and jsonschema (``make test`` runs them in ``.venv-client``, where nothing else is
installed, with ``DIALSCORE_CLIENT_ONLY=1``). They answer from the server's published contract
(``contract_fake.py``), never from the server's code."""

from __future__ import annotations

import importlib.util
import os
from importlib.metadata import entry_points

import pytest

from server_packages import SERVER_ONLY

#: Set by ``make test`` for the run in the client-only environment.
CLIENT_ONLY_VARIABLE = "DIALSCORE_CLIENT_ONLY"


def pytest_configure(config: pytest.Config) -> None:
    """In the client-only run, stop before any test when a server package is importable: the
    run would not prove that the client's tests pass with the client alone."""
    if os.environ.get(CLIENT_ONLY_VARIABLE) != "1":
        return
    present = [name for name in SERVER_ONLY if importlib.util.find_spec(name) is not None]
    present += [f"the {ep.name!r} command of the server's distribution"
                for ep in entry_points(group="dialscore.commands")]
    if present:
        raise pytest.UsageError(
            f"{CLIENT_ONLY_VARIABLE}=1, yet {', '.join(present)} can be found: the client's tests "
            "must run where only the client is installed (make test runs them in .venv-client, "
            "from tests/, away from the server's editable-install metadata in the repository root)")
