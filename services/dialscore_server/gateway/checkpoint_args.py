"""The application's arguments for one checkpoint (``dialscore serve MODEL_OR_PATH``).

The family is read from the checkpoint's config when not given: ``*ForSequenceClassification``
architectures are classifiers, ``is_encoder_decoder: true`` is seq2seq, anything else causal.
The rest of the model's configuration (dialogue format, window) comes from a registry entry: the
one named by `like` (``--like``) when given, else the entry of the config's ``model_type``
(:data:`MODEL_TYPE_ENTRY`: BlenderBot checkpoints join turns as ``blenderbot-400m``, BART ones
as ``bart-base``, GPT-2 ones as ``dialogpt-medium``), else the entry of its family
(:data:`BASE_ENTRY`). The window is the checkpoint's own (``n_positions`` /
``max_position_embeddings``) when smaller. Serving a classifier alone is refused: the service
needs a dialogue model; serve several models with a registry entry and a Serve config instead
(``dialscore serve --config``), which stays the documented way for more than one model.
"""

from __future__ import annotations

import re
from pathlib import Path

from dialscore_server.checkpoints.registry import paper_registry
from dialscore_server.gateway.args import AppArgs, ModelEntry

#: The registry entry whose format and window a checkpoint of each family starts from.
BASE_ENTRY = {"causal": "dialogpt-medium", "seq2seq": "bart-base"}
#: The registry entry for a config's ``model_type``, where the registry has one of that kind.
MODEL_TYPE_ENTRY = {"gpt2": "dialogpt-medium", "bart": "bart-base", "blenderbot": "blenderbot-400m",
                    "blenderbot-small": "blenderbot-400m"}


def infer_family(config) -> str:
    """causal, seq2seq or classifier, from a transformers config."""
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith("ForSequenceClassification") for a in archs):
        return "classifier"
    return "seq2seq" if getattr(config, "is_encoder_decoder", False) else "causal"


def served_name(source: str) -> str:
    """The served name of a checkpoint: its folder (or hub id's last part), safe for `model`."""
    name = re.sub(r"[^A-Za-z0-9._\-]", "-", Path(source.rstrip("/")).name) or "model"
    return name[:100]


def base_entry(config, family: str, like: str | None = None) -> str:
    """The registry entry whose dialogue format a checkpoint of `family` takes (see the module
    docstring). Raises ValueError for an unknown `like` or one of another family."""
    registry = paper_registry()
    if like is not None:
        if like not in registry:
            raise ValueError(f"--like {like!r} is not a registry entry; known: "
                             f"{', '.join(n for n in registry.names() if registry.get(n).family == family)}")
        if registry.get(like).family != family:
            raise ValueError(f"--like {like!r} is a {registry.get(like).family} model; this "
                             f"checkpoint is {family}")
        return like
    by_type = MODEL_TYPE_ENTRY.get(getattr(config, "model_type", None) or "")
    if by_type is not None and registry.get(by_type).family == family:
        return by_type
    return BASE_ENTRY[family]


def checkpoint_app_args(source: str, *, family: str | None = None, dtype: str | None = None,
                        device: str | None = None, name: str | None = None,
                        like: str | None = None) -> AppArgs:
    """AppArgs serving the checkpoint at `source` (a local folder or a hub id) under `name`, with
    the dialogue format of the registry entry `like` (default: inferred, see the module docstring).

    Raises ValueError (with the reason) for a classifier, an unknown family or a bad `like`."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(source)  # never trust_remote_code
    family = family or infer_family(config)
    if family not in BASE_ENTRY:
        raise ValueError(f"{source} is a {family} checkpoint; `dialscore serve MODEL` serves one "
                         "dialogue model (causal or seq2seq). Serve classifiers beside one with "
                         "`dialscore serve --config`.")
    base = paper_registry().get(base_entry(config, family, like))
    window = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    overrides: dict = {"source": str(source), "family": family, "stand_in": False,
                       "description": f"served by `dialscore serve {source}`"}
    if window and window < base.max_length:
        overrides["max_length"] = int(window)
    if dtype:
        overrides["dtype"] = dtype
    if device:
        overrides["device"] = device
    entry = ModelEntry(name=base.name, serve_as=name or served_name(str(source)), overrides=overrides)
    return AppArgs(models=[entry])
