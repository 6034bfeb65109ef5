"""The key/value cache of a shared-prefix continuation pass (transformers ``Cache`` API).

A prefix pass computes each group's shared prefix once; a continuation pass then runs every item's
remaining tokens against its group's prefix keys/values. :func:`expanded_prefix_cache` hands each
continuation row its group's prefix without materialising the expansion for all layers at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Built on first use: subclassing transformers' DynamicLayer at import time would import
# transformers with this module.
_EXPANDED_LAYER: Any = None


def expanded_prefix_cache(kv: Sequence[tuple[Any, Any]], index):
    """A transformers ``Cache`` whose layer ``l`` holds the prefix keys/values ``kv[l]`` (groups ×
    heads × prefix × head dim) and hands row ``b`` the group ``index[b]``'s prefix: the expansion
    happens inside each layer's ``update``, fused with the concatenation of the new keys/values,
    so only one layer's expanded prefix exists at a time. The cache itself never grows (one
    continuation pass per cache object)."""
    global _EXPANDED_LAYER
    from transformers.cache_utils import Cache, DynamicLayer

    if _EXPANDED_LAYER is None:
        class _ExpandedPrefixLayer(DynamicLayer):
            def __init__(self, keys, values, index):
                super().__init__()
                self.keys, self.values, self.index = keys, values, index
                self.dtype, self.device = keys.dtype, keys.device
                self.is_initialized = True

            def update(self, key_states, value_states, *args, **kwargs):
                import torch

                keys = torch.cat([self.keys.index_select(0, self.index), key_states], dim=-2)
                values = torch.cat([self.values.index_select(0, self.index), value_states], dim=-2)
                return keys, values

        _EXPANDED_LAYER = _ExpandedPrefixLayer
    return Cache(layers=[_EXPANDED_LAYER(k, v, index) for k, v in kv])
