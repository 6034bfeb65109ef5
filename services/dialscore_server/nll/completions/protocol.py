"""POST /v1/completions (OpenAI's and vLLM's legacy completions shape), for prompt log-probs:
request and response schemas.

What is served: ``echo``, ``logprobs`` (top-k alternatives per position, at most
:data:`MAX_LOGPROBS`, as vLLM's default ``max_logprobs``), ``max_tokens`` 0 (the prompt's
log-probs) or 1 (plus the single greedy, argmax, next token), ``prompt`` as a text, a list of
texts, a list of token ids or a list of such lists (one choice per prompt, in order). The numbers
are those of POST /v1/nll's engine: see :mod:`dialscore_server.nll.completions.serving` for which tokens
are scored.

What is refused (422 naming the field): ``max_tokens`` > 1 or omitted (OpenAI's default is 16: no
text generation beyond the one greedy token lm-evaluation-harness asks for); ``echo: false`` with
``max_tokens: 0`` (nothing to return); ``stream: true``; ``n`` or ``best_of`` other than 1;
``suffix``; and, when a token is generated, anything that would make it other than the argmax:
``temperature`` > 0, ``top_p`` < 1, non-zero penalties, ``logit_bias``, ``stop``. An omitted
``temperature`` counts as greedy here (OpenAI would sample at 1). ``seed`` and ``user`` are
accepted and have no effect. Unknown fields are ignored, as vLLM ignores them (it logs them);
OpenAI's own API refuses them.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from dialscore_server.contract.priority import PriorityField
from dialscore_server.contract.errors import InputError
from dialscore_server.contract.limits import Limits, item_token_bound, too_costly, too_many
from dialscore_server.contract.schema import APIModel, Text, limited
from dialscore_server.nll.completions.serving import CompletionCall, CompletionChoice

#: Most alternatives per position (`logprobs`); vLLM's default `max_logprobs` (OpenAI allows 5).
MAX_LOGPROBS = 20

# Empty prompts and ids outside the vocabulary pass the schema and are refused by the replica,
# which names the prompt (`prompt[1]`): inside a union, pydantic's error would name only `prompt`.
TokenIds = list[int]


class CompletionRequest(APIModel):
    """OpenAI's completions request; only what prompt log-probs need is honoured (see the module
    docstring)."""

    model_config = ConfigDict(extra="ignore", strict=True, protected_namespaces=())

    model: str = Field(description="A decoder-only model from GET /v1/models (family `causal`).")
    priority: int | None = PriorityField
    prompt: Text | Annotated[list[Text], Field(min_length=1), limited("max_items")] | Annotated[
        TokenIds, Field(min_length=1)
    ] | Annotated[list[TokenIds], Field(min_length=1), limited("max_items")] = Field(
        description="A text, a list of texts, a list of token ids or a list of token-id lists; "
        "texts are tokenized verbatim as plain text (no special tokens added, special-token "
        "strings in them read as their characters, no dialogue formatting); token ids are taken "
        "as given. Never "
        "truncated: a prompt (+ the generated token) over the model's window is a 422.")
    echo: bool = Field(False, description="Return the prompt's tokens and log-probs (the first "
                       "token's log-prob is null) before the generated token.")
    logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS)] | None = Field(
        None, description=f"Return log-probs, with this many most probable alternatives per "
        f"position (at most {MAX_LOGPROBS}) besides the token itself; null: no log-probs.")
    max_tokens: Annotated[int, Field(ge=0)] | None = Field(
        16, description="0: the prompt only (needs echo); 1: append the greedy next token. More "
        "is refused (no text generation); the default, 16 as OpenAI's, is refused too.")
    temperature: Annotated[float, Field(ge=0)] | None = Field(
        None, description="0 or omitted when a token is generated (greedy).")
    top_p: Annotated[float, Field(gt=0, le=1)] | None = Field(None, description="1 or omitted.")
    n: Annotated[int, Field(ge=1)] = Field(1, description="Only 1.")
    best_of: Annotated[int, Field(ge=1)] | None = Field(None, description="Only 1 or omitted.")
    stream: bool = Field(False, description="Only false.")
    presence_penalty: float | None = Field(None, description="0 or omitted when generating.")
    frequency_penalty: float | None = Field(None, description="0 or omitted when generating.")
    logit_bias: dict[str, float] | None = Field(None, description="Empty or omitted when generating.")
    stop: str | list[str] | None = Field(None, description="Empty or omitted when generating.")
    suffix: str | None = Field(None, description="Not supported (omit).")
    seed: int | None = Field(None, description="Accepted; the greedy token does not depend on it.")
    user: str | None = Field(None, description="Accepted and ignored.")

    @property
    def prompts(self) -> list[str | list[int]]:
        """The prompts, one per choice."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if isinstance(p[0], int):
            return [p]  # type: ignore[list-item]
        return list(p)  # type: ignore[arg-type]

    @property
    def prompt_params(self) -> list[str]:
        """The field path of each prompt in errors: ``prompt``, or ``prompt[i]`` for a list."""
        p = self.prompt
        if isinstance(p, str) or isinstance(p[0], int):
            return ["prompt"]
        return [f"prompt[{i}]" for i in range(len(p))]

    @property
    def generate(self) -> bool:
        return self.max_tokens == 1

    def to_call(self) -> CompletionCall:
        """The call the NLL serving answers for this request."""
        return CompletionCall(self.prompts, self.prompt_params, self.echo, self.generate,
                              self.logprobs)

    def check(self) -> None:
        """Raise a 422 naming the field for what this route does not do."""
        if self.max_tokens is None or self.max_tokens > 1:
            raise InputError(f"max_tokens must be 0 or 1 (got {self.max_tokens}; OpenAI's default "
                             "is 16): this route returns prompt log-probs and at most the single "
                             "greedy next token, no text generation", "max_tokens")
        if not self.echo and self.max_tokens == 0:
            raise InputError("max_tokens 0 without echo returns nothing: set echo true for the "
                             "prompt's log-probs, or max_tokens 1", "max_tokens")
        if self.stream:
            raise InputError("streaming is not supported", "stream")
        if self.n != 1:
            raise InputError("only n = 1 is supported (the one greedy token)", "n")
        if self.best_of not in (None, 1):
            raise InputError("only best_of = 1 is supported", "best_of")
        if self.suffix is not None:
            raise InputError("suffix is not supported", "suffix")
        if not self.generate:
            return  # nothing is sampled: sampling settings change nothing
        greedy = "the generated token is the greedy (argmax) one"
        if self.temperature not in (None, 0):
            raise InputError(f"temperature must be 0 or omitted: {greedy}", "temperature")
        if self.top_p not in (None, 1):
            raise InputError(f"top_p must be 1 or omitted: {greedy}", "top_p")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) not in (None, 0):
                raise InputError(f"{name} must be 0 or omitted: {greedy}", name)
        if self.logit_bias:
            raise InputError(f"logit_bias is not supported: {greedy}", "logit_bias")
        if self.stop:
            raise InputError("stop sequences are not applied to the greedy token; omit stop",
                             "stop")

    def check_limits(self, limits: Limits) -> None:
        """Raise ``payload_too_large`` (413) naming the field: prompts per request
        (``max_items``), characters per text, token ids per prompt (``max_item_tokens``), then
        the cost in tokens (``max_request_tokens``, param ``prompt``), all before tokenizing."""
        prompts, params = self.prompts, self.prompt_params
        if len(prompts) > limits.max_items:
            raise too_many("prompt", len(prompts), limits.max_items, "prompts")
        cost = 0
        for p, param in zip(prompts, params):
            if isinstance(p, str):
                if len(p) > limits.max_text_chars:
                    raise too_many(param, len(p), limits.max_text_chars, "characters")
                cost += item_token_bound([p], limits)
            else:
                if len(p) > limits.max_item_tokens:
                    raise too_many(param, len(p), limits.max_item_tokens, "tokens")
                cost += len(p) + int(self.generate)
        if cost > limits.max_request_tokens:
            raise too_costly("prompt", cost, limits.max_request_tokens, "NLL tokens")


class CompletionLogprobsOut(APIModel):
    tokens: list[str] = Field(description="Each token decoded on its own (echoed prompt tokens, "
                              "then the generated one).")
    token_logprobs: list[float | None] = Field(
        description="log P(token | everything before it), natural log; null for the prompt's "
        "first token (nothing to condition on).")
    top_logprobs: list[dict[str, float] | None] = Field(
        description="Per position: the `logprobs` most probable tokens plus the token itself, "
        "token string → log-prob (null where token_logprobs is null).")
    text_offset: list[int] = Field(
        description="Character offset of each token in `text`: the summed lengths of the token "
        "strings before it (a token holding part of a multi-byte character decodes to U+FFFD, "
        "so offsets after it can differ from the text's).")


class CompletionChoiceOut(APIModel):
    index: int
    text: str = Field(description="The prompt (with echo) followed by the generated token's text.")
    logprobs: CompletionLogprobsOut | None
    finish_reason: Literal["length"] = Field(description="Always `length`: max_tokens was reached.")


class CompletionUsage(APIModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionResponse(APIModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoiceOut]
    usage: CompletionUsage

    @classmethod
    def build(cls, model: str, choices: list[CompletionChoice]) -> "CompletionResponse":
        out = [
            CompletionChoiceOut(
                index=i, text=c.text, finish_reason="length",
                logprobs=CompletionLogprobsOut(
                    tokens=c.logprobs.tokens, token_logprobs=c.logprobs.token_logprobs,
                    top_logprobs=c.logprobs.top_logprobs, text_offset=c.logprobs.text_offset,
                ) if c.logprobs is not None else None)
            for i, c in enumerate(choices)
        ]
        prompt = sum(c.prompt_tokens for c in choices)
        completion = sum(c.completion_tokens for c in choices)
        return cls(id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()), model=model,
                   choices=out, usage=CompletionUsage(prompt_tokens=prompt,
                                                      completion_tokens=completion,
                                                      total_tokens=prompt + completion))
