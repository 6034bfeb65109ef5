"""GET /tokenizer_info, POST /tokenize and POST /detokenize on the NLL serving, without Ray: the
engine's own tokenizer, as POST /v1/completions uses it.

``tokenize(text)`` is exactly the ids a /v1/completions text prompt is scored as (plain text: no
special token added, special-token strings in the text read as their characters, see
:mod:`dialscore_server.checkpoints.plain_text`), so a client that tokenizes here and sends ids gets
the numbers of sending the text. ``detokenize(ids)`` decodes ids together (special tokens
written out), refusing ids outside the model's vocabulary as /v1/completions does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from dialscore_server.contract.errors import InputError
from dialscore_server.contract.reply import Reply
from dialscore_server.nll.engine.tokenizer_info import TokenizerInfo


class TextTokenizer(Protocol):
    """What the routes need of an engine (NLLEngine implements it)."""

    def tokenize(self, text: str) -> list[int]:
        """`text`'s ids as a /v1/completions text prompt is tokenized."""
        ...

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of `ids`, decoded together; an InputError (param None) for an id outside the
        vocabulary."""
        ...

    def tokenizer_info(self) -> TokenizerInfo: ...


@dataclass(frozen=True)
class TokenizerCall:
    """One tokenizer route's work for a replica: `op` ``"info"``, ``"tokenize"`` (of `text`) or
    ``"detokenize"`` (of `ids`)."""

    op: Literal["info", "tokenize", "detokenize"]
    text: str = ""
    ids: tuple[int, ...] = ()


def run_tokenizer_call(engine: TextTokenizer, call: TokenizerCall) -> Reply[object]:
    """`call` on `engine`: a TokenizerInfo, the ids of ``call.text`` or the text of
    ``call.ids``; an id outside the vocabulary is the reply's InputError naming ``tokens``."""
    try:
        if call.op == "info":
            return Reply(value=engine.tokenizer_info())
        if call.op == "tokenize":
            return Reply(value=engine.tokenize(call.text))
        return Reply(value=engine.detokenize(call.ids))
    except InputError as exc:
        return Reply(error=exc if exc.param else exc.within("tokens"))
