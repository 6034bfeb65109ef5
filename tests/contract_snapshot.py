"""The server's published contract as the tests keep it (``tests/contract/``): the live app's
OpenAPI document (``openapi.json``) and recorded request/response pairs (``exchanges.json``),
and how a response is compared with a recorded one.

Recorded and checked against the live app by the server's tests
(``tests/service/record_contract.py``, ``tests/service/test_contract_snapshot.py``); read by
the client's fake (``tests/client/contract_fake.py``). Nothing here imports either side.

An exchange: ``name``; ``source`` (``live``: the shared Serve app; ``gateway``: the gateway's app
in-process under the ``gateway`` condition); ``call`` (when the client sends it: the
``DialscoreClient`` method and its arguments); ``request`` (``method``, ``path``, ``body``, or
``content`` for a raw body); ``volatile`` (paths whose values are not compared); ``response``
(``status``, the :data:`CONTRACT_HEADERS` it had, ``body``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).resolve().parent / "contract"
OPENAPI_FILE = SNAPSHOT / "openapi.json"
EXCHANGES_FILE = SNAPSHOT / "exchanges.json"

#: The response headers the contract fixes (the client reads them), lower-cased.
CONTRACT_HEADERS = ("content-type", "x-error-type", "retry-after", "x-work-dropped",
                    "x-dialscore-lane")


def read() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The committed snapshot: the OpenAPI document and the exchanges."""
    return (json.loads(OPENAPI_FILE.read_text(encoding="utf-8")),
            json.loads(EXCHANGES_FILE.read_text(encoding="utf-8"))["exchanges"])


def write(document: dict[str, Any], exchanges: list[dict[str, Any]]) -> None:
    """Write the snapshot (stable key order; one exchange per line)."""
    SNAPSHOT.mkdir(parents=True, exist_ok=True)
    OPENAPI_FILE.write_text(json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                            encoding="utf-8")
    lines = ",\n".join("  " + json.dumps(e, ensure_ascii=False) for e in exchanges)
    EXCHANGES_FILE.write_text(
        '{"about": "Recorded by tests/service/record_contract.py; see tests/contract_snapshot.py.",\n'
        ' "exchanges": [\n' + lines + "\n]}\n", encoding="utf-8")


def json_kind(value: Any) -> str:
    """The JSON type of a parsed JSON value (integers and floats are both numbers)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(value)]


def differences(recorded: Any, now: Any, volatile: set[str], *, values: bool = True,
                path: str = "") -> Iterator[str]:
    """Where `now` differs from `recorded`: object keys and array lengths everywhere, the JSON
    type of every value, and (with `values`) the value itself, except at a `volatile` path
    (``results[*].nll``: array indices written ``[*]``; ``$`` is the whole value), where only the
    JSON type is compared."""
    where = path or "$"
    if json_kind(recorded) != json_kind(now):
        yield f"{where}: {json_kind(recorded)} recorded, {json_kind(now)} now"
    elif where in volatile:
        return
    elif isinstance(recorded, dict):
        if set(recorded) != set(now):
            yield f"{where}: keys {sorted(recorded)} recorded, {sorted(now)} now"
        for key in sorted(set(recorded) & set(now)):
            yield from differences(recorded[key], now[key], volatile, values=values,
                                   path=f"{path}.{key}" if path else key)
    elif isinstance(recorded, list):
        if len(recorded) != len(now):
            yield f"{where}: {len(recorded)} elements recorded, {len(now)} now"
        for r, n in zip(recorded, now):
            yield from differences(r, n, volatile, values=values, path=f"{path}[*]")
    elif values and recorded != now:
        yield f"{where}: {recorded!r} recorded, {now!r} now"


def response_differences(recorded: dict[str, Any], now: dict[str, Any],
                         volatile: list[str]) -> list[str]:
    """How a response record (``status``, ``headers``, ``body``) differs from a recorded one:
    the status, the contract's headers, and the body as :func:`differences` compares it."""
    out = []
    if recorded["status"] != now["status"]:
        out.append(f"status: {recorded['status']} recorded, {now['status']} now")
    if recorded["headers"] != now["headers"]:
        out.append(f"headers: {recorded['headers']} recorded, {now['headers']} now")
    out += differences(recorded["body"], now["body"], set(volatile))
    return out
