"""The reranker: order candidate replies by how little they contradict their speaker (and,
optionally, by how likely a dialogue model finds them).

Contract. Given a dialogue `context` (turns, oldest first) and candidate replies:

* **Who says the candidate.** Each candidate is appended to the context as a new last turn by the
  *candidate speaker*: the request's `speaker` when given; otherwise the most recent context
  speaker who is not the speaker of the last context turn (in a two-party dialogue: the party
  who did not speak last, i.e. the one whose turn it is). When the context is empty or has a single
  speaker, no earlier turn is the candidate speaker's, the candidate is attributed to a fresh
  speaker (``"candidate"``, suffixed if that name is taken) and its contradiction probability is
  0.0: every candidate ties. The engine returns that tie; the HTTP routes refuse it (422: POST
  /v1/rerank names ``speaker`` unless an NLL model orders the candidates, the query routes name
  ``query``). Pass `speaker` (e.g. the bot's id) whenever you know it.
* **Contradiction.** Each (context + candidate) dialogue goes through the DECODE detector (see
  :mod:`dialscore_server.contradiction.engine.engine`): structured mode by default, so the candidate is paired
  with every earlier context turn of the candidate speaker; ``contradiction_probability`` is the
  maximum pair probability, ``is_contradiction`` is ``> threshold`` (default 0.5), and
  ``evidence`` names the context turns (by id: given id, else position) whose pair probability
  is ``> evidence_threshold`` (default: ``threshold``). The candidate turn never appears in
  evidence. All candidates' pairs are classified in one batched call.
* **NLL (optional).** When an `nll_fn` is given, ``nll_fn(context_texts, candidates)`` must return
  one mean per-token NLL (nats) per candidate: the candidate as the target, the context turns'
  texts (oldest first, speakers dropped) as the dialogue history. It may be a plain function or
  return an awaitable (the Serve deployment passes one that calls the NLL deployment's handle).
* **Score** (higher is better)::

      score = -(w_contradiction * contradiction_probability + w_nll * nll)

  with defaults ``w_contradiction = 1.0`` and ``w_nll = 0.1`` when an NLL model is used, else
  ``w_nll = 0`` (and ``nll`` is absent). Weights are request-settable, must be finite and >= 0; a
  positive ``w_nll`` without an NLL model is refused. With the default weights and no NLL model,
  ``score = -contradiction_probability``.
* **Order.** Results are sorted by score, best first; ties keep the candidates' input order
  (stable); then truncated to ``top_n`` (default: all). Each result carries its input ``index``.

:func:`query_context` turns a TEI/Cohere-style ``query`` string into context turns (see there).

Example with an injected classifier::

    >>> from dialscore_server.contradiction.engine.engine import ContradictionDetector
    >>> from dialscore_server.contradiction.engine.pairing import Turn
    >>> class Fake:
    ...     def contradiction_probs(self, pairs):
    ...         return [0.8 if "hate" in h else 0.1 for p, h in pairs]
    >>> reranker = Reranker(ContradictionDetector(classifier=Fake()))
    >>> context = [Turn("bot", "I love dogs."), Turn("user", "Do you have one?")]
    >>> out = reranker.rerank(context, ["I hate dogs.", "Yes, a poodle."])
    >>> [(r.index, r.score) for r in out.results]
    [(1, -0.1), (0, -0.8)]
    >>> out.speaker
    'bot'
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from dialscore_server.contradiction.engine.engine import ContradictionDetector
from dialscore_server.contradiction.engine.pairing import (
    DEFAULT_THRESHOLD, MODES, DetectionJob, DetectionResult, Evidence, Mode, Speaker, Turn, TurnId,
    check_threshold, turn_ids,
)
from dialscore_server.contract.errors import InputError

#: Default weight of the contradiction probability in the combined score.
DEFAULT_CONTRADICTION_WEIGHT = 1.0
#: Default weight of the candidate's NLL (nats per token) when an NLL model is chosen. A typical
#: NLL spread between fluent candidates is 0.5 to 2 nats, so 0.1 lets a contradiction probability
#: gap of about 0.1 outweigh it: the detector stays the main criterion.
DEFAULT_NLL_WEIGHT = 0.1

#: The speaker name given to a candidate when the context names no candidate speaker.
FRESH_SPEAKER = "candidate"

#: TEI route: the speaker of the candidate, and of the query's last line.
QUERY_CANDIDATE_SPEAKER = "A"
QUERY_LAST_SPEAKER = "B"

NLLFn = Callable[[list[str], list[str]], "Sequence[float] | Awaitable[Sequence[float]]"]
DetectFn = Callable[[DetectionJob], "list[DetectionResult] | Awaitable[list[DetectionResult]]"]

T = TypeVar("T")


@dataclass(frozen=True)
class RerankWeights:
    """Weights of the combined score; None = the documented default."""

    contradiction: float | None = None
    nll: float | None = None

    def resolve(self, with_nll: bool) -> "RerankWeights":
        """Concrete weights for a request with (or without) an NLL model; validates them."""
        for name in ("contradiction", "nll"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not math.isfinite(v) or v < 0):
                raise InputError(f"weights.{name} must be a finite number >= 0; got {v!r}",
                                        f"weights.{name}")
        if not with_nll and self.nll:
            raise InputError(
                f"weights.nll is {self.nll} but no NLL model was chosen (give `nll_model`, or drop "
                "weights.nll)", "weights.nll")
        return RerankWeights(
            contradiction=float(DEFAULT_CONTRADICTION_WEIGHT if self.contradiction is None
                                else self.contradiction),
            nll=float((DEFAULT_NLL_WEIGHT if with_nll else 0.0) if self.nll is None else self.nll),
        )


@dataclass(frozen=True)
class RerankResult:
    """One candidate: its input `index`, combined `score` and the parts it was made from."""

    index: int
    score: float
    contradiction_probability: float
    is_contradiction: bool
    evidence: tuple[Evidence, ...]
    nll: float | None


@dataclass(frozen=True)
class RerankOutput:
    """Results best first (at most `top_n`), the applied weights, and the candidate speaker used."""

    results: list[RerankResult]
    weights: RerankWeights
    speaker: Speaker
    mode: Mode


@dataclass(frozen=True)
class RerankOptions:
    """A request's settings of :meth:`Reranker.arerank` (every keyword argument but `nll_fn`);
    each field's default is the documented one."""

    speaker: Speaker | None = None
    mode: Mode = "structured"
    weights: RerankWeights | None = None
    top_n: int | None = None
    threshold: float = DEFAULT_THRESHOLD
    evidence_threshold: float | None = None

    def kwargs(self) -> dict[str, Any]:
        """The options as :meth:`Reranker.arerank` keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def candidate_speaker(context: Sequence[Turn], speaker: Speaker | None = None) -> Speaker:
    """Who says the candidate (see the module docstring)."""
    if speaker is not None:
        return speaker
    if context:
        last = context[-1].speaker
        for turn in reversed(context):
            if not (type(turn.speaker) is type(last) and turn.speaker == last):
                return turn.speaker
    taken = {str(t.speaker) for t in context}
    name, k = FRESH_SPEAKER, 1
    while name in taken:
        k += 1
        name = f"{FRESH_SPEAKER}_{k}"
    return name


def query_context(query: str) -> list[Turn]:
    """A TEI/Cohere-style ``query`` string as dialogue turns.

    The query is split into lines (``\\n``, ``\\r\\n`` or ``\\r``); each line is stripped of
    surrounding whitespace and blank lines are dropped; each remaining line is one turn, its id
    its 0-based index among the kept lines. Speakers alternate ``"A"``/``"B"`` counting back from
    the end: the last line is ``"B"``'s, the one before ``"A"``'s, and so on; the candidate is
    ``"A"``'s (the speaker whose turn it is). A one-line query thus has no earlier turn of the
    candidate's speaker: nothing a candidate could contradict. The query routes refuse it
    (:func:`require_candidate_turn`) rather than score every candidate as a tie.

        >>> [(t.id, t.speaker, t.text) for t in query_context("I love dogs.\\nDo you have one?")]
        [(0, 'A', 'I love dogs.'), (1, 'B', 'Do you have one?')]
    """
    lines = [line.strip() for line in query.splitlines()]
    lines = [line for line in lines if line]
    n = len(lines)
    return [
        Turn(speaker=QUERY_LAST_SPEAKER if (n - 1 - i) % 2 == 0 else QUERY_CANDIDATE_SPEAKER,
             text=line, id=i)
        for i, line in enumerate(lines)
    ]


def require_candidate_turn(turns: Sequence[Turn], param: str = "query") -> None:
    """Raise :class:`InputError` (422 naming `param`) when no turn of `turns` is the candidate
    speaker's (``"A"``): a query of fewer than two non-blank lines. Every candidate would score
    contradiction probability 0.0, a silent tie that orders nothing."""
    if not any(t.speaker == QUERY_CANDIDATE_SPEAKER for t in turns):
        raise InputError(
            f"{param} has {len(turns)} non-blank line(s): the candidates' speaker has no earlier turn "
            "to contradict, so every candidate would tie. Give the dialogue so far, one turn per "
            "line, with at least two lines (the candidate's speaker's turn, then the other's).", param)


class Reranker:
    """Scores and orders candidate replies. See the module docstring for the contract.

    Args:
        detector: a :class:`ContradictionDetector`, or a function ``detect(job) ->
            list[DetectionResult]`` (or an awaitable of it) that runs one
            :class:`~dialscore_server.contradiction.engine.engine.DetectionJob`, e.g. through a batching
            contradiction deployment's handle.
    """

    def __init__(self, detector: ContradictionDetector | DetectFn):
        self.detector = detector

    # ----------------------------------------------------------------------------- parts
    def job(self, context: Sequence[Turn], candidates: Sequence[str], *,
            speaker: Speaker | None = None, mode: Mode = "structured",
            threshold: float = DEFAULT_THRESHOLD,
            evidence_threshold: float | None = None) -> tuple[DetectionJob, Speaker]:
        """The detection job for `candidates` (one dialogue per candidate: context + candidate
        turn) and the candidate speaker. Raises :class:`InputError` for bad input."""
        if not candidates:
            raise InputError("candidates is empty: give at least one candidate", "candidates")
        if mode not in MODES:
            raise InputError(f"mode must be one of {', '.join(MODES)}; got {mode!r}", "mode")
        check_threshold(threshold, "threshold")
        if evidence_threshold is not None:
            check_threshold(evidence_threshold, "evidence_threshold")
        ids = turn_ids(context, "context")
        spk = candidate_speaker(context, speaker)
        # The candidate turn needs an id that no context turn has; it never appears in evidence.
        cand_id: TurnId = len(context)
        if cand_id in ids:
            taken = {str(i) for i in ids}
            cand_id, k = "candidate", 1
            while cand_id in taken:
                k += 1
                cand_id = f"candidate_{k}"
        ctx = tuple(context)
        dialogues = [ctx + (Turn(spk, text, cand_id),) for text in candidates]
        return DetectionJob(dialogues, mode, threshold, evidence_threshold), spk

    @staticmethod
    def combine(detections: Sequence[DetectionResult], nlls: Sequence[float] | None,
                weights: RerankWeights, top_n: int | None = None) -> list[RerankResult]:
        """Combined scores, sorted best first (stable), truncated to `top_n`.

        `weights` must be resolved (no None); `nlls` is None when no NLL model is used.
        """
        if nlls is not None and len(nlls) != len(detections):
            raise RuntimeError(f"nll_fn returned {len(nlls)} values for {len(detections)} candidates")
        wc, wn = weights.contradiction or 0.0, weights.nll or 0.0
        results = []
        for i, det in enumerate(detections):
            nll = None if nlls is None else float(nlls[i])
            penalty = wc * det.probability + (wn * nll if wn and nll is not None else 0.0)
            results.append(RerankResult(
                index=i, score=-penalty + 0.0,  # + 0.0 turns -0.0 into 0.0
                contradiction_probability=det.probability, is_contradiction=det.is_contradiction,
                evidence=det.evidence, nll=nll,
            ))
        results.sort(key=lambda r: (-r.score, r.index))
        return results if top_n is None else results[:top_n]

    # ----------------------------------------------------------------------------- whole
    async def arerank(self, context: Sequence[Turn], candidates: Sequence[str], *,
                      speaker: Speaker | None = None, mode: Mode = "structured",
                      weights: RerankWeights | None = None, top_n: int | None = None,
                      threshold: float = DEFAULT_THRESHOLD, evidence_threshold: float | None = None,
                      nll_fn: NLLFn | None = None) -> RerankOutput:
        """Rerank `candidates` after `context`; awaits `nll_fn` and the detector when they return
        awaitables. The NLL call is started first and runs while the detector classifies (a
        plain :class:`ContradictionDetector` runs in a worker thread, off the event loop)."""
        job, spk, applied = self._prepare(context, candidates, speaker, mode, weights, top_n,
                                          threshold, evidence_threshold, nll_fn)
        nll_future: asyncio.Future | None = None
        nlls: Sequence[float] | None = None
        if nll_fn is not None:
            got = nll_fn([t.text for t in context], list(candidates))
            if inspect.isawaitable(got):
                nll_future = asyncio.ensure_future(got)
            else:
                nlls = got
        try:
            if isinstance(self.detector, ContradictionDetector):
                detections = (await asyncio.to_thread(self.detector.detect_many, [job]))[0]
            else:
                got_det = self.detector(job)
                detections = await got_det if inspect.isawaitable(got_det) else got_det
            if nll_future is not None:
                nlls = await nll_future
        finally:
            if nll_future is not None and not nll_future.done():
                nll_future.cancel()
        return RerankOutput(self.combine(detections, nlls, applied, top_n), applied, spk, mode)

    def rerank(self, context: Sequence[Turn], candidates: Sequence[str], *,
               speaker: Speaker | None = None, mode: Mode = "structured",
               weights: RerankWeights | None = None, top_n: int | None = None,
               threshold: float = DEFAULT_THRESHOLD, evidence_threshold: float | None = None,
               nll_fn: NLLFn | None = None) -> RerankOutput:
        """Synchronous :meth:`arerank`. Awaitables returned by `nll_fn` or the detector function
        are run to completion with ``asyncio.run``, which is refused inside a running event loop
        (use :meth:`arerank` there)."""
        job, spk, applied = self._prepare(context, candidates, speaker, mode, weights, top_n,
                                          threshold, evidence_threshold, nll_fn)
        nlls = None
        if nll_fn is not None:
            nlls = _resolve(nll_fn([t.text for t in context], list(candidates)))
        if isinstance(self.detector, ContradictionDetector):
            detections = self.detector.detect_many([job])[0]
        else:
            detections = _resolve(self.detector(job))
        return RerankOutput(self.combine(detections, nlls, applied, top_n), applied, spk, mode)

    def _prepare(self, context, candidates, speaker, mode, weights, top_n, threshold,
                 evidence_threshold, nll_fn) -> tuple[DetectionJob, Speaker, RerankWeights]:
        if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1):
            raise InputError(f"top_n must be a positive integer; got {top_n!r}", "top_n")
        applied = (weights or RerankWeights()).resolve(nll_fn is not None)
        job, spk = self.job(context, candidates, speaker=speaker, mode=mode, threshold=threshold,
                            evidence_threshold=evidence_threshold)
        return job, spk, applied


def _resolve(value: T | Awaitable[T]) -> T:
    if not inspect.isawaitable(value):
        return value  # type: ignore[return-value]
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        async def wait() -> Any:
            return await value

        return asyncio.run(wait())
    if inspect.iscoroutine(value):
        value.close()
    raise RuntimeError("rerank() got an awaitable inside a running event loop; use arerank()")
