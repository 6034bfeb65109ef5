"""The model registry: one typed config per servable model.

A :class:`ModelConfig` names a checkpoint (a hub id or a local path), how to load it, and how
dialogue turns become model input (:class:`DialogueFormat`). Everything that depends on a model's
family or training format lives here, so a caller passes turns and gets the family's format.

The shipped entries (:data:`PAPER_MODELS`) are the models of the CEDAR and DECODE papers, by hub
id. :func:`stand_in_registry` maps the same names onto the offline stand-in checkpoints that
``dialscore stand-ins build`` writes, for running without the hub.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dialscore.model_card import DialogueFormat, Family

DType = Literal["float32", "bfloat16", "float16", "int8"]


class _Strict(BaseModel):
    """Base for every config: unknown keys are an error, so a typo in YAML fails loudly."""

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())


# The paper models' formats and the exact token layout each produces (fast byte-level BPE
# tokenizers split text on special tokens first, so a turn after a special token is tokenized as
# that turn alone; services/dialscore_server/nll/engine/layout.py drops any whitespace touching a special
# token and strips the edge whitespace of turns, knowledge and targets, so no lone whitespace token
# sits next to a special token). Turns t_1..t_n, knowledge K, target T; every text keeps the
# first-word convention of its family:
#
# * DialoGPT: `t_1 <eos> t_2 <eos> ... t_n <eos> | T <eos>`; each text starts with "word", no
#   leading space, as DialoGPT's data preparation encoded each turn alone and joined the ids with
#   <|endoftext|>. Empty history: `<eos> | T <eos>` (the bos, which is the eos).
# * TopicalChat GPT-2: `K <eos> t_1 <eos> ... t_n <eos> | T <eos>`; the knowledge separator was
#   " {eos}", which put a lone space before the <eos> (the delimiter is the project's choice; spec
#   section 1).
# * BART: encoder `<s> t_1 </s> t_2 </s> ... t_n </s>` (knowledge: `<s> K </s> t_1 ...`), decoder
#   `</s> <s> | T </s>`; each text starts with "word", no leading space, as BART's pretraining
#   (`<s>text</s>`) and RoBERTa-style pair encoding (each segment encoded alone) have it. The
#   separator was " </s> ": a lone space before every </s> and "Ġword" after it.
# * BlenderBot: encoder `t_1 Ġ t_2 Ġ ... t_n </s>`, decoder `<s> | T </s>`; turns joined by two spaces
#   (ParlAI's and transformers' BlenderBot delimiter): with the tokenizer's add_prefix_space every
#   text starts with "Ġword", and the delimiter's other space is one `Ġ` token between turns, never
#   next to a special token.
# (`|` marks where scoring starts; tokens after it are the scored target.)
DIALOGPT_FORMAT = DialogueFormat(turn_separator="{eos}", separator_after_last=True)
TOPICAL_GPT2_FORMAT = DialogueFormat(
    turn_separator="{eos}", separator_after_last=True, knowledge_separator="{eos}"
)
BLENDERBOT_FORMAT = DialogueFormat(turn_separator="  ", knowledge_separator="  ")
BART_FORMAT = DialogueFormat(
    turn_separator="{eos}", knowledge_separator="{eos}", target_bos=True, source_bos=True
)
NLI_FORMAT = DialogueFormat(turn_separator=" ", append_eos=False)


class ModelConfig(_Strict):
    """One servable model: where its checkpoint is, how to load it, how to format dialogue."""

    name: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._\-]+$")] = Field(
        description="Name callers use (e.g. in POST /v1/nll `model`)."
    )
    source: str = Field(description="A hub id such as `microsoft/DialoGPT-medium`, or a local path.")
    revision: str = Field("main", description="Hub revision (branch, tag or commit); ignored for paths.")
    family: Family = Field(description="causal (decoder-only), seq2seq (encoder-decoder) or classifier (NLI).")
    format: DialogueFormat = Field(description="How turns become model input.")
    max_length: Annotated[int, Field(ge=8, le=1_000_000)] = Field(
        description="Window in tokens: source + target for causal models; each side for seq2seq; the "
        "pair for classifiers."
    )
    dtype: DType = Field(
        "float32",
        description="Weights' dtype; log-softmax is always float32. `int8` (CPU only): the "
        "transformer body's linear layers get int8 weights (dynamic quantization); embeddings, "
        "norms, the output head and the log-softmax stay float32.")
    device: str = Field("auto", description="`auto` = CUDA when present, else CPU; or `cpu`, `cuda:0`...")
    stand_in: bool = Field(
        False,
        description="True for the project's random-weight stand-in checkpoints; every response says so. "
        "Also set automatically when the checkpoint carries the stand-in marker file.",
    )
    description: str = Field("", description="Free text for /v1/models and reports.")

    @field_validator("format", mode="before")
    @classmethod
    def _known_format_keys(cls, v: Any) -> Any:
        # DialogueFormat itself ignores unknown keys (it is also the wire type clients read);
        # a configuration must not: a misspelt key would silently keep the default.
        if isinstance(v, Mapping):
            unknown = sorted(set(v) - set(DialogueFormat.model_fields))
            if unknown:
                raise ValueError(f"unknown format key(s) {', '.join(unknown)}; known: "
                                 f"{', '.join(DialogueFormat.model_fields)}")
        return v

    @field_validator("source")
    @classmethod
    def _source_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("source must name a hub id or a local path")
        return v

    @property
    def is_local(self) -> bool:
        """True when `source` is a directory on this machine rather than a hub id."""
        return Path(self.source).expanduser().is_dir()


PAPER_MODELS: tuple[ModelConfig, ...] = (
    ModelConfig(
        name="dialogpt-medium",
        source="microsoft/DialoGPT-medium",
        family="causal",
        format=DIALOGPT_FORMAT,
        max_length=1024,
        description="DialoGPT-medium (345M), Reddit-trained decoder-only dialogue model.",
    ),
    ModelConfig(
        name="blenderbot-400m",
        source="facebook/blenderbot-400M-distill",
        family="seq2seq",
        format=BLENDERBOT_FORMAT,
        max_length=128,
        description="BlenderBot 400M distilled; 128-token window.",
    ),
    ModelConfig(
        name="bart-base",
        source="facebook/bart-base",
        family="seq2seq",
        format=BART_FORMAT,
        max_length=1024,
        description="BART-base (140M), encoder-decoder.",
    ),
    ModelConfig(
        name="bart-large",
        source="facebook/bart-large",
        family="seq2seq",
        format=BART_FORMAT,
        max_length=1024,
        description="BART-large (400M), encoder-decoder.",
    ),
    ModelConfig(
        name="topical-gpt2",
        source="./checkpoints/topical-gpt2",
        family="causal",
        format=TOPICAL_GPT2_FORMAT,
        max_length=1024,
        description="GPT-2 fine-tuned on TopicalChat (knowledge-grounded); user-supplied local path.",
    ),
    ModelConfig(
        name="roberta-large-mnli",
        source="roberta-large-mnli",
        family="classifier",
        format=NLI_FORMAT,
        max_length=512,
        description="RoBERTa-large MNLI; contradiction label at index 0.",
    ),
    ModelConfig(
        name="roberta-large-anli",
        source="ynie/roberta-large-snli_mnli_fever_anli_R1_R2_R3-nli",
        family="classifier",
        format=NLI_FORMAT,
        max_length=512,
        description="RoBERTa-large on SNLI+MNLI+FEVER+ANLI; contradiction label at index 2.",
    ),
)


class UnknownModelError(KeyError):
    """Raised for a model name the registry does not hold; the message suggests the closest name."""

    def __init__(self, name: str, known: Iterable[str]):
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        self.name = name
        super().__init__(f"unknown model {name!r}; known models: {', '.join(known)}.{hint}")

    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return str(self.args[0])


class Registry:
    """An immutable name → :class:`ModelConfig` mapping, built from configs or plain dicts."""

    def __init__(self, configs: Iterable[ModelConfig | Mapping[str, Any]]):
        self._configs: dict[str, ModelConfig] = {}
        for raw in configs:
            cfg = raw if isinstance(raw, ModelConfig) else ModelConfig.model_validate(raw)
            if cfg.name in self._configs:
                raise ValueError(f"duplicate model name {cfg.name!r} in registry")
            self._configs[cfg.name] = cfg

    def get(self, name: str) -> ModelConfig:
        try:
            return self._configs[name]
        except KeyError:
            raise UnknownModelError(name, self._configs) from None

    def names(self) -> list[str]:
        return list(self._configs)

    def __iter__(self):
        return iter(self._configs.values())

    def __len__(self) -> int:
        return len(self._configs)

    def __contains__(self, name: object) -> bool:
        return name in self._configs


def paper_registry() -> Registry:
    """The paper's models by hub id (needs the hub or a populated HF cache)."""
    return Registry(PAPER_MODELS)


# Which stand-in checkpoint (a subfolder written by `dialscore stand-ins build`) stands in for
# which paper model. Classifier stand-ins exist in both label orders of the real checkpoints.
STAND_IN_FOR: dict[str, str] = {
    "dialogpt-medium": "gpt2",
    "topical-gpt2": "gpt2",
    "blenderbot-400m": "blenderbot",
    "bart-base": "bart",
    "bart-large": "bart",
    "roberta-large-mnli": "nli-contradiction-first",
    "roberta-large-anli": "nli-contradiction-last",
}


def stand_in_registry(root: str | Path, names: Sequence[str] | None = None) -> Registry:
    """The paper models re-pointed at stand-in checkpoints under `root`, on CPU in float32.

    Stand-in windows are capped at the stand-ins' position tables (see services/dialscore_server/checkpoints/standins.py).
    """
    from dialscore_server.checkpoints.standins import STAND_IN_MAX_POSITIONS

    root = Path(root)
    chosen = [m for m in PAPER_MODELS if names is None or m.name in names]
    return Registry(
        m.model_copy(
            update={
                "source": str(root / STAND_IN_FOR[m.name]),
                "max_length": min(m.max_length, STAND_IN_MAX_POSITIONS[STAND_IN_FOR[m.name]]),
                "device": "cpu",
                "stand_in": True,
                "description": f"STAND-IN (random weights) for {m.source}. {m.description}",
            }
        )
        for m in chosen
    )
