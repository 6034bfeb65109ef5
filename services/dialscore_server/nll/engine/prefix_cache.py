"""The key/value cache of a shared-prefix continuation pass (transformers ``Cache`` API).

A prefix pass computes each group's shared prefix once; a continuation pass then runs every item's
remaining tokens against its group's prefix keys/values. :func:`expanded_prefix_cache` hands each
continuation row its group's prefix without materialising the expansion for all layers at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dialscore_server.compat import prefix_cache_layer


def expanded_prefix_cache(kv: Sequence[tuple[Any, Any]], index):
    """A transformers ``Cache`` whose layer ``l`` holds the prefix keys/values ``kv[l]`` (groups ×
    heads × prefix × head dim) and hands row ``b`` the group ``index[b]``'s prefix: the expansion
    happens inside each layer's ``update``, fused with the concatenation of the new keys/values,
    so only one layer's expanded prefix exists at a time
    (:func:`~dialscore_server.compat.prefix_cache_layer`). The cache itself never grows (one
    continuation pass per cache object)."""
    from transformers.cache_utils import Cache

    return Cache(layers=[prefix_cache_layer(k, v, index) for k, v in kv])


def padded_past(hits: Sequence[Any], width: int, device: str):
    """A transformers ``DynamicCache`` holding, for row ``k``, the cached prefix ``hits[k]``
    (a :class:`~dialscore_server.nll.engine.context_cache.CachedPrefix`, or None for a row with
    none) in its first ``hits[k].length`` positions of `width` (copied segment by segment), zeros
    after (the caller masks them). The pass it is given grows it with the new positions
    (``DynamicCache.update``)."""
    import torch
    from transformers.cache_utils import DynamicCache

    some = next(h for h in hits if h is not None)
    cache = DynamicCache()
    for layer, (k0, v0) in enumerate(some.segments[0]):
        heads, dim = k0.shape[0], k0.shape[-1]
        keys = torch.zeros((len(hits), heads, width, dim), dtype=k0.dtype, device=device)
        values = torch.zeros((len(hits), heads, width, v0.shape[-1]), dtype=v0.dtype,
                             device=device)
        for row, hit in enumerate(hits):
            start = 0
            for segment in hit.segments if hit is not None else ():
                k, v = segment[layer]
                keys[row, :, start: start + k.shape[1]] = k
                values[row, :, start: start + k.shape[1]] = v
                start += k.shape[1]
        cache.update(keys, values, layer)
    return cache
