"""The models a batch job serves, and building them in one worker without Ray Serve.

:class:`JobModels` is what the job's workers receive (plain data, pickled to each actor): the
resolved registry entries and serving options of a Serve config's models and classifiers, and its
request limits. :func:`build_directory` builds each model's engine and serving exactly as the
model deployments do (the engine class's and the serving's ``from_options``: same chunking,
caps, runner and lane policy; the runner is plain asyncio, no Serve replica needed), then
freezes the worker's heap as a replica does (:func:`~dialscore_server.heap.freeze_loaded_heap`).

A job is bulk work. The command gives each dialogue model its bulk pool's serving options where
the config has a pool (:meth:`~dialscore_server.gateway.args.AppArgs.batch_model_configs`), and
a worker whose model's options set ``yield_to_interactive_s`` yields, as that pool's replicas do,
to the interactive requests of the Serve replicas on the same device of its node
(:mod:`~dialscore_server.scheduling.device_gate`). A worker never holds a gate itself: nothing
yields to a job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.contract.engine import engine_class
from dialscore_server.contract.limits import Limits
from dialscore_server.contract.options import ServingOptions
from dialscore_server.directory import ModelDirectory
from dialscore_server.heap import freeze_loaded_heap
from dialscore_server.scheduling.device_gate import DeviceGate, device_gate


@dataclass
class JobModels:
    """Dialogue models and classifiers by resolved config, with their serving options."""

    nll: list[tuple[ModelConfig, ServingOptions]]
    classifiers: list[tuple[ModelConfig, ServingOptions]] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)


def build_directory(models: JobModels,
                    gate_of: Callable[[str | None], DeviceGate] = device_gate) -> ModelDirectory:
    """Every model of `models` loaded in this process, behind the routers' backend; a dialogue
    model whose options set ``yield_to_interactive_s`` yields at `gate_of` its engine's device
    (default: that device's gate on this node)."""
    from dialscore_server.contradiction.engine.engine import ContradictionDetector
    from dialscore_server.contradiction.serving import ContradictionServing
    from dialscore_server.nll.engine.engine import NLLEngine
    from dialscore_server.nll.serving import NLLServing
    from dialscore_server.rerank.serving import RerankServing

    nll = {}
    for cfg, opts in models.nll:
        engine = engine_class(opts.engine, NLLEngine).from_options(cfg, opts)
        gate = (gate_of(engine.card().device) if opts.yield_to_interactive_s is not None
                else None)
        nll[cfg.name] = NLLServing.from_options(engine, opts, cfg.name, gate=gate)
    classifiers = {cfg.name: ContradictionServing.from_options(
                       engine_class(opts.engine, ContradictionDetector).from_options(cfg, opts),
                       opts, cfg.name)
                   for cfg, opts in models.classifiers}
    reranker = RerankServing(classifiers, nll) if classifiers else None
    directory = ModelDirectory(nll, classifiers, reranker, limits=models.limits)
    freeze_loaded_heap()
    return directory
