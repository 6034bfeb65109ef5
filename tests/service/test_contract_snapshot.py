"""The contract snapshot the client's tests answer from (tests/contract/) is the live app's: its
OpenAPI document equals GET /openapi.json, and every recorded request, sent again, gets the
recorded answer (status, the contract's headers, the body but for its volatile paths). See
tests/service/record_contract.py for where each exchange comes from and how to regenerate them
(``make record-contract``)."""

from __future__ import annotations

import json
import warnings

import httpx
import pytest

import contract_snapshot
from record_contract import CASES, answer, record, recording

pytestmark = pytest.mark.serve

REGENERATE = ("if the change is deliberate, regenerate the snapshot (make record-contract), "
              "review `git diff tests/contract` and commit it")


@pytest.fixture(scope="module")
def snapshot(served) -> tuple[dict, list[dict]]:
    """The committed snapshot; first rewritten from the live app when recording."""
    if recording():
        contract_snapshot.write(*record(served.url))
        warnings.warn(f"rewrote the contract snapshot in {contract_snapshot.SNAPSHOT}: review and "
                      "commit it", stacklevel=1)
    return contract_snapshot.read()


def test_the_snapshot_document_is_the_live_apps_openapi_json(served, snapshot):
    document, _ = snapshot
    live = httpx.get(f"{served.url}/openapi.json", timeout=60).json()
    if live != document:
        changed = sorted(set(contract_snapshot.differences(document, live, set())))
        pytest.fail(f"GET /openapi.json differs from tests/contract/openapi.json at "
                    f"{changed[:20]}; {REGENERATE}")


def test_every_recorded_request_gets_the_recorded_answer(served, snapshot):
    _, exchanges = snapshot
    assert [e["name"] for e in exchanges] == [c.name for c in CASES], (
        f"the recorder's cases and the snapshot's exchanges differ; {REGENERATE}")
    problems = {}
    for exchange in exchanges:
        now = answer(exchange, served.url)
        found = contract_snapshot.response_differences(exchange["response"], now,
                                                       exchange["volatile"])
        if found:
            problems[exchange["name"]] = found
    assert not problems, f"{json.dumps(problems, indent=1)}\n{REGENERATE}"
