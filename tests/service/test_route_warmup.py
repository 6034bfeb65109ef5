"""contract/route_warmup.py without Ray: each model is tried until its card answers, and one
that never answers is given up after `give_up_s` without failing the start. Through a cluster
whose GCS is gone before any request: tests/cluster/test_gcs_loss.py."""

from __future__ import annotations

import asyncio
import logging

from dialscore.model_card import ModelCard
from dialscore_server.contract.errors import ServiceError
from dialscore_server.contract.route_warmup import resolve_routes


class Loading:
    """A model whose card answers after `failures` overloaded answers."""

    def __init__(self, name: str, failures: int):
        self.name, self.failures, self.calls = name, failures, 0

    async def card(self) -> ModelCard:
        self.calls += 1
        if self.calls <= self.failures:
            raise ServiceError("overloaded", "still loading", retry_after=1)
        return ModelCard(name=self.name, family="causal", source="x")


def test_every_model_is_tried_until_its_card_answers():
    ready, slow = Loading("a", 0), Loading("b", 3)
    cards = asyncio.run(resolve_routes({"a": ready, "b": slow}, give_up_s=3600, retry_s=0))
    assert {name: card.name for name, card in cards.items()} == {"a": "a", "b": "b"}
    assert (ready.calls, slow.calls) == (1, 4)


def test_a_model_that_never_answers_is_logged_and_left_to_its_first_request(caplog):
    never = Loading("never", 10**9)
    with caplog.at_level(logging.WARNING, logger="dialscore.serve"):
        cards = asyncio.run(resolve_routes({"never": never, "a": Loading("a", 0)}, give_up_s=0))
    assert list(cards) == ["a"]
    assert never.calls == 1
    assert "route to never not resolved at start" in caplog.text
