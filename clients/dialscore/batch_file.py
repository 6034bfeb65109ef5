"""Batch files on the client side: write requests as OpenAI Batch API lines for a `dialscore
batch` job (the server's command, on Ray Data) and read the job's output lines back, so a
client run (the CEDAR probes) can have its scoring done as a job instead of over HTTP.

Input line: ``{"custom_id", "method": "POST", "url": "/v1/nll", "body"}``; output line (what the
job writes): ``{"custom_id", "response": {"status_code", "body"}, "error"}``, in any order. A
chunk of NLL items is one request, its ``custom_id`` derived from the model, the items and the
options (:func:`nll_custom_id`), so the reader finds each chunk's answer without relying on order
and a file from another run cannot answer it. Client-only: nothing here imports the server.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from dialscore.batching import chunked
from dialscore.types import NLLResult

#: The route an NLL chunk is sent to.
NLL_URL = "/v1/nll"


class BatchOutputError(ValueError):
    """The batch output cannot answer a request: missing (the job has not scored it) or an error
    line (the job's answer for it was an error); the message says which and names the custom_id."""


def nll_custom_id(model: str, items: Sequence[dict[str, Any]], return_tokens: bool) -> str:
    """The custom_id of one NLL chunk: ``nll-`` and a hash of what it asks for."""
    key = json.dumps([model, list(items), return_tokens], sort_keys=True, ensure_ascii=False)
    return "nll-" + hashlib.sha256(key.encode()).hexdigest()[:32]


def nll_request_line(model: str, items: Sequence[dict[str, Any]], return_tokens: bool
                     ) -> dict[str, Any]:
    """The input line of one NLL chunk."""
    body: dict[str, Any] = {"model": model, "items": list(items)}
    if return_tokens:
        body["return_tokens"] = True
    return {"custom_id": nll_custom_id(model, items, return_tokens), "method": "POST",
            "url": NLL_URL, "body": body}


def read_batch_output(path: str | Path) -> dict[str, dict[str, Any]]:
    """Every output line by custom_id (lines without one, or not JSON, are skipped: a torn last
    line of a job still running)."""
    out: dict[str, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as f:
        for text in f:
            try:
                row = json.loads(text)
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("custom_id"), str):
                out[row["custom_id"]] = row
    return out


class BatchRecorder:
    """Stands in for an async client's ``nll_many``: writes each chunk as an input line to
    `stream` (and counts them) instead of sending it; answers nothing."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.lines = 0
        self.items = 0

    async def nll_many(self, model: str, items: Sequence[dict[str, Any]], *, chunk_size: int = 64,
                       return_tokens: bool = False, **_: Any) -> None:
        for _, part in chunked(items, max(1, chunk_size)):
            self.stream.write(json.dumps(nll_request_line(model, part, return_tokens),
                                         ensure_ascii=False) + "\n")
            self.lines += 1
            self.items += len(part)


class BatchAnswers:
    """An async client whose ``nll_many`` answers from a batch job's output file (same chunks,
    same custom_ids as :class:`BatchRecorder` wrote); everything else (``models``, ``limits``,
    ``base_url``) is the wrapped client's."""

    def __init__(self, client: Any, output: str | Path):
        self._client = client
        self.output = Path(output)
        self._rows = read_batch_output(self.output)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def nll_many(self, model: str, items: Sequence[dict[str, Any]], *, chunk_size: int = 64,
                       return_tokens: bool = False,
                       on_chunk: Callable[[int, list[NLLResult]], None] | None = None,
                       **_: Any) -> list[NLLResult]:
        results: list[NLLResult] = []
        for _, part in chunked(items, max(1, chunk_size)):
            custom_id = nll_custom_id(model, part, return_tokens)
            row = self._rows.get(custom_id)
            if row is None:
                raise BatchOutputError(
                    f"{self.output} has no line for {custom_id} ({model}, {len(part)} items): "
                    "run the batch job on the file written with --as-batch (same options) first")
            response = row.get("response") or {}
            if response.get("status_code") != 200:
                raise BatchOutputError(f"{custom_id} ({model}): the job answered "
                                       f"{response.get('status_code')}: {row.get('error')}")
            got = [NLLResult.model_validate(r) for r in response["body"]["results"]]
            if on_chunk is not None:
                on_chunk(len(results), got)
            results.extend(got)
        return results
