"""Input hygiene (issue 15 item 6, spec section 1): the exact token layout of every shipped dialogue
format, no lone space token next to a special token, and whole-turn left truncation.

Expected sequences are built from the stand-in tokenizers' own pieces (each text tokenized alone,
the tokenizer's special-token ids), never typed-in numbers. Only tokenizers are loaded here, except
in the last test (one small model).
"""

from __future__ import annotations

import pytest
from transformers import AutoConfig, AutoTokenizer

from dialscore_server.checkpoints.registry import ModelConfig
from dialscore_server.nll.engine.encoding import NLLEncoder, NLLItem

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


# ---------------------------------------------------------------------------------- truncation
LONG = tuple(f"turn {k}: {s}" for k, s in enumerate(
    ["how are you today?", "not much, just resting.", "where do you live?",
     "I live in a small town.", "what is your favourite food?", "pizza, definitely."]))


def window_for(enc: NLLEncoder, name: str, keep: int) -> int:
    """A window that fits the newest `keep` whole turns of LONG plus one token, not one more."""
    tok = enc.tokenizer
    src = len(expected_source(name, tok, LONG[-keep:])) + 1
    target = len(alone(tok, TARGET)) + 1
    return src + target if enc.config.family == "causal" else src


@pytest.mark.parametrize("name", FAMILIES)
def test_whole_turn_truncation_is_the_default(stand_in_registry, tokenizers, name):
    tok = tokenizers[name]
    probe = encoder(stand_in_registry, tokenizers, name)
    assert probe.fmt.truncation == "turns"
    enc = encoder(stand_in_registry, tokenizers, name, max_length=window_for(probe, name, 3))
    e = enc.encode(NLLItem(target=TARGET, context=LONG))
    assert e.truncated
    assert list(e.source_ids) == expected_source(name, tok, LONG[-3:])  # three whole turns
    text = tok.decode(list(e.source_ids))
    assert "turn 3:" in text and "turn 2" not in text and "favourite" in text
    assert list(e.target_ids) == alone(tok, TARGET) + [tok.eos_token_id]


@pytest.mark.parametrize("name", FAMILIES)
def test_token_truncation_keeps_a_fragment(stand_in_registry, tokenizers, name):
    tok = tokenizers[name]
    probe = encoder(stand_in_registry, tokenizers, name)
    window = window_for(probe, name, 3)
    enc = encoder(stand_in_registry, tokenizers, name, max_length=window, truncation="tokens")
    e = enc.encode(NLLItem(target=TARGET, context=LONG))
    full = expected_source(name, tok, LONG)
    head = [tok.bos_token_id] if name == "bart-base" else []
    tail = [tok.eos_token_id] if name in ("bart-base", "blenderbot-400m") else []
    content = full[len(head):len(full) - len(tail)]
    room = (window - len(e.target_ids) if enc.config.family == "causal"
            else window - len(head) - len(tail))
    assert e.truncated
    assert list(e.source_ids) == head + content[-room:] + tail
    # One token more than the three whole turns: a fragment of the fourth newest is kept.
    assert len(e.source_ids) == len(expected_source(name, tok, LONG[-3:])) + 1


@pytest.mark.parametrize("name", ["dialogpt-medium", "bart-base"])
def test_knowledge_stays_pinned_under_whole_turn_truncation(stand_in_registry, tokenizers, name):
    tok = tokenizers[name]
    probe = encoder(stand_in_registry, tokenizers, name)
    window = window_for(probe, name, 2) + len(alone(tok, KNOWLEDGE)) + 1
    enc = encoder(stand_in_registry, tokenizers, name, max_length=window)
    e = enc.encode(NLLItem(target=TARGET, context=LONG, knowledge=KNOWLEDGE))
    assert e.truncated
    assert list(e.source_ids) == expected_source(name, tok, LONG[-2:], KNOWLEDGE)


@pytest.mark.parametrize("name", ["dialogpt-medium", "blenderbot-400m"])
def test_newest_turn_too_long_falls_back_to_a_token_cut(stand_in_registry, tokenizers, name):
    """When even the newest turn does not fit, its oldest tokens are cut (not all context dropped)."""
    tok = tokenizers[name]
    long_turn = " ".join(LONG)
    enc = encoder(stand_in_registry, tokenizers, name, max_length=16)
    e = enc.encode(NLLItem(target="ok", context=("hello there", long_turn)))
    newest = expected_source(name, tok, [long_turn])
    assert e.truncated
    if enc.config.family == "causal":
        assert list(e.source_ids) == newest[-(16 - len(e.target_ids)):]
    else:
        assert list(e.source_ids) == newest[:-1][-(16 - 1):] + [tok.eos_token_id]


def test_raw_source_is_cut_by_tokens(stand_in_registry, tokenizers):
    tok = tokenizers["dialogpt-medium"]
    source = "<|endoftext|>".join(LONG)
    e = encoder(stand_in_registry, tokenizers, "dialogpt-medium", max_length=20).encode(
        NLLItem(target="ok", source=source))
    assert e.truncated and list(e.source_ids) == alone(tok, source)[-(20 - len(e.target_ids)):]


def test_truncated_nll_scores_only_the_target(stand_in_registry):
    """A whole-turn-truncated item scores exactly as the same item sent without the dropped turns:
    same target tokens, same NLL; only the `truncated` flag differs."""
    from dialscore_server.checkpoints.loading import load_model
    from dialscore_server.checkpoints.standins import reinit_
    from dialscore_server.nll.engine.engine import NLLEngine

    loaded = load_model(stand_in_registry.get("dialogpt-medium"))
    reinit_(loaded.model, 0.3, seed=1)
    tok = loaded.tokenizer
    window = len(expected_source("dialogpt-medium", tok, LONG[-2:])) + len(alone(tok, TARGET)) + 2
    engine = NLLEngine(loaded.config.model_copy(update={"max_length": window}), loaded=loaded,
                       fast_kernels=False)
    cut, kept = engine.score([NLLItem(target=TARGET, context=LONG),
                              NLLItem(target=TARGET, context=LONG[-2:])])
    assert cut.truncated and not kept.truncated
    assert cut.token_ids == kept.token_ids == alone(tok, TARGET) + [tok.eos_token_id]
    assert cut.num_tokens == len(cut.token_ids) and cut.source_tokens == kept.source_tokens
    assert cut.nll == pytest.approx(kept.nll, abs=1e-5)
