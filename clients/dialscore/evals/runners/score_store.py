"""Resumable scoring for evaluations: a :class:`~dialscore.evals.scorers.Scorer` whose scores are
kept in a :class:`~dialscore.reporting.resume_store.ResumeStore`, so a run that stops (a crash,
Ctrl-C, the client's retry budget spent) scores only what is missing when it is started again,
like a probe run.

Each row is one job (:class:`~dialscore.evals.scorers.ReplyCandidates`)::

    {"key": <sha256 of the job>, "settings": {...}, "models": [<the models behind the scores>],
     "scores": [[value, detail, truncated], ...]}

`key` hashes everything the service sees of the job (context turns with ids and speakers, the
candidate texts in order, their speaker and turn id). `settings` are the scorer, its models and
mode, and the resolved revisions of the served models it may use (a content hash for local
checkpoints): a row written under other settings, e.g. before the checkpoint at the same path was
re-trained, is never reused; it is counted in :attr:`DurableScorer.stale_rows` and the job scored
again. A row that does not parse, or parses but is invalid (a score count that does not match the
job, a non-finite value), is counted in :attr:`DurableScorer.invalid_rows` and re-scored. The
missing jobs are scored in blocks of `block_jobs`, each block appended as soon as it is scored, so
at most one block's work is lost when a run stops.

The caller holds the output folder's :class:`~dialscore.reporting.run_lock.RunLock` for the run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dialscore.evals.scorers import CandidateScore, ReplyCandidates, Scorer, file_tag
from dialscore.evals.served import Served
from dialscore.reporting.resume_store import ResumeStore, content_key

if TYPE_CHECKING:
    from dialscore.client import AsyncDialscoreClient

__all__ = ["DurableScorer", "durable_scorer", "job_key", "score_settings", "store_path"]

#: Jobs scored between two appends to the store.
BLOCK_JOBS = 256


def job_key(job: ReplyCandidates) -> str:
    """The sha256 (hex) of everything the service sees of `job`."""
    return content_key([[t.to_json() for t in job.context], list(job.texts), job.speaker,
                        job.turn_id])


def score_settings(scorer: str, served: Served, *, model: str | None, nll_model: str | None,
                   mode: str | None) -> dict[str, Any]:
    """What must match for a stored score to be reused: the scorer, its models, its mode, and the
    revisions of the served models it may use (every served classifier when the service's
    default detector is meant, as the default is named only in the answers)."""
    names = {name for name in (model, nll_model) if name is not None}
    if scorer != "nll" and model is None:
        names |= {name for name, card in served.items() if card.family == "classifier"}
    revisions = {name: served[name].revision for name in sorted(names) if name in served}
    return {"scorer": scorer, "model": model, "nll_model": nll_model, "mode": mode,
            "revisions": revisions}


def store_path(out_dir: str | Path, evaluation: str, scorer: str, model: str | None,
               nll_model: str | None) -> Path:
    """``<out_dir>/<evaluation>-<scorer>-<model>[-<nll_model>].scores.jsonl``."""
    return Path(out_dir) / f"{evaluation}-{file_tag(scorer, model, nll_model)}.scores.jsonl"


def _valid(row: dict[str, Any]) -> bool:
    """Whether `row` holds well-formed scores and models."""
    scores, models = row.get("scores"), row.get("models")
    if not isinstance(scores, list) or not scores or not isinstance(models, list):
        return False
    for entry in scores:
        if not (isinstance(entry, list) and len(entry) == 3):
            return False
        value, detail, truncated = entry
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        if detail is not None and (isinstance(detail, bool) or not isinstance(detail, (int, float))):
            return False
        if not isinstance(truncated, bool):
            return False
    return True


class DurableScorer:
    """`inner` with its scores kept in `path` (see the module docstring). A Scorer itself."""

    def __init__(self, inner: Scorer, path: str | Path, settings: Mapping[str, Any],
                 block_jobs: int | None = None):
        block_jobs = BLOCK_JOBS if block_jobs is None else block_jobs
        if block_jobs < 1:
            raise ValueError("block_jobs must be at least 1")
        self.inner = inner
        self.name = inner.name
        self.detail_name = inner.detail_name
        self.store = ResumeStore(path, key="key", settings=settings, valid=_valid)
        self.block_jobs = block_jobs
        #: Jobs whose scores came from the store, and jobs scored by the service in this run.
        self.reused_jobs = 0
        self.scored_jobs = 0
        self._stored_models: list[str | None] | None = None

    @property
    def invalid_rows(self) -> int:
        """Rows that did not parse or were invalid (a torn line, a wrong score count): re-scored."""
        return self.store.invalid

    @property
    def stale_rows(self) -> int:
        """Rows written under other settings (another model revision, mode...): not reused."""
        return self.store.stale

    async def score(self, client: AsyncDialscoreClient, jobs: Sequence[ReplyCandidates], *,
                    label: str, progress: bool = True) -> list[list[CandidateScore]]:
        """The inner scorer's scores of every job, in order: stored ones reused, the others
        scored in blocks and stored. A stored row whose score count differs from its job's
        candidates is invalid and re-scored."""
        self.store.load()
        keys = [job_key(job) for job in jobs]
        todo = self.store.missing(zip(keys, jobs),
                                  fits=lambda row, job: len(row["scores"]) == len(job.texts))
        missing = {key for key, _ in todo}
        reused = [key for key in dict.fromkeys(keys) if key not in missing]
        self.reused_jobs = len(reused)
        if reused:
            self._stored_models = self.store.rows[reused[-1]]["models"]

        async def compute(block: list[ReplyCandidates]) -> list[dict[str, Any]]:
            got = await self.inner.score(client, block, label=label, progress=progress)
            models = self.inner.models_used()
            return [{"models": models, "scores": [[s.value, s.detail, s.truncated] for s in scores]}
                    for scores in got]

        await self.store.fill(todo, self.block_jobs, compute)
        self.scored_jobs += len(todo)
        return [[CandidateScore(float(v), None if d is None else float(d), t)
                 for v, d, t in self.store.rows[key]["scores"]] for key in keys]

    def models_used(self) -> list[str | None]:
        """The inner scorer's models when it scored anything in this run, else the stored ones
        (a fully resumed run learns the classifier the service named from the store)."""
        if self.scored_jobs or self._stored_models is None:
            return self.inner.models_used()
        return list(self._stored_models)

    def resume_summary(self) -> dict[str, int]:
        """For the run report: jobs reused and scored, rows invalid and stale."""
        return {"jobs_reused": self.reused_jobs, "jobs_scored": self.scored_jobs,
                "rows_invalid": self.invalid_rows, "rows_stale": self.stale_rows}


def durable_scorer(inner: Scorer, served: Served, out_dir: str | Path, evaluation: str, *,
                   model: str | None, nll_model: str | None, mode: str | None) -> DurableScorer:
    """`inner` (made for `model`, `nll_model`, `mode`) kept in `evaluation`'s store in `out_dir`."""
    return DurableScorer(inner, store_path(out_dir, evaluation, inner.name, model, nll_model),
                         score_settings(inner.name, served, model=model, nll_model=nll_model,
                                        mode=mode))
