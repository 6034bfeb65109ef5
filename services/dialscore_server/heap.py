"""The process's heap once its models are loaded: what Python's cyclic garbage collector skips.

A replica that has loaded torch, transformers, its checkpoint, Ray and FastAPI holds hundreds of
thousands of long-lived objects that can be part of reference cycles (418,000 in a bare engine
process with the gpt2 stand-in). A full collection (generation 2) traverses every one of them,
and an engine call allocates enough short-lived objects (each scored position's log-probability,
its alternatives, the result records) to set full collections off while requests wait: measured
in ``loadtests/profile_lm_eval_engine.py``, docs/benchmarks/lm-eval.md.

:func:`freeze_loaded_heap` collects what is garbage now, then moves every object still alive to
the permanent generation (:func:`gc.freeze`), which collections never traverse. Frozen objects
are still freed by reference counting; only a cycle among them is never reclaimed, so call it
once per process, after the models are loaded and before traffic. vLLM does the same after its
engine starts (``vllm.utils.gc_utils.freeze_gc_heap``).
"""

from __future__ import annotations

import gc


def freeze_loaded_heap() -> int:
    """Collect every generation, then freeze every object alive; returns how many objects the
    permanent generation holds."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
