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
