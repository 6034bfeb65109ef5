"""The DECODE contradiction detector: does a dialogue's last utterance contradict its speaker?

Contract (spec section 3). A dialogue is a sequence of turns ``u_0..u_n``, each with a speaker
(any string or integer; ``1`` and ``"1"`` are different speakers) and an id (its ``id`` when given,
else its 0-based position in the dialogue). Turns are always named by id, never by position
parity: dialogues need not alternate and may have any number of speakers.

* **What a probability is.** An NLI classifier labels a pair (premise, hypothesis) as entailment,
  neutral or contradiction. It is used 2-way: the *pair probability* is the softmax probability of
  the contradiction label (computed in float32), and "not a contradiction" is the sum of the other
  labels, ``1 - p``. The contradiction label's index is read from the checkpoint's
  ``config.id2label``; it differs between checkpoints (roberta-large-mnli: 0, the ANLI checkpoint:
  2).
* **Structured mode** (the default; DECODE's utterance-based detector). Let ``s`` be the speaker of
  the last turn ``u_n``. Every earlier turn ``u_i`` (``i < n``) whose speaker is ``s`` is paired
  as (premise ``u_i``, hypothesis ``u_n``); turns of every other speaker are ignored. The dialogue's
  ``probability`` is the maximum pair probability; ``is_contradiction`` is ``probability >
  threshold`` (strictly greater; default 0.5); ``evidence`` lists, in dialogue order, the ids of
  the turns whose pair probability is ``> evidence_threshold`` (default: ``threshold``), each with
  its pair probability. Evidence is computed independently of the label: with the default
  ``evidence_threshold`` it is non-empty exactly when ``is_contradiction`` is true; with a lower one
  a non-contradiction may still carry evidence.
* **Unstructured mode** (DECODE's baseline). One pair per dialogue: the premise is every earlier
  turn, oldest first, each written ``f"{speaker}: {text}"`` (the speaker as ``str(speaker)``,
  then a colon and one space), joined with ``"\\n"``; the hypothesis is ``u_n``'s text, without a
  marker. ``probability`` is that pair's probability. ``evidence`` is always empty: one pair cannot
  say which earlier turn is contradicted.
* **Nothing to compare.** A one-turn dialogue, or (structured) a last speaker with no earlier turn,
  is valid: ``probability`` 0.0, not a contradiction, no evidence, and no pair is classified.
* **Truncation** (:class:`NLIPairClassifier`). A pair that does not fit the model's window
  (``ModelConfig.max_length``, special tokens included) loses the oldest premise tokens first (cut
  from the left); the hypothesis is cut (from the right) only when it alone is longer than the room
  left after the premise keeps ``min(len(premise), half the room)`` tokens. So the utterance under
  test survives whole except when it is longer than half the window.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from dialscore_server.checkpoints.loading import LoadedModel, load_model, set_threads
from dialscore.model_card import ModelCard
from dialscore_server.contract.errors import InputError
from dialscore_server.checkpoints.registry import ModelConfig

if TYPE_CHECKING:
    from dialscore_server.contract.options import ServingOptions

Mode = Literal["structured", "unstructured"]
MODES: tuple[Mode, ...] = ("structured", "unstructured")
Speaker = int | str
TurnId = int | str

#: Default decision threshold τ on the contradiction probability (spec section 3).
DEFAULT_THRESHOLD = 0.5

#: Padded tokens per classifier forward pass when none is given (serving.token_budget overrides).
DEFAULT_TOKEN_BUDGET = 4096

#: The label name (compared case-insensitively, surrounding spaces ignored) that marks the
#: contradiction class in a checkpoint's ``id2label``.
CONTRADICTION_LABEL = "contradiction"


# ------------------------------------------------------------------------------------ data types
@dataclass(frozen=True)
class Turn:
    """One utterance. `id` defaults to the turn's 0-based position in its dialogue."""

    speaker: Speaker
    text: str
    id: TurnId | None = None


@dataclass(frozen=True)
class Evidence:
    """An earlier turn (by id) whose pair with the last turn scored `probability` > the evidence
    threshold."""

    turn: TurnId
    probability: float


@dataclass(frozen=True)
class DetectionResult:
    """The verdict on one dialogue's last turn. See the module docstring for the exact contract.

    `probability` is the largest pair contradiction probability (0.0 when no pair was formed);
    `num_pairs` is how many (premise, hypothesis) pairs were classified for this dialogue.
    """

    is_contradiction: bool
    probability: float
    evidence: tuple[Evidence, ...]
    num_pairs: int


@dataclass(frozen=True)
class DetectionJob:
    """Dialogues that share one setting of mode and thresholds (typically one HTTP request).

    `evidence_threshold` None means "the same as `threshold`".
    """

    dialogues: Sequence[Sequence[Turn]]
    mode: Mode = "structured"
    threshold: float = DEFAULT_THRESHOLD
    evidence_threshold: float | None = None


@dataclass(frozen=True)
class PlannedPair:
    """One pair to classify. `turn` is the premise turn's id (structured), None (unstructured)."""

    turn: TurnId | None
    premise: str
    hypothesis: str


# ------------------------------------------------------------------------------------ pairing
def turn_ids(turns: Sequence[Turn], param: str = "turns") -> list[TurnId]:
    """Each turn's effective id (its `id`, else its position), checked unique within the dialogue.

    Raises :class:`InputError` naming ``{param}[j].id`` for a repeated id.
    """
    ids: list[TurnId] = []
    seen: dict[TurnId, int] = {}
    for j, turn in enumerate(turns):
        tid = j if turn.id is None else turn.id
        # 1 and True hash alike; ids are ints or strings, never booleans.
        if isinstance(tid, bool) or not isinstance(tid, (int, str)):
            raise InputError(f"turn id must be an integer or a string, got {tid!r}",
                                    f"{param}[{j}].id")
        if tid in seen:
            raise InputError(
                f"turn ids must be unique within a dialogue: {param}[{j}] has id {tid!r}, like "
                f"{param}[{seen[tid]}] (a turn without an id is identified by its position)",
                f"{param}[{j}].id")
        seen[tid] = j
        ids.append(tid)
    return ids


def speaker_marker(speaker: Speaker) -> str:
    """The prefix of one earlier turn in the unstructured premise: ``f"{speaker}: "``."""
    return f"{speaker}: "


def unstructured_premise(turns: Sequence[Turn]) -> str:
    """Earlier turns, oldest first, as ``"{speaker}: {text}"`` lines joined with ``"\\n"``."""
    return "\n".join(speaker_marker(t.speaker) + t.text for t in turns)


def plan_pairs(turns: Sequence[Turn], mode: Mode = "structured", param: str = "turns") -> list[PlannedPair]:
    """The pairs classified for one dialogue (see the module docstring), in dialogue order.

    Raises :class:`InputError` for an empty dialogue, a repeated id or an unknown mode.
    """
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}; got {mode!r}", "mode")
    if not turns:
        raise InputError("a dialogue needs at least one turn", param)
    ids = turn_ids(turns, param)
    last = turns[-1]
    earlier = turns[:-1]
    if mode == "unstructured":
        if not earlier:
            return []
        return [PlannedPair(None, unstructured_premise(earlier), last.text)]
    return [
        PlannedPair(ids[i], turn.text, last.text)
        for i, turn in enumerate(earlier)
        if _same_speaker(turn.speaker, last.speaker)
    ]


def _same_speaker(a: Speaker, b: Speaker) -> bool:
    # Strict: 1 == "1" is False already; also keep True from matching 1.
    return type(a) is type(b) and a == b


def check_threshold(value: float, param: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise InputError(f"{param} must be a number in [0, 1]; got {value!r}", param)
    return float(value)


# ------------------------------------------------------------------------------------ classifier
@runtime_checkable
class PairClassifier(Protocol):
    """Anything that gives the contradiction probability of (premise, hypothesis) pairs.

    ``contradiction_probs(pairs)[k]`` is P(contradiction | premise_k, hypothesis_k) in [0, 1], in
    the order of `pairs`. It must not depend on which other pairs share the call.
    """

    def contradiction_probs(self, pairs: Sequence[tuple[str, str]]) -> list[float]: ...


PairFn = Callable[[Sequence[tuple[str, str]]], Sequence[float]]


class _FunctionClassifier:
    """A plain function used as a :class:`PairClassifier`."""

    def __init__(self, fn: PairFn):
        self.fn = fn

    def contradiction_probs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return list(self.fn(pairs))


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


@dataclass
class PairStats:
    """What one classification call computed."""

    pairs: int = 0
    unique_pairs: int = 0
    truncated: int = 0
    batches: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    batch_sizes: list[int] = field(default_factory=list)

    @property
    def padding_waste(self) -> float:
        """Share of computed positions that were padding (0 = none)."""
        return 1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0


@dataclass(frozen=True)
class PairScores:
    """Softmax over all labels (float32, in id2label order) for each pair, and call statistics."""

    probs: list[list[float]]
    stats: PairStats


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
            enc = self.tokenizer(nonempty, add_special_tokens=False)["input_ids"]
            out.update(zip(nonempty, enc))
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
    def contradiction_probs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """P(contradiction) for each (premise, hypothesis) pair, in order (see the module docstring)."""
        k = self.contradiction_index
        return [row[k] for row in self.classify(pairs).probs]

    def classify(self, pairs: Sequence[tuple[str, str]]) -> PairScores:
        """Softmax over every label for each pair, in order, with the call's statistics."""
        return self.classify_encoded(self.encode(pairs))

    def classify_encoded(self, encoded: Sequence[EncodedPair]) -> PairScores:
        """Classify encoded rows in token-budget batches; identical rows are computed once."""
        import torch

        stats = PairStats(pairs=len(encoded), truncated=sum(e.truncated for e in encoded))
        unique: dict[EncodedPair, int] = {}
        for e in encoded:
            unique.setdefault(e, len(unique))
        rows = list(unique)
        stats.unique_pairs = len(rows)
        probs: list[list[float] | None] = [None] * len(rows)
        device = self.loaded.device
        with torch.inference_mode():
            for batch in self._plan(rows):
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
                logits = self.model(**inputs).logits.float()
                for i, p in zip(batch, torch.softmax(logits, dim=-1).tolist()):
                    probs[i] = p
                stats.batches += 1
                stats.batch_sizes.append(len(batch))
                stats.real_tokens += sum(r.cost for r in chosen)
                stats.padded_tokens += ids.numel()
        return PairScores([probs[unique[e]] for e in encoded], stats)  # type: ignore[misc]

    def _plan(self, rows: Sequence[EncodedPair]) -> list[list[int]]:
        """Row indices grouped into batches of rows × longest row ≤ token_budget, by length."""
        order = sorted(range(len(rows)), key=lambda i: rows[i].cost)
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            # Sorted ascending, so the newest row is the longest.
            if current and (len(current) + 1) * rows[i].cost > self.token_budget:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches


# ------------------------------------------------------------------------------------ detector
class ContradictionDetector:
    """Detects whether each dialogue's last turn contradicts its speaker. See the module docstring.

    Give either a `config` (family ``classifier``; the model is loaded unless `loaded` is given) or
    an injected `classifier`: any :class:`PairClassifier`, or a plain function with the same
    contract as ``contradiction_probs`` (e.g. a fake in tests).

    Args:
        config: the registry entry of an NLI checkpoint.
        loaded: an already loaded model for `config`.
        classifier: a ready :class:`PairClassifier` or function; excludes `config`/`loaded`.
        token_budget, num_threads: passed to :class:`NLIPairClassifier`.
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
        if not isinstance(classifier, PairClassifier):
            if not callable(classifier):
                raise TypeError("classifier must be a PairClassifier (a contradiction_probs(pairs) "
                                "method) or a function pairs -> probabilities")
            classifier = _FunctionClassifier(classifier)
        self.config = config
        self.classifier: PairClassifier = classifier

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

        Raises :class:`InputError` (param e.g. ``dialogues[2].turns[4].id``) for an empty
        dialogue, a repeated turn id, an unknown mode or a threshold outside [0, 1].
        """
        return self.detect_many([DetectionJob(dialogues, mode, threshold, evidence_threshold)])[0]

    def detect_many(self, jobs: Sequence[DetectionJob]) -> list[list[DetectionResult]]:
        """Results for several jobs (e.g. requests gathered by a batching deployment), each in
        order, from a single classifier call over every pair of every job.

        Inputs are all validated before anything is classified; a :class:`InputError`
        names the offending field relative to its job (``dialogues[i]...``, ``threshold``).
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
        probs = [float(x) for x in self.classifier.contradiction_probs(flat)] if flat else []
        if len(probs) != len(flat):
            raise RuntimeError(f"classifier returned {len(probs)} probabilities for {len(flat)} pairs")
        out: list[list[DetectionResult]] = []
        pos = 0
        for job, thr, ev, per_job in planned:
            results = []
            for ps in per_job:
                mine = probs[pos:pos + len(ps)]
                pos += len(ps)
                results.append(_verdict(ps, mine, thr, ev, job.mode))
            out.append(results)
        return out


def _verdict(pairs: Sequence[PlannedPair], probs: Sequence[float], threshold: float,
             evidence_threshold: float, mode: Mode) -> DetectionResult:
    for p in probs:
        if math.isnan(p) or not 0.0 <= p <= 1.0:
            raise RuntimeError(f"classifier returned {p!r}, not a probability")
    probability = max(probs, default=0.0)
    evidence = () if mode == "unstructured" else tuple(
        Evidence(pair.turn, p) for pair, p in zip(pairs, probs)
        if p > evidence_threshold and pair.turn is not None)
    return DetectionResult(probability > threshold, probability, evidence, len(pairs))
