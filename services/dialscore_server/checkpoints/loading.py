"""Load a registered model's checkpoint: the one `from_pretrained` path for real and stand-in models.

Hub ids resolve through the Hugging Face cache (``HF_HUB_OFFLINE=1`` makes a missing file fail fast
instead of retrying); local paths load directly. ``trust_remote_code`` is always off: a checkpoint
that needs custom code is refused rather than executed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.checkpoints.standins import is_stand_in

#: The dtype weights are loaded in; int8 models load in float32 and are then quantized.
_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16", "int8": "float32"}


@dataclass(frozen=True)
class LoadedModel:
    """A model in eval mode on its device, its tokenizer, and what was actually loaded."""

    config: ModelConfig
    model: Any
    tokenizer: Any
    device: str
    stand_in: bool
    resolved_revision: str | None


def resolve_device(device: str) -> str:
    """`auto` → `cuda` when a CUDA device is visible, else `cpu`; anything else is used as given."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def set_threads(num_threads: int | None) -> int:
    """Set torch's intra-op threads explicitly (default: the CPUs this process may run on)."""
    import torch

    n = num_threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(max(1, n))
    return torch.get_num_threads()


def load_model(config: ModelConfig) -> LoadedModel:
    """Load `config`'s tokenizer and model with `from_pretrained`, in eval mode, on its device
    (``dtype: int8``: loaded in float32, then the body quantized by
    :func:`~dialscore_server.checkpoints.quantize.quantize_int8`)."""
    import torch
    from transformers import (
        AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification,
        AutoTokenizer,
    )
    from transformers.utils import logging as hf_logging

    from dialscore_server.checkpoints.plain_text import TOKENIZER_OPTIONS

    hf_logging.disable_progress_bar()
    auto = {
        "causal": AutoModelForCausalLM,
        "seq2seq": AutoModelForSeq2SeqLM,
        "classifier": AutoModelForSequenceClassification,
    }[config.family]
    kwargs: dict[str, Any] = {"trust_remote_code": False}
    if not config.is_local:
        kwargs["revision"] = config.revision
    device = resolve_device(config.device)
    if config.dtype == "float16" and not device.startswith("cuda"):
        raise ValueError(
            f"model {config.name!r}: dtype float16 needs a CUDA device (got {device!r}); "
            "use bfloat16 on CPU"
        )
    if config.dtype == "int8" and not device.startswith("cpu"):
        raise ValueError(
            f"model {config.name!r}: dtype int8 runs on CPU only (got {device!r}); "
            "use bfloat16 or float16 on a GPU"
        )
    # User text is text: special-token strings in it are characters (checkpoints/plain_text.py).
    tokenizer = AutoTokenizer.from_pretrained(config.source, **kwargs, **TOKENIZER_OPTIONS)
    model = auto.from_pretrained(config.source, dtype=getattr(torch, _DTYPES[config.dtype]), **kwargs)
    model.to(device).eval()
    if config.dtype == "int8":
        from dialscore_server.checkpoints.quantize import quantize_int8

        quantize_int8(model)
    stand_in = config.stand_in or _carries_marker(config)
    return LoadedModel(config, model, tokenizer, device, stand_in, _resolved_revision(config, model))


def _resolved_revision(config: ModelConfig, model: Any) -> str | None:
    """The commit a hub id was loaded from; for a local path, the hash of its files
    (:func:`~dialscore_server.checkpoints.content_hash.folder_revision`).

    transformers 5 no longer sets ``config._commit_hash``; the commit is the name of the cache
    snapshot folder that holds the loaded ``config.json`` (``.../snapshots/<commit>/config.json``).
    Falls back to the requested revision when the cache cannot tell.
    """
    if config.is_local:
        from dialscore_server.checkpoints.content_hash import folder_revision

        return folder_revision(config.source)
    legacy = getattr(model.config, "_commit_hash", None)
    if legacy:
        return legacy
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(config.source, "config.json", revision=config.revision)
    if isinstance(found, str) and Path(found).parent.parent.name == "snapshots":
        return Path(found).parent.name
    return config.revision


def _carries_marker(config: ModelConfig) -> bool:
    """Whether the checkpoint (a local folder, or a hub snapshot in the cache) is a stand-in."""
    if config.is_local:
        return is_stand_in(config.source)
    from huggingface_hub import try_to_load_from_cache

    from dialscore_server.checkpoints.standins import MARKER

    found = try_to_load_from_cache(config.source, MARKER, revision=config.revision)
    return isinstance(found, str)
