"""Stand-in checkpoints: small random-weight models in the real architectures, built offline.

Checkpoints the project builds itself, without the model hub, in standard Hugging Face format
(config.json, model.safetensors, tokenizer files), loaded through exactly the same
``from_pretrained`` code path as the real ones, so tests, benchmarks and the demo run offline:

* ``gpt2``: GPT-2 / DialoGPT-shaped decoder-only LM (also stands in for the TopicalChat GPT-2);
* ``bart``: BART-shaped encoder-decoder;
* ``blenderbot``: BlenderBot-shaped encoder-decoder (128-position window, like 400M-distill);
* ``nli-contradiction-first`` / ``nli-contradiction-last``: RoBERTa sequence classifiers with three
  labels in roberta-large-mnli's order (CONTRADICTION at 0) and in the ANLI checkpoint's order
  (contradiction at 2).

Tokenizers are byte-level BPE trained here on text the project generates (:func:`corpus`), so any
Unicode text, emoji included, tokenizes. Everything is seeded: the same seed gives byte-identical
weights. Each checkpoint carries :data:`MARKER` so that loaders report ``stand_in: true``.

Random weights at the default small init give every token an NLL close to log(vocab size); tests
that check arithmetic re-initialise with a large std (:func:`reinit_`) or train briefly
(:func:`train_causal`).
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

MARKER = "dialscore_stand_in.json"
VOCAB_SIZE = 1000
STAND_IN_MAX_POSITIONS: dict[str, int] = {
    "gpt2": 512,
    "bart": 512,
    "blenderbot": 128,
    "nli-contradiction-first": 256,
    "nli-contradiction-last": 256,
}
_ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
_GPT2_SPECIALS = ["<|endoftext|>"]

# Vocabulary of the generated text: everyday dialogue, and CEDAR-style explanations
# ("<antecedent> <connective> <consequent>").
_NAMES = ["Anna", "Ben", "Chloe", "David", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jonas"]
_SUBJECTS = ["I", "you", "we", "they", "my sister", "my friend", "the teacher", "our neighbour"]
_ACTIONS = [
    "found a buyer for the house", "lost the keys", "missed the bus", "won the game",
    "cooked dinner", "bought a new car", "finished the project", "adopted a puppy",
    "got a promotion", "failed the exam", "moved to a new city", "broke a leg",
    "fixed the bike", "planted a garden", "saved some money", "forgot the umbrella",
]
_FEELINGS = [
    "is so happy", "feels sad", "is very tired", "feels proud", "is worried", "feels relieved",
    "is angry", "is excited", "feels lonely", "is grateful",
]
_CONNECTIVES = ["causes", "motivates", "enables", "causes/enables"]
_PLACES = ["at the park", "in the kitchen", "at work", "at school", "in the city", "at home"]
_QUESTIONS = [
    "how are you today?", "what did you do at the weekend?", "do you like to cook?",
    "where do you live?", "what is your favourite food?", "why are you so happy?",
]
_REPLIES = [
    "I am fine, thanks.", "not much, just resting.", "yes, I love to cook pasta.",
    "I live in a small town.", "pizza, definitely.", "because I found a buyer for the house.",
]
_EXTRA = "Ünïcödé café naïve — “quotes” 😀 🎉 日本語 テスト 😂 ❤️ ¿qué? ça va! 1234567890 #@%&*()[]{}"


def _sentence(rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        return f"{rng.choice(_SUBJECTS)} {rng.choice(_ACTIONS)} {rng.choice(_PLACES)}."
    if kind == 1:
        return f"{rng.choice(_NAMES)} {rng.choice(_FEELINGS)}."
    if kind == 2:
        return rng.choice(_QUESTIONS)
    if kind == 3:
        return rng.choice(_REPLIES)
    return explanation_sentence(rng)


def explanation_sentence(rng: random.Random) -> str:
    """One templated CEDAR-style explanation: '<someone> <action> <connective> <someone> <feeling>'."""
    return (
        f"{rng.choice(_SUBJECTS)} {rng.choice(_ACTIONS)} {rng.choice(_CONNECTIVES)} "
        f"{rng.choice(_NAMES)} {rng.choice(_FEELINGS)}"
    )


def templated_sentences(n: int, seed: int = 0) -> list[str]:
    """`n` natural templated sentences (deterministic for a seed): training and evaluation text."""
    rng = random.Random(seed)
    return [_sentence(rng) for _ in range(n)]


def corpus(seed: int = 0, n: int = 4000) -> Iterator[str]:
    """Tokenizer-training text: templated sentences plus a line of non-ASCII text and emoji."""
    yield from templated_sentences(n, seed)
    for _ in range(20):
        yield _EXTRA


def _train_bpe(specials: Sequence[str], seed: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        corpus(seed), vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=list(specials),
        show_progress=False,
    )
    model = json.loads(bpe._tokenizer.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    return model["vocab"], merges  # type: ignore[return-value]


def _write_marker(path: Path, kind: str, seed: int) -> None:
    (path / MARKER).write_text(
        json.dumps(
            {"stand_in": True, "kind": kind, "seed": seed,
             "note": "random-weight stand-in built by `dialscore stand-ins build`; scores are not meaningful"},
            indent=2,
        )
    )


def _build_gpt2(out: Path, seed: int) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

    vocab, merges = _train_bpe(_GPT2_SPECIALS, seed)
    tok = GPT2Tokenizer(vocab=vocab, merges=merges)
    torch.manual_seed(seed)
    eos = tok.eos_token_id
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(vocab), n_positions=STAND_IN_MAX_POSITIONS["gpt2"], n_embd=64, n_layer=2,
            n_head=4, bos_token_id=eos, eos_token_id=eos,
        )
    )
    tok.save_pretrained(out)
    model.save_pretrained(out)


def _build_seq2seq(out: Path, kind: str, seed: int) -> None:
    import torch
    from transformers import (
        BartConfig, BartForConditionalGeneration, BartTokenizer,
        BlenderbotConfig, BlenderbotForConditionalGeneration, BlenderbotTokenizer,
    )

    vocab, merges = _train_bpe(_ROBERTA_SPECIALS, seed)
    torch.manual_seed(seed)
    dims = dict(
        vocab_size=len(vocab), d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_position_embeddings=STAND_IN_MAX_POSITIONS[kind],
    )
    if kind == "bart":
        tok = BartTokenizer(vocab=vocab, merges=merges)
        ids = dict(pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                   eos_token_id=tok.eos_token_id)
        # BART starts decoding with </s> and forces <s> next, as facebook/bart-* do.
        model = BartForConditionalGeneration(
            BartConfig(**dims, **ids, decoder_start_token_id=tok.eos_token_id,
                       forced_bos_token_id=tok.bos_token_id)
        )
    else:
        tok = BlenderbotTokenizer(vocab=vocab, merges=merges)
        ids = dict(pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                   eos_token_id=tok.eos_token_id)
        model = BlenderbotForConditionalGeneration(
            BlenderbotConfig(**dims, **ids, decoder_start_token_id=tok.bos_token_id)
        )
    tok.save_pretrained(out)
    model.save_pretrained(out)


def _build_nli(out: Path, kind: str, seed: int) -> None:
    import torch
    from transformers import RobertaConfig, RobertaForSequenceClassification, RobertaTokenizer

    vocab, merges = _train_bpe(_ROBERTA_SPECIALS, seed)
    tok = RobertaTokenizer(vocab=vocab, merges=merges)
    labels = (
        ["CONTRADICTION", "NEUTRAL", "ENTAILMENT"]  # roberta-large-mnli's order
        if kind == "nli-contradiction-first"
        else ["entailment", "neutral", "contradiction"]  # ynie/...anli's order
    )
    torch.manual_seed(seed)
    model = RobertaForSequenceClassification(
        RobertaConfig(
            vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=STAND_IN_MAX_POSITIONS[kind] + 2,
            pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id, num_labels=3,
            id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)},
        )
    )
    tok.save_pretrained(out)
    model.save_pretrained(out)


KINDS: tuple[str, ...] = tuple(STAND_IN_MAX_POSITIONS)


def build_stand_ins(root: str | Path, seed: int = 0, kinds: Sequence[str] = KINDS) -> dict[str, Path]:
    """Write every stand-in checkpoint under `root` (one subfolder per kind); return their paths.

    Idempotent: a kind whose folder already holds a marker with the same seed is kept.
    """
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    root = Path(root)
    paths: dict[str, Path] = {}
    for kind in kinds:
        out = root / kind
        paths[kind] = out
        marker = out / MARKER
        if marker.is_file() and json.loads(marker.read_text()).get("seed") == seed:
            continue
        tmp = root / f".{kind}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if kind == "gpt2":
            _build_gpt2(tmp, seed)
        elif kind in ("bart", "blenderbot"):
            _build_seq2seq(tmp, kind, seed)
        else:
            _build_nli(tmp, kind, seed)
        _write_marker(tmp, kind, seed)
        # Written aside, then moved into place: a crash never leaves a half-built checkpoint.
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return paths


def is_stand_in(path: str | Path) -> bool:
    """True when the checkpoint folder carries the stand-in marker."""
    return (Path(path) / MARKER).is_file()


def reinit_(model, std: float = 0.3, seed: int = 0):
    """Re-initialise every weight matrix and embedding with N(0, std) in place (tests and
    benchmarks; never a served model).

    The default small init makes every token's NLL ≈ log(vocab) and hides padding and span bugs; a
    large std makes NLLs vary strongly by token and position. LayerNorms stay at their init.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * std * 0.1)
    return model


def train_causal(checkpoint: str | Path, out: str | Path, sentences: Sequence[str],
                 seconds: float = 20.0, max_steps: int = 400, seed: int = 0, lr: float = 3e-3) -> Path:
    """Briefly train a decoder-only stand-in on `sentences` (each followed by eos); save to `out`.

    Used by tests and benchmarks that need a model which has learned word order (spec section 2: a
    trained left-to-right model prefers natural over shuffled text). Stops at `max_steps` or
    `seconds`.
    The output keeps the stand-in marker (it is still not a real checkpoint).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tok = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    eos = tok.eos_token_id
    encoded = [[eos] + tok(s, add_special_tokens=False).input_ids + [eos] for s in sentences]
    start = time.monotonic()
    for _step in range(max_steps):
        batch = rng.sample(encoded, k=min(32, len(encoded)))
        width = max(map(len, batch))
        ids = torch.full((len(batch), width), eos, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, seq in enumerate(batch):
            ids[i, : len(seq)] = torch.tensor(seq)
            labels[i, 1 : len(seq)] = torch.tensor(seq[1:])
            mask[i, : len(seq)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if time.monotonic() - start > seconds:
            break
    model.eval()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    shutil.copy(Path(checkpoint) / MARKER, out / MARKER)
    return out
