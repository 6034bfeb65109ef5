"""The heap frozen once the models are loaded (services/dialscore_server/heap.py): a model
deployment and a batch job's worker freeze it after building their engines, so that the garbage
collector's full collections never traverse the engine or what loading it left; what is garbage
at that moment is collected first, never frozen.

Automatic collections are off while each test runs (a collection at an arbitrary point would
decide when a cycle is freed), and the permanent generation is emptied before and after.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from dialscore_server.batch.models import JobModels, build_directory
from dialscore_server.gateway.args import AppArgs
from dialscore_server.heap import freeze_loaded_heap

#: A dialogue model on the fake engine: nothing is loaded, the engine is one Python object.
FAKE_MODEL = {"models": [{"name": "dialogpt-medium", "serve_as": "fake-gpt",
                          "serving": {"engine": "fake_api:FakeNLLEngine"}}]}


class Node:
    """An object in a reference cycle with itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collector() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    gc.unfreeze()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()


def frozen(obj: object) -> bool:
    """Whether `obj` (tracked by the collector) is in the permanent generation: in none of the
    three generations that collections traverse."""
    assert gc.is_tracked(obj)
    return not any(o is obj for o in gc.get_objects())


def test_garbage_is_collected_first_and_what_lives_is_frozen(collector):
    alive, dead = Node(), Node()
    gone = weakref.ref(dead)
    del dead
    assert gone() is not None and not frozen(alive)

    count = freeze_loaded_heap()

    assert gone() is None, "a cycle that was garbage was frozen instead of collected"
    assert frozen(alive)
    # Frozen objects freed since (by reference counting, on any thread) leave the count.
    assert count >= gc.get_freeze_count() > 0
    assert not frozen(Node()), "an object made after the freeze is frozen"


def test_a_model_deployment_freezes_the_heap_once_its_engine_is_built(collector):
    from dialscore_server.nll.deployment import NLLDeployment

    (config, options), = AppArgs.model_validate(FAKE_MODEL).model_configs()
    deployment = NLLDeployment.func_or_class(config, options)

    assert frozen(deployment.engine)


def test_a_batch_worker_freezes_the_heap_once_its_models_are_built(collector):
    app = AppArgs.model_validate(FAKE_MODEL)
    directory = build_directory(JobModels(nll=app.model_configs()))

    assert frozen(directory) and frozen(directory.nll("fake-gpt"))
