"""Resumable detection for the DECODE runner: POST /v1/contradiction answers kept in a
:class:`~dialscore.reporting.resume_store.ResumeStore`, so a stopped run detects only the
dialogues still missing when it is started again.

One file per detector mode (``decode-<mode>-<model or "default">.detections.jsonl``); each row is
one dialogue::

    {"key": <sha256 of the dialogue as sent>, "settings": {...}, "result": <its result>,
     "classifier": <the classifier the service named>}

`settings` are the mode, the thresholds, the classifier asked for and the resolved revisions of
the served classifiers (see :func:`~dialscore.evals.runners.score_store.score_settings`): a row
written under other settings is never reused. Rows that do not parse or hold no valid result are
detected again. The missing dialogues go in blocks of `block_dialogues`, each block appended as
soon as it is answered. The caller holds the output folder's lock for the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from dialscore.evals.runners.score_store import score_settings
from dialscore.evals.scorers import detect
from dialscore.evals.served import Served
from dialscore.reporting.resume_store import ResumeStore, content_key
from dialscore.reporting.progress import Bar
from dialscore.types import ContradictionResult

if TYPE_CHECKING:
    from dialscore.client import AsyncDialscoreClient

__all__ = ["DurableDetection", "dialogue_key"]

#: Dialogues detected between two appends to the store.
BLOCK_DIALOGUES = 2048


def dialogue_key(dialogue: Mapping[str, Any]) -> str:
    """The sha256 (hex) of a dialogue as POST /v1/contradiction receives it."""
    return content_key(dialogue)


def _valid(row: dict[str, Any]) -> bool:
    classifier = row.get("classifier")
    if classifier is not None and not isinstance(classifier, str):
        return False
    try:
        ContradictionResult.model_validate(row.get("result"))
    except ValidationError:
        return False
    return True


class DurableDetection:
    """Detection in one mode with its answers kept in `out_dir` (see the module docstring)."""

    def __init__(self, out_dir: str | Path, served: Served, *, mode: str, threshold: float,
                 evidence_threshold: float | None, model: str | None,
                 block_dialogues: int | None = None):
        settings = {**score_settings("contradiction", served, model=model, nll_model=None,
                                     mode=mode),
                    "threshold": threshold, "evidence_threshold": evidence_threshold}
        self.store = ResumeStore(Path(out_dir) / f"decode-{mode}-{model or 'default'}.detections.jsonl",
                                 key="key", settings=settings, valid=_valid)
        self.mode, self.threshold, self.evidence_threshold = mode, threshold, evidence_threshold
        self.model = model
        self.block = BLOCK_DIALOGUES if block_dialogues is None else block_dialogues
        if self.block < 1:
            raise ValueError("block_dialogues must be at least 1")
        #: Dialogues answered from the store and by the service.
        self.reused = self.detected = 0

    async def detect(self, client: AsyncDialscoreClient, dialogues: Sequence[Mapping[str, Any]],
                     *, chunk_size: int, bar: Bar) -> tuple[list[ContradictionResult], str | None]:
        """Every dialogue's result, in order, and the classifier the service named (as
        :func:`~dialscore.evals.scorers.detect`): stored answers reused, the rest detected."""
        stored = self.store.load()
        keys = [dialogue_key(d) for d in dialogues]
        classifier = next((stored[k]["classifier"] for k in keys if k in stored), None)
        self.reused = sum(k in stored for k in keys)
        bar.update(self.reused)

        async def compute(block: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
            nonlocal classifier
            results, named = await detect(
                client, block, mode=self.mode, threshold=self.threshold,
                evidence_threshold=self.evidence_threshold, model=self.model,
                chunk_size=chunk_size, bar=bar)
            classifier = named or classifier
            return [{"result": r.model_dump(), "classifier": named} for r in results]

        todo = self.store.missing(zip(keys, dialogues))
        await self.store.fill(todo, self.block, compute)
        self.detected += len(todo)
        return ([ContradictionResult.model_validate(self.store.rows[k]["result"]) for k in keys],
                classifier or self.model)

    def resume_summary(self) -> dict[str, int]:
        """For the run report: dialogues reused and detected, rows invalid and stale."""
        return {"dialogues_reused": self.reused, "dialogues_detected": self.detected,
                "rows_invalid": self.store.invalid, "rows_stale": self.store.stale}
