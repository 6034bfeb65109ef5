"""The NLI pair classifier behind the contradiction detector: P(contradiction | premise,
hypothesis) for batches of pairs (spec section 3).

* **What a probability is.** An NLI classifier labels a pair (premise, hypothesis) as entailment,
  neutral or contradiction. It is used 2-way: the *pair probability* is the softmax probability of
  the contradiction label (computed in float32), and "not a contradiction" is the sum of the other
  labels, ``1 - p``. The contradiction label's index is read from the checkpoint's
  ``config.id2label``; it differs between checkpoints (roberta-large-mnli: 0, the ANLI checkpoint:
  2).
* **Turns are plain text.** Premise and hypothesis are tokenized without special tokens and with
  special-token strings written in them read as characters (``"</s>"`` is ``<``, ``/s``, ``>``:
  :mod:`dialscore_server.checkpoints.plain_text`); the pair's special tokens come from the
  tokenizer's own pair template, as ids.
* **Truncation** (:class:`NLIPairClassifier`). A pair that does not fit the model's window
  (``ModelConfig.max_length``, special tokens included) loses the oldest premise tokens first (cut
  from the left); the hypothesis is cut (from the right) only when it alone is longer than the room
  left after the premise keeps ``min(len(premise), half the room)`` tokens. So the utterance under
  test survives whole except when it is longer than half the window.
* **Batching.** One call sorts its pairs by length and packs them into right-padded forward passes
  under a token budget (rows × longest row, :func:`~dialscore_server.scheduling.planner.pack`); identical
  pairs are classified once. A pair's probability does not depend on what it is batched with (up
  to float rounding).

Any object with ``contradiction_probs`` is a :class:`PairClassifier`; :func:`as_pair_classifier`
also accepts a plain function (a fake in tests).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from dialscore_server.scheduling.planner import BatchStats, pack
from dialscore_server.checkpoints.loading import LoadedModel, load_model, set_threads
from dialscore_server.checkpoints.plain_text import texts_ids
from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.scheduling.cancellation import CallGuard
from dialscore_server.scheduling import pause_points

#: Padded tokens per classifier forward pass when none is given (serving.token_budget overrides).
DEFAULT_TOKEN_BUDGET = 4096

#: The label name (compared case-insensitively, surrounding spaces ignored) that marks the
#: contradiction class in a checkpoint's ``id2label``.
CONTRADICTION_LABEL = "contradiction"


@runtime_checkable
class PairClassifier(Protocol):
    """Anything that gives the contradiction probability of (premise, hypothesis) pairs.

    ``contradiction_probs(pairs)[k]`` is P(contradiction | premise_k, hypothesis_k) in [0, 1], in
    the order of `pairs`. It must not depend on which other pairs share the call. With a `guard`
    over the pairs' indices (:mod:`dialscore_server.scheduling.cancellation`), a classifier may leave out
    pairs no longer wanted and give them NaN; it may also ignore the guard.
    """

    def contradiction_probs(self, pairs: Sequence[tuple[str, str]],
                            guard: CallGuard | None = None) -> list[float]: ...


PairFn = Callable[[Sequence[tuple[str, str]]], Sequence[float]]


class _FunctionClassifier:
    """A plain function used as a :class:`PairClassifier`."""

    def __init__(self, fn: PairFn):
        self.fn = fn

    def contradiction_probs(self, pairs: Sequence[tuple[str, str]],
                            guard: CallGuard | None = None) -> list[float]:
        return list(self.fn(pairs))  # a function cannot be interrupted: the guard is ignored


def as_pair_classifier(classifier: PairClassifier | PairFn) -> PairClassifier:
    """`classifier` itself, or a plain function with the contract of ``contradiction_probs``
    wrapped as a :class:`PairClassifier`; ``TypeError`` for anything else."""
    if isinstance(classifier, PairClassifier):
        return classifier
    if not callable(classifier):
        raise TypeError("classifier must be a PairClassifier (a contradiction_probs(pairs) "
                        "method) or a function pairs -> probabilities")
    return _FunctionClassifier(classifier)


class NoContradictionLabelError(ValueError):
    """The checkpoint's id2label names no (or more than one) contradiction label."""


def find_contradiction_index(id2label: Any, model_name: str = "model") -> int:
    """The index whose label is "contradiction" (case-insensitive) in `id2label`.

    Refuses (with :class:`NoContradictionLabelError`) a mapping that is missing, has fewer than
    two labels, or has zero or several labels named "contradiction".
    """
    labels = {int(k): str(v) for k, v in dict(id2label or {}).items()}
    shown = ", ".join(f"{k}: {v!r}" for k, v in sorted(labels.items())) or "none"
    hits = [k for k, v in labels.items() if v.strip().lower() == CONTRADICTION_LABEL]
    if len(labels) < 2 or len(hits) != 1:
        why = ("names no contradiction label" if not hits else
               "names several contradiction labels" if len(hits) > 1 else "has fewer than two labels")
        raise NoContradictionLabelError(
            f"model {model_name!r} cannot be used as a contradiction detector: its config.id2label "
            f"({shown}) {why}. The detector needs an NLI sequence classifier whose id2label names "
            f"exactly one label {CONTRADICTION_LABEL!r} (any case), e.g. roberta-large-mnli "
            "(CONTRADICTION at 0) or ynie/roberta-large-snli_mnli_fever_anli_R1_R2_R3-nli "
            "(contradiction at 2); generic names such as LABEL_0 cannot be mapped safely.")
    return hits[0]


@dataclass(frozen=True)
class EncodedPair:
    """A pair after tokenization, truncation and special tokens: one row of a forward pass."""

    input_ids: tuple[int, ...]
    token_type_ids: tuple[int, ...] | None
    truncated: bool

    @property
    def cost(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True)
class PairScores:
    """Softmax over all labels (float32, in id2label order) for each pair, and call statistics."""

    probs: list[list[float]]
    stats: BatchStats


class NLIPairClassifier:
    """A :class:`PairClassifier` on a Hugging Face NLI sequence classifier (family `classifier`).

    Args:
        config: the registry entry (family ``classifier``); ``max_length`` is the pair window,
            special tokens included.
        loaded: an already loaded model (tests pass re-initialised weights); loaded from
            ``config`` when omitted.
        token_budget: most padded tokens per forward pass (rows × longest row). A single pair
            larger than the budget still runs, alone. Default (None): DEFAULT_TOKEN_BUDGET.
        num_threads: torch intra-op threads (default: the CPUs this process may use).

    Raises :class:`NoContradictionLabelError` at construction when the checkpoint's id2label has
    no recognisable contradiction label, and ``ValueError`` for a non-classifier config.
    """

    def __init__(self, config: ModelConfig, loaded: LoadedModel | None = None, *,
                 token_budget: int | None = None, num_threads: int | None = None):
        if token_budget is None:
            token_budget = DEFAULT_TOKEN_BUDGET
        if config.family != "classifier":
            raise ValueError(f"model {config.name!r} is a {config.family} model; the contradiction "
                             "detector needs an NLI sequence classifier (family classifier)")
        if token_budget < 1:
            raise ValueError("token_budget must be positive")
        self.threads = set_threads(num_threads)
        self.config = config
        self.loaded = loaded or load_model(config)
        self.model = self.loaded.model
        pause_points.install(self.model)  # where a yielding call steps aside, between layers
        self.tokenizer = self.loaded.tokenizer
        self.token_budget = token_budget
        id2label = getattr(self.model.config, "id2label", None)
        self.contradiction_index: int = find_contradiction_index(id2label, config.name)
        self.labels: tuple[str, ...] = tuple(
            str(v) for _, v in sorted((int(k), v) for k, v in id2label.items()))
        tok = self.tokenizer
        self.pad_id: int = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
        self.use_token_types = "token_type_ids" in getattr(tok, "model_input_names", ())
        self._template = self._pair_template()
        self.num_special = sum(1 for slot in self._template if slot[0] == "special")
        self.room = config.max_length - self.num_special
        if self.room < 2:
            raise ValueError(f"model {config.name!r}: max_length {config.max_length} leaves no room "
                             f"for a pair after {self.num_special} special tokens")

    @property
    def stand_in(self) -> bool:
        return self.loaded.stand_in

    # ----------------------------------------------------------------------------- encoding
    def _pair_template(self) -> list[tuple[str, int, int]]:
        """The tokenizer's pair layout, probed once: slots ("special", id, type) and ("A"|"B", 0,
        type), e.g. RoBERTa ``<s> A </s></s> B </s>``, BERT ``[CLS] A [SEP] B [SEP]``."""
        probe = self.tokenizer("a", "b", add_special_tokens=True)
        try:
            seq_ids = probe.sequence_ids(0)
        except Exception as exc:  # slow tokenizers cannot tell which token came from where
            raise ValueError(f"model {self.config.name!r}: its tokenizer cannot report pair layout "
                             "(a fast tokenizer is needed)") from exc
        ids = probe["input_ids"]
        types = probe.get("token_type_ids") or [0] * len(ids)
        template: list[tuple[str, int, int]] = []
        for tok_id, seq, typ in zip(ids, seq_ids, types):
            if seq is None:
                template.append(("special", tok_id, typ))
            else:
                name = "A" if seq == 0 else "B"
                if not template or template[-1][0] != name:
                    template.append((name, 0, typ))
        if [s[0] for s in template if s[0] != "special"] != ["A", "B"]:
            raise ValueError(f"model {self.config.name!r}: unexpected pair layout from its tokenizer")
        return template

    def _token_ids(self, texts: Sequence[str]) -> dict[str, list[int]]:
        distinct = list(dict.fromkeys(texts))
        nonempty = [t for t in distinct if t]
        out: dict[str, list[int]] = {"": []}
        if nonempty:
            out.update(zip(nonempty, texts_ids(self.tokenizer, nonempty)))
        return out

    def fit(self, premise: list[int], hypothesis: list[int]) -> tuple[list[int], list[int], bool]:
        """Cut a pair to the window: the premise keeps its newest tokens, the hypothesis its first
        ones, and the hypothesis is cut only past ``room - min(len(premise), room // 2)``."""
        room = self.room
        if len(premise) + len(hypothesis) <= room:
            return premise, hypothesis, False
        keep_h = min(len(hypothesis), room - min(len(premise), room // 2))
        keep_p = min(len(premise), room - keep_h)
        return premise[len(premise) - keep_p:], hypothesis[:keep_h], True

    def encode_ids(self, premise: list[int], hypothesis: list[int]) -> EncodedPair:
        """Build one row from token ids (no special tokens): truncate, then add special tokens."""
        premise, hypothesis, truncated = self.fit(premise, hypothesis)
        ids: list[int] = []
        types: list[int] = []
        for kind, tok_id, typ in self._template:
            part = [tok_id] if kind == "special" else premise if kind == "A" else hypothesis
            ids += part
            types += [typ] * len(part)
        return EncodedPair(tuple(ids), tuple(types) if self.use_token_types else None, truncated)

    def encode(self, pairs: Sequence[tuple[str, str]]) -> list[EncodedPair]:
        """Tokenize (each distinct text once) and encode `pairs`, in order."""
        ids = self._token_ids([t for pair in pairs for t in pair])
        return [self.encode_ids(ids[p], ids[h]) for p, h in pairs]

    # ----------------------------------------------------------------------------- scoring
    def contradiction_probs(self, pairs: Sequence[tuple[str, str]],
                            guard: CallGuard | None = None) -> list[float]:
        """P(contradiction) for each (premise, hypothesis) pair, in order (see the module
        docstring); NaN for a pair the guard dropped (see :meth:`classify_encoded`)."""
        k = self.contradiction_index
        return [row[k] for row in self.classify(pairs, guard).probs]

    def classify(self, pairs: Sequence[tuple[str, str]], guard: CallGuard | None = None
                 ) -> PairScores:
        """Softmax over every label for each pair, in order, with the call's statistics."""
        return self.classify_encoded(self.encode(pairs), guard)

    def classify_encoded(self, encoded: Sequence[EncodedPair], guard: CallGuard | None = None
                         ) -> PairScores:
        """Classify encoded rows in token-budget batches; identical rows are computed once.

        With a `guard` over the pairs' indices (:mod:`dialscore_server.scheduling.cancellation`), whether a
        pair is still wanted is asked before every pass: a row none of whose pairs is wanted any
        more is left out of the passes not yet run and its pairs get NaN probabilities; the guard's clock gets each pair's share of the pass
        time (a row shared by identical pairs splits its share among them)."""
        import torch

        # Per-thread, as in the NLL engine: the served path calls from the replica's engine
        # thread, which inherits Ray's OMP_NUM_THREADS (1 for fractional CPUs).
        torch.set_num_threads(self.threads)

        stats = BatchStats(items=len(encoded), item_tokens=sum(e.cost for e in encoded),
                           truncated=sum(e.truncated for e in encoded))
        unique: dict[EncodedPair, int] = {}
        owners: list[list[int]] = []  # the pair indices of each distinct row
        for k, e in enumerate(encoded):
            r = unique.setdefault(e, len(unique))
            if r == len(owners):
                owners.append([])
            owners[r].append(k)
        rows = list(unique)
        stats.unique_pairs = len(rows)
        probs: list[list[float] | None] = [None] * len(rows)
        device = self.loaded.device
        guard = (guard or CallGuard()).over(owners)
        with torch.inference_mode():
            for planned in self._plan(rows):
                batch = guard.keep(planned)
                if not batch:
                    continue
                chosen = [rows[i] for i in batch]
                width = max(r.cost for r in chosen)
                ids = torch.full((len(chosen), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(chosen), width), dtype=torch.long)
                types = torch.zeros((len(chosen), width), dtype=torch.long)
                for b, r in enumerate(chosen):
                    ids[b, : r.cost] = torch.tensor(r.input_ids)
                    mask[b, : r.cost] = 1
                    if r.token_type_ids is not None:
                        types[b, : r.cost] = torch.tensor(r.token_type_ids)
                inputs = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
                if self.use_token_types:
                    inputs["token_type_ids"] = types.to(device)
                with guard.forward(batch, [r.cost for r in chosen]):
                    logits = self.model(**inputs).logits.float()
                for i, p in zip(batch, torch.softmax(logits, dim=-1).tolist()):
                    probs[i] = p
                stats.batches += 1
                stats.forward_passes += 1
                stats.batch_sizes.append(len(batch))
                stats.real_tokens += sum(r.cost for r in chosen)
                stats.padded_tokens += ids.numel()
        missing = [math.nan] * len(self.labels)
        return PairScores([probs[unique[e]] or missing for e in encoded], stats)

    def _plan(self, rows: Sequence[EncodedPair]) -> list[list[int]]:
        """Row indices grouped into batches of rows × longest row ≤ token_budget, by length."""
        order = sorted(range(len(rows)), key=lambda i: rows[i].cost)
        # Sorted ascending, so a run's last row is its longest.
        return pack(order, lambda run: len(run) * rows[run[-1]].cost, self.token_budget)
