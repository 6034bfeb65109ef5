"""The model card: one served model's provenance and dialogue format, the one type used from the
engine (``card()``) through ``GET /v1/models`` to the client, probes and reports.

It lives in the client distribution because both sides need it and the client installs alone;
the server depends on the client, never the other way round. Neither type refuses fields it does
not know, so an older client keeps reading the cards of a newer server: :class:`ModelCard` keeps
them (``extra="allow"``: readable as attributes and in ``model_dump()``), :class:`DialogueFormat`
drops them (``extra="ignore"``). The server's
configuration is strict where it has to be: the registry refuses unknown format keys in YAML
before a :class:`DialogueFormat` is built (``dialscore_server.checkpoints.registry``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Family = Literal["causal", "seq2seq", "classifier"]


class DialogueFormat(BaseModel):
    """How a dialogue (turns, optional knowledge sentence, target) becomes model input.

    Separators may contain the placeholders ``{eos}`` and ``{bos}``, resolved against the model's
    own tokenizer (DialoGPT joins turns with ``<|endoftext|>``, its eos token). Whitespace that
    touches a special token in a separator is dropped (``" </s> "`` reads as ``"</s>"``), and turns
    and the knowledge sentence are stripped of edge whitespace: in byte-level BPE such a space would
    be a lone ``Ġ`` token the model never saw in training.

    Source layout, for turns ``t_1..t_n`` and an optional knowledge sentence ``K``::

        [K + knowledge_separator]  t_1 + turn_separator + ... + t_n [+ turn_separator if separator_after_last]

    (``knowledge_position: after_history`` puts ``knowledge_separator + K`` after ``t_n`` instead;
    a separator is never written next to a missing unit). The knowledge part is *pinned*: left
    truncation removes the oldest turns first and reaches the knowledge only when no turn is left.
    How turns are removed is ``truncation``.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, protected_namespaces=())

    turn_separator: str = Field(description="Text placed between consecutive turns.")
    separator_after_last: bool = Field(
        False,
        description="Also place the separator after the last turn, so the target follows a separator "
        "(DialoGPT's training format).",
    )
    knowledge_position: Literal["before_history", "after_history"] = Field(
        "before_history",
        description="Where a knowledge/explanation sentence goes relative to the history (CEDAR "
        "inference probing's explanation placement; default before the history, like TopicalChat).",
    )
    knowledge_separator: str = Field(
        "{eos}", description="Text placed between the knowledge sentence and the history."
    )
    why_turn: str = Field(
        "Why?",
        description="The turn appended after the response in CEDAR attribution probing; the "
        "explanation is scored as the answer to it.",
    )
    append_eos: bool = Field(
        True,
        description="Append the tokenizer's eos token to every target; it is then scored as the "
        "target's last token. Every NLL response states this value.",
    )
    target_bos: bool = Field(
        False,
        description="Encoder-decoder only: feed the tokenizer's bos token after the decoder start "
        "token, unscored, before the target (BART generates this way: forced_bos_token_id).",
    )
    source_bos: bool = Field(
        False, description="Encoder-decoder only: prepend the bos token to the encoder input (BART)."
    )
    source_eos: bool = Field(
        True, description="Encoder-decoder only: append the eos token to the encoder input."
    )

    truncation: Literal["turns", "tokens"] = Field(
        "turns",
        description="How a source too long for the window is shortened (the target is never cut). "
        "`turns` (default): whole oldest turns are dropped until the rest fits, so the model sees "
        "no fragment of a turn; if even the newest turn (with the pinned knowledge) does not fit, "
        "that last source is cut token by token from the left. `tokens`: the oldest tokens are cut, "
        "which can leave a fragment of the oldest kept turn (ParlAI's behaviour). Raw `source` "
        "items have no turns and are always cut by tokens.",
    )

    def join_turns(self, turns: Sequence[str]) -> str:
        """Join turns with this format's separator as written (placeholders unresolved, no
        whitespace cleaning): a readable sketch; the server's ``nll.layout`` builds the real input."""
        text = self.turn_separator.join(turns)
        if turns and self.separator_after_last:
            text += self.turn_separator
        return text


class ModelCard(BaseModel):
    """One served model: what it is, where its weights come from, how it formats dialogue.

    Dialogue models (``causal``, ``seq2seq``) carry ``format``; NLI classifiers carry ``labels``
    (in index order) and ``contradiction_index``.
    """

    model_config = ConfigDict(extra="allow", frozen=True, protected_namespaces=())

    name: str = Field(description="The name requests use (`model`).")
    family: Family = Field(description="causal, seq2seq or classifier.")
    source: str | None = Field(None, description="The checkpoint: hub id or path.")
    revision: str | None = Field(None, description="The resolved revision, when known.")
    max_length: int | None = Field(None, description="Window in tokens.")
    dtype: str | None = Field(None, description="Weights' dtype.")
    device: str | None = Field(None, description="Where the weights live (cpu, cuda...).")
    stand_in: bool = Field(False, description="True when the model is a random-weight stand-in.")
    format: DialogueFormat | None = Field(
        None, description="The dialogue format (dialogue models); None when not reported.")
    labels: list[str] | None = Field(None, description="Classifier labels, in index order.")
    contradiction_index: int | None = Field(
        None, description="Index of the contradiction label (classifiers).")

    def provenance(self) -> dict[str, Any]:
        """What a report records about this model's weights and formatting."""
        return {"name": self.name, "family": self.family, "source": self.source,
                "revision": self.revision, "stand_in": self.stand_in, "dtype": self.dtype,
                "max_length": self.max_length,
                "format": self.format.model_dump() if self.format is not None else None}
