"""The fake models both fakes of the API serve (tests/client/contract_fake.py for the client's
tests, tests/fake_api.py for the server's): their cards, a deterministic NLL, a pair classifier,
and what a fake records of the requests it answers. Client-only: nothing here imports the
server."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

from dialscore.model_card import DialogueFormat, ModelCard

#: The default models: a causal model with its own "why" turn, a seq2seq model whose card has no
#: format (an older server) and a field this client does not know (a newer one), a classifier.
FAKE_CARDS: list[ModelCard] = [
    ModelCard(name="fake-gpt", family="causal", source="fake/gpt", revision="0123abcd",
              max_length=1024, dtype="float32", device="cpu", stand_in=True,
              format=DialogueFormat(turn_separator="{eos}", separator_after_last=True,
                                    why_turn="Why is that?")),
    ModelCard(name="fake-bart", family="seq2seq", source="fake/bart", revision=None,
              max_length=256, dtype="float32", device="cpu", stand_in=False,
              some_future_field={"ignored": True}),
    ModelCard(name="fake-nli", family="classifier", source="fake/nli", revision="main",
              max_length=512, dtype="float32", device="cpu", stand_in=True,
              labels=["contradiction", "neutral", "entailment"], contradiction_index=0),
]

#: ``scorer(model, item_json) -> mean NLL`` (item_json as the client sent it).
Scorer = Callable[[str, dict[str, Any]], float]
#: ``classifier(premise, hypothesis) -> P(contradiction)`` of one NLI pair.
PairClassifier = Callable[[str, str], float]


def hash_nll(model: str, item: dict[str, Any]) -> float:
    """A deterministic fake NLL in [1, 5) from the model and the item."""
    blob = json.dumps([model, item], sort_keys=True, ensure_ascii=False).encode()
    return 1.0 + 4.0 * int.from_bytes(hashlib.sha256(blob).digest()[:4], "big") / 2**32


def negation_probability(premise: str, hypothesis: str) -> float:
    """The fake classifier: 0.9 when the hypothesis negates ("not", "never", "no") and shares a
    word with the premise, else 0.1."""
    neg = {"not", "never", "no", "don't", "isn't"}
    p, h = set(premise.lower().split()), set(hypothesis.lower().split())
    return 0.9 if h & neg and (p & h) - neg else 0.1


class RequestLog:
    """What a fake API records of the requests it answers, for the tests to read; thread-safe.
    `fail_after` makes it refuse every scoring request after that many (a service going down
    halfway)."""

    def __init__(self, fail_after: int | None = None):
        self.fail_after = fail_after
        self.lock = threading.Lock()
        self.nll_requests = 0  # POST /v1/nll requests scored
        self.nll_items: list[tuple[str, dict[str, Any]]] = []  # (model, item JSON), as scored
        self.max_request_items = 0
        self.paths: list[str] = []  # every request's path, in order
        self.bodies: dict[str, list[Any]] = {}  # path -> every JSON body POSTed there, in order

    def scored(self, model: str, items: Sequence[dict[str, Any]]) -> bool:
        """Record one scoring request of `items` (as the client sent them) for `model`; False,
        recording nothing, once `fail_after` requests have been scored."""
        with self.lock:
            if self.fail_after is not None and self.nll_requests >= self.fail_after:
                return False
            self.nll_requests += 1
            self.nll_items.extend((model, item) for item in items)
            self.max_request_items = max(self.max_request_items, len(items))
            return True
