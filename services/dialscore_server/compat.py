"""Every use of another project's private or undocumented API, and nothing else.

The service relies on public APIs everywhere else. Each entry below says what it relies on, why no
public API does the job, and what the service does when the entry is gone. ``tests/test_compat.py``
holds one test per entry; each fails naming the entry (``compat entry 'replica_accepted': ...``)
when an upgrade of Ray, torch or transformers changes what the entry relies on, so the break shows
in CI rather than in a user's cluster.

========================  ============  ======================================================
entry                     project       relies on
========================  ============  ======================================================
replica_accepted          Ray Serve     ``DeploymentResponse._fetch_future_result_async``
========================  ============  ======================================================
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

#: The entries of this module, for the guard tests.
ENTRIES = ("replica_accepted",)


def replica_accepted(response: Any) -> Awaitable[Any] | None:
    """An awaitable that resolves once a replica has accepted `response` (a Serve
    ``DeploymentResponse``), or None when this Ray has no such hook.

    Why: the gateway answers 503 when no replica accepts a request within ``queue_timeout_s``
    (all busy, or a crashed replica being replaced), separately from the request's own deadline.
    Ray Serve's public API offers only the whole answer (``await response``), not the moment of
    assignment. Ray 2.60's ``DeploymentResponse._fetch_future_result_async`` resolves at that
    moment. Without it, the request's single deadline applies (no separate queue deadline)."""
    fetch = getattr(response, "_fetch_future_result_async", None)
    return fetch() if fetch is not None else None
