"""Scorers: how an evaluation turns candidate replies to a dialogue into numbers, higher = better.

An evaluation hands a scorer :class:`ReplyCandidates` jobs (a context, the candidate texts, who
says them) and gets one :class:`CandidateScore` per candidate back, in order. Each scorer
batches its requests through an :class:`~dialscore.client.AsyncDialscoreClient` within the
deployment's published limits (:meth:`~dialscore.client.AsyncDialscoreClient.limits`; a 413 for
a request as a whole halves it when they are unknown) and knows which served models it used, for
the report's provenance:

    nll            value = -NLL, the candidate's mean negative log-likelihood in nats per token
                   (the tokens of the target as the model's dialogue format builds it, eos
                   included when the format appends one) given the context turns' texts,
                   speakers dropped, under the dialogue model `model`; detail = the NLL. One
                   POST /v1/nll item per distinct (context, candidate) over all jobs, through
                   `nll_many` in chunks of at most `chunk_size` (and the published max_items).
    contradiction  value = 1 - P(contradiction) of the dialogue context + candidate (the candidate
                   the last turn, said by the job's `speaker` with id `turn_id`), from
                   POST /v1/contradiction in `mode` by the classifier `model` (None: the service's
                   detector); detail = P. Each distinct dialogue once, in chunks of at most
                   `chunk_size` dialogues (and the published max_dialogues) sent concurrently.
    rerank         value = POST /v1/rerank's score of the candidate as a reply to the context, said
                   by the job's `speaker` (None or "": the service's default); `model` names the
                   classifier, `nll_model` adds a dialogue model's NLL term with the service's
                   default weight; detail = the candidate's P(contradiction). One request per job
                   (its candidates as given), split into requests of at most the published
                   max_candidates sent one after the other; jobs run concurrently. A job whose
                   candidates have nothing to contradict (no earlier context turn of their
                   speaker), which the service refuses without an NLL model (422 naming
                   ``speaker``), scores value 0.0 and P 0.0 for every candidate (a tie, as the
                   contradiction scorer's 1 - 0 for the same job); such jobs are counted in
                   ``RerankScorer.nothing_to_contradict``.

A scorer is used for one run: the models it used (the classifier the service named) are known
after :meth:`Scorer.score`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dialscore.batching import ChunkResults, arun_chunks, asend_halving, cap, chunked, gather_all
from dialscore.errors import InvalidRequestError
from dialscore.evals.served import Served, resolve_model
from dialscore.reporting.progress import Bar, progress_bar
from dialscore.types import Turn

if TYPE_CHECKING:  # the client (httpx) is imported when a runner runs
    from dialscore.client import AsyncDialscoreClient
    from dialscore.types import ContradictionResult, RerankResult

__all__ = ["DIALOGUE_CHUNK", "SCORERS", "CandidateScore", "ContradictionScorer", "NLLScorer",
           "ReplyCandidates", "RerankScorer", "Scorer", "detect", "file_tag", "make_scorer"]

SCORERS: tuple[str, ...] = ("nll", "contradiction", "rerank")
#: Dialogues per POST /v1/contradiction by default: half the service's default max_dialogues
#: (1024), to keep requests short.
DIALOGUE_CHUNK = 512


@dataclass(frozen=True)
class ReplyCandidates:
    """Candidate replies to one dialogue context, all said by the same speaker.

    `speaker` is who says them (None: unknown); `turn_id` is the id the reply turn takes in the
    dialogue (the contradiction scorer's evidence refers to the context turns by their ids).
    """

    context: tuple[Turn, ...]
    texts: tuple[str, ...]
    speaker: str | None = None
    turn_id: int | str | None = None


@dataclass(frozen=True)
class CandidateScore:
    """One candidate's score. `value`: higher = better (see the module docstring for each
    scorer); `detail`: the service's own number behind it (the NLL for the nll scorer,
    P(contradiction) for the others; None when the service gave none); `truncated`: the
    context was shortened from the left to fit the model's window (nll only)."""

    value: float
    detail: float | None
    truncated: bool = False


class Scorer(Protocol):
    """Scores the candidates of :class:`ReplyCandidates` jobs; see the module docstring."""

    #: "nll", "contradiction" or "rerank".
    name: str
    #: The name of :attr:`CandidateScore.detail` in reports: "nll" or "contradiction".
    detail_name: str

    async def score(self, client: AsyncDialscoreClient, jobs: Sequence[ReplyCandidates], *,
                    label: str, progress: bool = True) -> list[list[CandidateScore]]:
        """One score per candidate of every job, in job and candidate order. `label` opens the
        progress bar's description (e.g. "mutual")."""
        ...

    def models_used(self) -> list[str | None]:
        """The models behind the scores, for provenance (None: not known)."""
        ...


def file_tag(*parts: str | None) -> str:
    """A file-name-safe tag from a scorer's and its models' names ("nll-dialogpt-medium")."""
    text = "-".join(p for p in parts if p)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text) or "run"


def _distinct(keys: Sequence[Any]) -> tuple[list[Any], list[int]]:
    """The distinct keys in first-seen order, and each key's index among them."""
    index: dict[Any, int] = {}
    slots = [index.setdefault(k, len(index)) for k in keys]
    return list(index), slots


def _candidates(jobs: Sequence[ReplyCandidates]) -> list[tuple[ReplyCandidates, str]]:
    return [(job, text) for job in jobs for text in job.texts]


def _regroup(jobs: Sequence[ReplyCandidates], flat: Sequence[CandidateScore]) -> list[list[CandidateScore]]:
    out, start = [], 0
    for job in jobs:
        out.append(list(flat[start:start + len(job.texts)]))
        start += len(job.texts)
    return out


class NLLScorer:
    """-NLL under a dialogue model (see the module docstring)."""

    name = "nll"
    detail_name = "nll"

    def __init__(self, model: str, chunk_size: int = 64):
        self.model = model
        self.chunk_size = chunk_size

    async def score(self, client: AsyncDialscoreClient, jobs: Sequence[ReplyCandidates], *,
                    label: str, progress: bool = True) -> list[list[CandidateScore]]:
        await client.limits()  # read once: nll_many keeps its chunks within them
        keys = [(tuple(t.text for t in job.context), text) for job, text in _candidates(jobs)]
        unique, slots = _distinct(keys)
        items = [{"context": list(context), "target": target} for context, target in unique]
        with progress_bar(len(items), f"{label} nll {self.model}", progress) as bar:
            results = await client.nll_many(self.model, items, chunk_size=self.chunk_size,
                                            on_chunk=lambda offset, done: bar.update(len(done)))
        flat = [CandidateScore(-results[s].nll, results[s].nll, results[s].truncated) for s in slots]
        return _regroup(jobs, flat)

    def models_used(self) -> list[str | None]:
        return [self.model]


async def detect(client: AsyncDialscoreClient, dialogues: Sequence[Mapping[str, Any]], *,
                 mode: str, threshold: float | None, evidence_threshold: float | None,
                 model: str | None, chunk_size: int, bar: Bar) -> tuple[list[ContradictionResult], str | None]:
    """POST /v1/contradiction for every dialogue, in chunks of at most `chunk_size` dialogues
    (and the published max_dialogues) sent concurrently, a chunk halved on a 413 for it as a
    whole. Returns the results in dialogue order and the classifier the service named (`model`
    when it named none)."""
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1 dialogue")
    limits = await client.limits()
    size = cap(chunk_size, limits.max_dialogues if limits else None)
    landed: ChunkResults[ContradictionResult] = ChunkResults(
        len(dialogues), lambda offset, results: bar.update(len(results)))
    named: list[str | None] = [model]

    async def send(chunk: list[Mapping[str, Any]]) -> list[ContradictionResult]:
        resp = await client.contradiction(chunk, model=model, mode=mode, threshold=threshold,
                                          evidence_threshold=evidence_threshold)
        if len(resp.results) != len(chunk):
            raise ValueError(f"the service answered {len(resp.results)} results for "
                             f"{len(chunk)} dialogues")
        named[0] = resp.model or named[0]
        return resp.results

    await arun_chunks(lambda offset, chunk: asend_halving(send, chunk, "dialogues", offset),
                      chunked(dialogues, size), client.max_concurrency, landed.land)
    return landed.results(), named[0]


class ContradictionScorer:
    """1 - P(contradiction) of the dialogue ending in the candidate (see the module docstring)."""

    name = "contradiction"
    detail_name = "contradiction"

    def __init__(self, model: str | None = None, mode: str = "structured",
                 chunk_size: int = DIALOGUE_CHUNK):
        self.model = model
        self.mode = mode
        self.chunk_size = chunk_size
        self._classifier: str | None = None

    async def score(self, client: AsyncDialscoreClient, jobs: Sequence[ReplyCandidates], *,
                    label: str, progress: bool = True) -> list[list[CandidateScore]]:
        dialogues = []
        for job, text in _candidates(jobs):
            if job.speaker is None:
                raise ValueError("the contradiction scorer needs the candidates' speaker")
            reply = Turn(id=job.turn_id, speaker=job.speaker, text=text)
            dialogues.append({"turns": [t.to_json() for t in (*job.context, reply)]})
        keys = [json.dumps(d, sort_keys=True) for d in dialogues]
        unique, slots = _distinct(keys)
        by_key = dict(zip(keys, dialogues))
        with progress_bar(len(unique), f"{label} contradiction", progress, unit="dialogue") as bar:
            results, self._classifier = await detect(
                client, [by_key[k] for k in unique], mode=self.mode, threshold=None,
                evidence_threshold=None, model=self.model, chunk_size=self.chunk_size, bar=bar)
        flat = [CandidateScore(1.0 - results[s].probability, results[s].probability) for s in slots]
        return _regroup(jobs, flat)

    def models_used(self) -> list[str | None]:
        return [self._classifier or self.model]


class RerankScorer:
    """The reranker's score of each candidate (see the module docstring)."""

    name = "rerank"
    detail_name = "contradiction"

    def __init__(self, model: str | None = None, nll_model: str | None = None):
        self.model = model
        self.nll_model = nll_model
        self._classifier: str | None = None
        #: Jobs the service refused as having nothing to contradict (scored as a tie at 0.0).
        self.nothing_to_contradict = 0

    async def score(self, client: AsyncDialscoreClient, jobs: Sequence[ReplyCandidates], *,
                    label: str, progress: bool = True) -> list[list[CandidateScore]]:
        limits = await client.limits()
        out: list[list[CandidateScore]] = [[] for _ in jobs]

        async def one(k: int, job: ReplyCandidates, bar: Bar) -> None:
            context = [t.to_json() for t in job.context]

            async def send(part: list[str]) -> list[RerankResult]:
                resp = await client.rerank(context, part, model=self.model, nll_model=self.nll_model,
                                           speaker=job.speaker or None)
                got = sorted(r.index for r in resp.results)
                if got != list(range(len(part))):
                    raise ValueError(f"rerank answered indices {got} for {len(part)} candidates")
                self._classifier = self._classifier or resp.model
                return sorted(resp.results, key=lambda r: r.index)

            size = cap(max(1, len(job.texts)), limits.max_candidates if limits else None)
            ranked: list[RerankResult] = []
            try:
                for _, part in chunked(job.texts, size):  # one job's requests one after the other
                    ranked += await asend_halving(send, part, "candidates")
            except InvalidRequestError as exc:
                if exc.param != "speaker":
                    raise
                self.nothing_to_contradict += 1
                out[k] = [CandidateScore(0.0, 0.0) for _ in job.texts]
            else:
                out[k] = [CandidateScore(r.score, r.contradiction_probability) for r in ranked]
            bar.update(1)

        with progress_bar(len(jobs), f"{label} rerank", progress, unit="request") as bar:
            await gather_all(one(k, job, bar) for k, job in enumerate(jobs))
        return out

    def models_used(self) -> list[str | None]:
        return [self._classifier or self.model, self.nll_model]


def make_scorer(name: str, served: Served, *, model: str | None = None,
                nll_model: str | None = None, mode: str = "structured",
                chunk_size: int = 64) -> Scorer:
    """The scorer `name` ("nll", "contradiction", "rerank") with its models checked against the
    served ones: `model` is the nll scorer's dialogue model (required) or the others' classifier
    (None: the service's detector); `nll_model` is the rerank scorer's optional dialogue model;
    `mode` the contradiction scorer's detector mode; `chunk_size` the nll scorer's items per
    request. Raises ValueError for an unknown scorer or a model that does not fit."""
    if name == "nll":
        return NLLScorer(resolve_model(served, model, "dialogue", "the nll scorer").name, chunk_size)
    if name == "contradiction":
        if model is not None:
            resolve_model(served, model, "classifier", "the contradiction scorer")
        return ContradictionScorer(model, mode)
    if name == "rerank":
        if model is not None:
            resolve_model(served, model, "classifier", "the rerank scorer")
        if nll_model is not None:
            resolve_model(served, nll_model, "dialogue", "--nll-model")
        return RerankScorer(model, nll_model)
    raise ValueError(f"unknown scorer {name!r}; choose from {', '.join(SCORERS)}")
