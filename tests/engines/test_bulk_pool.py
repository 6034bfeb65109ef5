"""A model's bulk pool as the routers see it (nll/bulk_pool.py), and the app arguments that ask
for one (gateway/args.py), without Ray: calls asking for the bulk lane go to the pool, every
other call to the model's own replicas; a classifier cannot have a pool."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from dialscore_server.gateway.args import AppArgs
from dialscore_server.nll.bulk_pool import BulkPooled, with_bulk_pools


class Recorder:
    """An NLLService that answers every call with (its name, the call, the lane asked for)."""

    def __init__(self, name: str):
        self.name = name

    async def score(self, items, return_tokens=False, lane="interactive"):
        return (self.name, "score", lane)

    async def complete(self, call, lane="interactive"):
        return (self.name, "complete", lane)

    async def card(self):
        return (self.name, "card")

    async def tokenizer(self, call):
        return (self.name, "tokenizer")


def calls(service) -> list:
    async def go():
        return [await service.score([], False, "bulk"), await service.score([], False),
                await service.score([], True, "interactive"),
                await service.complete(None, "bulk"), await service.complete(None),
                await service.tokenizer(None), await service.card()]
    return asyncio.run(go())


def test_bulk_calls_go_to_the_pool_and_every_other_call_to_the_model():
    assert calls(BulkPooled(Recorder("own"), Recorder("pool"))) == [
        ("pool", "score", "bulk"), ("own", "score", "interactive"),
        ("own", "score", "interactive"), ("pool", "complete", "bulk"),
        ("own", "complete", "interactive"), ("own", "tokenizer"), ("own", "card")]


def test_a_card_asks_the_pool_too_so_that_a_pool_that_is_down_is_not_ready():
    class Down(Recorder):
        async def card(self):
            raise ConnectionError("the pool is down")

    with pytest.raises(ConnectionError):
        calls(BulkPooled(Recorder("own"), Down("pool")))


def test_only_models_with_a_pool_are_wrapped_and_a_stray_pool_is_refused():
    got = with_bulk_pools({"a": Recorder("a"), "b": Recorder("b")}, {"b": Recorder("b-pool")})
    assert isinstance(got["b"], BulkPooled) and not isinstance(got["a"], BulkPooled)
    with pytest.raises(ValueError, match="'c'"):
        with_bulk_pools({"a": Recorder("a")}, {"c": Recorder("c-pool")})


def test_app_args_list_each_models_pool_and_refuse_one_on_a_classifier(stand_ins):
    args = AppArgs.model_validate({"stand_ins": str(stand_ins), "models": [
        {"name": "dialogpt-medium", "bulk_pool": {"engine_priority": "idle", "num_cpus": 0.3}},
        {"name": "dialogpt-medium", "serve_as": "plain"}]})
    [(cfg, opts)] = args.bulk_pools()
    assert cfg.name == "dialogpt-medium"
    assert (opts.engine_priority, opts.num_cpus) == ("idle", 0.3)
    with pytest.raises(ValidationError, match="bulk_pool is for dialogue"):
        AppArgs.model_validate({"models": [{"name": "dialogpt-medium"}], "classifiers": [
            {"name": "roberta-large-mnli", "bulk_pool": {}}]})
    with pytest.raises(ValidationError, match="engine_priority"):
        AppArgs.model_validate({"models": [
            {"name": "dialogpt-medium", "bulk_pool": {"engine_priority": "lowest"}}]})
