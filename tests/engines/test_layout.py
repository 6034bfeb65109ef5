"""Input hygiene (issue 15 item 6, spec section 1): the exact token layout of every shipped dialogue
format and no lone space token next to a special token.

Expected sequences are built from the stand-in tokenizers' own pieces (each text tokenized alone,
the tokenizer's special-token ids), never typed-in numbers. Only tokenizers are loaded here.
"""

from __future__ import annotations

import pytest
from transformers import AutoConfig, AutoTokenizer

from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.nll.encoding import NLLEncoder, NLLItem

FAMILIES = ("dialogpt-medium", "topical-gpt2", "bart-base", "blenderbot-400m")
TURNS = ("how are you today?", "not much, just resting.", "why?")
KNOWLEDGE = "Emma is grateful."
TARGET = "I am fine."


@pytest.fixture(scope="module")
def tokenizers(stand_in_registry) -> dict[str, object]:
    return {name: AutoTokenizer.from_pretrained(stand_in_registry.get(name).source)
            for name in FAMILIES}


def encoder(stand_in_registry, tokenizers, name: str, **update) -> NLLEncoder:
    cfg: ModelConfig = stand_in_registry.get(name)
    fmt_update = {k: update.pop(k) for k in list(update) if k in cfg.format.model_fields}
    if fmt_update:
        update["format"] = cfg.format.model_copy(update=fmt_update)
    cfg = cfg.model_copy(update=update)
    start = (AutoConfig.from_pretrained(cfg.source).decoder_start_token_id
             if cfg.family == "seq2seq" else None)
    return NLLEncoder(cfg, tokenizers[name], start)


def alone(tok, text: str) -> list[int]:
    """`text` tokenized on its own, no special tokens."""
    return tok(text, add_special_tokens=False).input_ids


def lone_space(tok) -> int:
    """The id of the token that is a single space (``Ġ``)."""
    space = tok.convert_tokens_to_ids("Ġ")  # byte-level BPE holds every byte as a token
    assert space is not None and space != tok.unk_token_id
    return space


def expected_source(name: str, tok, turns, knowledge=None) -> list[int]:
    """The documented layout (services/dialscore_server/checkpoints/registry.py), from pieces."""
    eos, bos = tok.eos_token_id, tok.bos_token_id
    units = ([knowledge] if knowledge else []) + list(turns)
    if name in ("dialogpt-medium", "topical-gpt2"):    # t_1 <eos> ... t_n <eos>
        return [i for u in units for i in alone(tok, u) + [eos]]
    if name == "bart-base":                            # <s> t_1 </s> ... t_n </s>
        return [bos] + [i for u in units for i in alone(tok, u) + [eos]]
    space = lone_space(tok)                            # BlenderBot: t_1 Ġ t_2 ... t_n </s>
    out: list[int] = []
    for k, u in enumerate(units):
        out += ([space] if k else []) + alone(tok, u)
    return out + [eos]


def full_sequence(enc: NLLEncoder, item: NLLItem) -> list[int]:
    """Every id the model sees for `item`: source, then the decoder prefix (seq2seq) and target."""
    e = enc.encode(item)
    return list(e.source_ids) + list(enc.decoder_prefix) + list(e.target_ids)


def stray_spaces(tok, ids: list[int]) -> list[int]:
    """Positions of lone space tokens that touch a special token."""
    special = set(tok.all_special_ids)
    space = lone_space(tok)
    return [k for k, i in enumerate(ids) if i == space and (
        (k > 0 and ids[k - 1] in special) or (k + 1 < len(ids) and ids[k + 1] in special))]


# ------------------------------------------------------------------------------- token layout
@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("knowledge", [None, KNOWLEDGE])
def test_token_layout_is_exact(stand_in_registry, tokenizers, name, knowledge):
    tok = tokenizers[name]
    enc = encoder(stand_in_registry, tokenizers, name)
    e = enc.encode(NLLItem(target=TARGET, context=TURNS, knowledge=knowledge))
    assert list(e.source_ids) == expected_source(name, tok, TURNS, knowledge)
    assert list(e.target_ids) == alone(tok, TARGET) + [tok.eos_token_id]
    prefix = {"bart-base": [tok.eos_token_id, tok.bos_token_id],
              "blenderbot-400m": [tok.bos_token_id]}.get(name, [])
    assert list(enc.decoder_prefix) == prefix
    assert not e.truncated


@pytest.mark.parametrize("name", FAMILIES)
def test_first_word_convention(tokenizers, name):
    """GPT-2 and BART texts start with "word" (each segment encoded alone, no prefix space);
    BlenderBot's tokenizer adds the prefix space, so its texts start with "Ġword"."""
    tok = tokenizers[name]
    first = tok.convert_ids_to_tokens(alone(tok, "not much"))[0]
    assert first.startswith("Ġ") == (name == "blenderbot-400m")


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("position", ["before_history", "after_history"])
def test_no_lone_space_next_to_a_special_token(stand_in_registry, tokenizers, name, position):
    tok = tokenizers[name]
    enc = encoder(stand_in_registry, tokenizers, name, knowledge_position=position)
    items = [NLLItem(target=TARGET, context=TURNS),
             NLLItem(target=TARGET, context=TURNS, knowledge=KNOWLEDGE),
             NLLItem(target=TARGET, context=(), knowledge=KNOWLEDGE),
             NLLItem(target=TARGET, context=()),
             NLLItem(target=TARGET, context=(" padded turn ", "\tanother\n"), knowledge=" K. ")]
    for item in items:
        ids = full_sequence(enc, item)
        assert stray_spaces(tok, ids) == [], tok.convert_ids_to_tokens(ids)


def test_the_old_separators_made_stray_tokens_and_are_now_cleaned(stand_in_registry, tokenizers):
    """The formats shipped before this fix (BART " </s> ", TopicalChat " {eos}"), written in a
    configuration, give the clean layout; the text they used to produce has stray spaces."""
    bart, gpt2 = tokenizers["bart-base"], tokenizers["topical-gpt2"]
    old_text = " </s> ".join(TURNS)
    assert stray_spaces(bart, alone(bart, old_text)) != []
    enc = encoder(stand_in_registry, tokenizers, "bart-base",
                  turn_separator=" </s> ", knowledge_separator=" </s> ")
    e = enc.encode(NLLItem(target=TARGET, context=TURNS, knowledge=KNOWLEDGE))
    assert list(e.source_ids) == expected_source("bart-base", bart, TURNS, KNOWLEDGE)

    assert stray_spaces(gpt2, alone(gpt2, KNOWLEDGE + " <|endoftext|>")) != []
    enc = encoder(stand_in_registry, tokenizers, "topical-gpt2", knowledge_separator=" {eos}")
    e = enc.encode(NLLItem(target=TARGET, context=TURNS, knowledge=KNOWLEDGE))
    assert list(e.source_ids) == expected_source("topical-gpt2", gpt2, TURNS, KNOWLEDGE)


def test_dialogpt_layout_is_unchanged_for_clean_input(stand_in_registry, tokenizers):
    """DialoGPT input without edge whitespace: the same ids as before (the joined string
    tokenized in one call), hence the same NLL."""
    tok = tokenizers["dialogpt-medium"]
    e = encoder(stand_in_registry, tokenizers, "dialogpt-medium").encode(
        NLLItem(target=TARGET, context=TURNS))
    assert list(e.source_ids) == alone(tok, "".join(t + "<|endoftext|>" for t in TURNS))
