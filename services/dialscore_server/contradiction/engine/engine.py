"""The DECODE contradiction detector: does a dialogue's last utterance contradict its speaker?

Contract (spec section 3), in three parts:

* **Pairing and verdict** (:mod:`~dialscore_server.contradiction.engine.pairing`): turns are named by
  id, never by position parity; structured mode pairs every earlier turn of the last speaker with
  the last turn, unstructured mode makes one pair of the whole history; the dialogue's
  ``probability`` is the largest pair probability, ``is_contradiction`` is ``probability >
  threshold``, and ``evidence`` lists the turns whose pair probability is ``> evidence_threshold``.
  A dialogue with nothing to compare is valid: probability 0.0, no pair classified.
* **Pair probabilities** (:mod:`~dialscore_server.contradiction.engine.classifier`): the softmax
  probability of the checkpoint's contradiction label, in float32; pairs that do not fit the
  window lose their oldest premise tokens first.
* **Batching.** :meth:`ContradictionDetector.detect_many` flattens the pairs of every dialogue of
  every job into *one* classifier call, which sorts them by length and packs them into
  right-padded forward passes under a token budget (rows × longest row); identical pairs are
  classified once. A pair's probability does not depend on what it is batched with (up to float
  rounding), so batched results equal one-dialogue-at-a-time results.

The engine is a plain Python object: it runs without Ray; the Serve deployment wraps it.

Example with an injected classifier (any object with ``contradiction_probs``)::

    >>> class Fake:
    ...     def contradiction_probs(self, pairs):
    ...         return [0.9 if "not" in h and p.startswith("I have") else 0.1 for p, h in pairs]
    >>> detector = ContradictionDetector(classifier=Fake())
    >>> turns = [Turn("bot", "I have a dog."), Turn("user", "Nice!"), Turn("bot", "I do not have pets.")]
    >>> detector.detect([turns])[0]
    DetectionResult(is_contradiction=True, probability=0.9, evidence=(Evidence(turn=0, probability=0.9),), num_pairs=1)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dialscore.model_card import ModelCard
from dialscore_server.checkpoints.loading import LoadedModel
from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.contradiction.engine.classifier import (
    NLIPairClassifier, PairClassifier, PairFn, as_pair_classifier,
)
from dialscore_server.contradiction.engine.pairing import (
    DEFAULT_THRESHOLD, DetectionJob, DetectionResult, Mode, PlannedPair, Turn, check_threshold,
    plan_pairs, verdict,
)
from dialscore_server.scheduling.cancellation import CallGuard

if TYPE_CHECKING:
    from dialscore_server.contract.options import ServingOptions


class ContradictionDetector:
    """Detects whether each dialogue's last turn contradicts its speaker. See the module docstring.

    Give either a `config` (family ``classifier``; the model is loaded unless `loaded` is given) or
    an injected `classifier`: any
    :class:`~dialscore_server.contradiction.engine.classifier.PairClassifier`, or a plain function with
    the same contract as ``contradiction_probs`` (e.g. a fake in tests).

    Args:
        config: the registry entry of an NLI checkpoint.
        loaded: an already loaded model for `config`.
        classifier: a ready ``PairClassifier`` or function; excludes `config`/`loaded`.
        token_budget, num_threads: passed to
            :class:`~dialscore_server.contradiction.engine.classifier.NLIPairClassifier`.
    """

    def __init__(self, config: ModelConfig | None = None, loaded: LoadedModel | None = None, *,
                 classifier: PairClassifier | PairFn | None = None, token_budget: int | None = None,
                 num_threads: int | None = None):
        if (classifier is None) == (config is None):
            raise ValueError("give either `config` (with optional `loaded`) or `classifier`")
        if classifier is not None and loaded is not None:
            raise ValueError("`loaded` goes with `config`, not with an injected `classifier`")
        if classifier is None:
            assert config is not None
            classifier = NLIPairClassifier(config, loaded, token_budget=token_budget,
                                           num_threads=num_threads)
        self.config = config
        self.classifier: PairClassifier = as_pair_classifier(classifier)

    @classmethod
    def from_options(cls, config: ModelConfig, options: ServingOptions) -> ContradictionDetector:
        """The detector as a deployment serves it (see :class:`~dialscore_server.contract.engine.Engine`)."""
        return cls(config, token_budget=options.token_budget, num_threads=options.num_threads)

    def card(self) -> ModelCard:
        """The classifier's card: provenance, labels in index order, the contradiction index."""
        c = self.config
        loaded = getattr(self.classifier, "loaded", None)
        if c is None:
            return ModelCard(name="injected", family="classifier", stand_in=self.stand_in)
        return ModelCard(
            name=c.name, family=c.family, source=c.source,
            revision=loaded.resolved_revision if loaded else None, max_length=c.max_length,
            dtype=c.dtype, device=loaded.device if loaded else None, stand_in=self.stand_in,
            labels=list(getattr(self.classifier, "labels", ())) or None,
            contradiction_index=getattr(self.classifier, "contradiction_index", None))

    def check_health(self) -> None:
        """A real forward pass on one pair."""
        self.classifier.contradiction_probs([("I like fish.", "I never eat fish.")])

    def close(self) -> None:
        """Drop the classifier and its model."""
        self.classifier = None  # type: ignore[assignment]

    @property
    def stand_in(self) -> bool:
        """True when the classifier runs a random-weight stand-in checkpoint."""
        return bool(getattr(self.classifier, "stand_in", False))

    def detect(self, dialogues: Sequence[Sequence[Turn]], mode: Mode = "structured",
               threshold: float = DEFAULT_THRESHOLD,
               evidence_threshold: float | None = None) -> list[DetectionResult]:
        """One :class:`DetectionResult` per dialogue, in order; all pairs in one classifier call.

        Raises :class:`~dialscore_server.contract.errors.InputError` (param e.g.
        ``dialogues[2].turns[4].id``) for an empty dialogue, a repeated turn id, an unknown mode
        or a threshold outside [0, 1].
        """
        return self.detect_many([DetectionJob(dialogues, mode, threshold, evidence_threshold)])[0]

    def detect_many(self, jobs: Sequence[DetectionJob], guard: CallGuard | None = None
                    ) -> list[list[DetectionResult] | None]:
        """Results for several jobs (e.g. requests gathered by a batching deployment), each in
        order, from a single classifier call over every pair of every job.

        Inputs are all validated before anything is classified; an
        :class:`~dialscore_server.contract.errors.InputError` names the offending field relative
        to its job (``dialogues[i]...``, ``threshold``). With a `guard` over the jobs' indices
        (:mod:`dialscore_server.scheduling.cancellation`), the classifier stops computing the pairs of jobs
        no longer wanted; such a job whose pairs were not all classified gets None. Without a
        guard, no None.
        """
        planned: list[tuple[DetectionJob, float, float, list[list[PlannedPair]]]] = []
        for job in jobs:
            thr = check_threshold(job.threshold, "threshold")
            ev = thr if job.evidence_threshold is None else check_threshold(
                job.evidence_threshold, "evidence_threshold")
            pairs = [plan_pairs(d, job.mode, f"dialogues[{i}].turns")
                     for i, d in enumerate(job.dialogues)]
            planned.append((job, thr, ev, pairs))
        flat = [(p.premise, p.hypothesis) for *_, per_job in planned for ps in per_job for p in ps]
        if not flat:
            probs: list[float] = []
        elif guard is None:
            probs = [float(x) for x in self.classifier.contradiction_probs(flat)]
        else:
            owner = [[j] for j, (*_, per_job) in enumerate(planned) for ps in per_job for _ in ps]
            probs = [float(x) for x in self.classifier.contradiction_probs(flat, guard.over(owner))]
        if len(probs) != len(flat):
            raise RuntimeError(f"classifier returned {len(probs)} probabilities for {len(flat)} pairs")
        out: list[list[DetectionResult] | None] = []
        pos = 0
        for job, thr, ev, per_job in planned:
            results: list[DetectionResult] | None = []
            for ps in per_job:
                mine = probs[pos:pos + len(ps)]
                pos += len(ps)
                if results is not None and any(math.isnan(x) for x in mine):
                    results = None  # left out: nobody wants this job any more
                if results is not None:
                    results.append(verdict(ps, mine, thr, ev, job.mode))
            out.append(results)
        return out
