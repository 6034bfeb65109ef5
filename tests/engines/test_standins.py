"""Stand-in checkpoints (issue 2): built offline by `dialscore stand-ins build DIR`, seeded and
byte-deterministic, marked as stand-ins, loadable with the ordinary `from_pretrained`."""

from __future__ import annotations

import json

import pytest

from dialscore_server.checkpoints.standins import KINDS, MARKER, build_stand_ins, is_stand_in

CLASSES = {
    "gpt2": ("AutoModelForCausalLM", "GPT2LMHeadModel"),
    "bart": ("AutoModelForSeq2SeqLM", "BartForConditionalGeneration"),
    "blenderbot": ("AutoModelForSeq2SeqLM", "BlenderbotForConditionalGeneration"),
    "nli-contradiction-first": ("AutoModelForSequenceClassification", "RobertaForSequenceClassification"),
    "nli-contradiction-last": ("AutoModelForSequenceClassification", "RobertaForSequenceClassification"),
}


@pytest.fixture(scope="module")
def cli_built(tmp_path_factory):
    """All stand-ins built through the console command, into a fresh folder, with seed 0."""
    from dialscore.cli import main

    out = tmp_path_factory.mktemp("cli-stand-ins") / "si"
    assert main(["stand-ins", "build", str(out)]) == 0
    return out


def test_cli_builds_every_kind(cli_built, capsys):
    assert set(KINDS) == set(CLASSES)
    for kind in KINDS:
        folder = cli_built / kind
        for name in ("config.json", "model.safetensors", MARKER):
            assert (folder / name).is_file(), f"{kind}: {name} missing"
        assert (folder / "tokenizer.json").is_file() and (folder / "tokenizer_config.json").is_file()
    assert not list(cli_built.glob(".*.tmp"))  # nothing half-built left behind


def test_cli_prints_stand_in_warning(tmp_path, capsys):
    from dialscore.cli import main

    # kinds already built (same seed) are kept, so this re-run only prints.
    build_stand_ins(tmp_path, kinds=["gpt2"])
    before = (tmp_path / "gpt2" / "model.safetensors").stat().st_mtime_ns
    main(["stand-ins", "build", str(tmp_path)])
    out = capsys.readouterr().out
    assert out.count("STAND-IN") == len(KINDS)
    assert (tmp_path / "gpt2" / "model.safetensors").stat().st_mtime_ns == before


def test_same_seed_gives_identical_bytes(cli_built, stand_ins):
    """The CLI build and the session fixture's build (two builds, same seed, other RNG state in
    between) hold byte-identical weights and tokenizers."""
    for kind in KINDS:
        for name in ("model.safetensors", "tokenizer.json", "config.json"):
            a, b = (cli_built / kind / name).read_bytes(), (stand_ins / kind / name).read_bytes()
            assert a == b, f"{kind}/{name} differs between two builds with seed 0"


def test_other_seed_gives_other_weights(tmp_path, stand_ins):
    """Controls the determinism test: the comparison does see a change of seed."""
    build_stand_ins(tmp_path, seed=1, kinds=["gpt2"])
    assert ((tmp_path / "gpt2" / "model.safetensors").read_bytes()
            != (stand_ins / "gpt2" / "model.safetensors").read_bytes())
    assert json.loads((tmp_path / "gpt2" / MARKER).read_text())["seed"] == 1


def test_rebuild_with_new_seed_replaces_checkpoint(tmp_path):
    build_stand_ins(tmp_path, seed=0, kinds=["gpt2"])
    first = (tmp_path / "gpt2" / "model.safetensors").read_bytes()
    build_stand_ins(tmp_path, seed=3, kinds=["gpt2"])
    assert (tmp_path / "gpt2" / "model.safetensors").read_bytes() != first
    assert json.loads((tmp_path / "gpt2" / MARKER).read_text())["seed"] == 3


@pytest.mark.parametrize("kind", KINDS)
def test_marker_present(stand_ins, kind):
    marker = json.loads((stand_ins / kind / MARKER).read_text())
    assert marker["stand_in"] is True and marker["kind"] == kind and marker["seed"] == 0
    assert is_stand_in(stand_ins / kind)


def test_is_stand_in_false_without_marker(tmp_path):
    assert not is_stand_in(tmp_path)


@pytest.mark.parametrize("kind", KINDS)
def test_loads_with_from_pretrained(stand_ins, kind):
    import transformers

    auto_name, cls_name = CLASSES[kind]
    model = getattr(transformers, auto_name).from_pretrained(stand_ins / kind)
    tok = transformers.AutoTokenizer.from_pretrained(stand_ins / kind)
    assert type(model).__name__ == cls_name
    assert model.config.vocab_size >= len(tok) - 1
    # Byte-level BPE: any text, emoji included, round-trips without an unknown token.
    text = "café 😀 日本語 ¿qué? 👩\u200d👧"
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.unk_token_id not in ids
    assert tok.decode(ids).strip() == text
    assert max(ids) < model.config.vocab_size


def test_nli_label_orders(stand_ins):
    """Both label orders of the real NLI checkpoints: roberta-large-mnli puts contradiction at 0,
    the ANLI checkpoint at 2; label2id is the inverse of id2label."""
    from transformers import AutoConfig

    first = AutoConfig.from_pretrained(stand_ins / "nli-contradiction-first")
    last = AutoConfig.from_pretrained(stand_ins / "nli-contradiction-last")
    assert first.id2label == {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}
    assert last.id2label == {0: "entailment", 1: "neutral", 2: "contradiction"}
    for cfg in (first, last):
        assert cfg.num_labels == 3
        assert {v: k for k, v in cfg.id2label.items()} == cfg.label2id


def test_stand_in_registry_loads_every_entry_as_stand_in(stand_in_registry):
    from dialscore_server.checkpoints.loading import load_model

    for cfg in stand_in_registry:
        loaded = load_model(cfg)
        assert loaded.stand_in and loaded.device == "cpu"
        # A local path has no hub revision: its revision is the hash of its files.
        assert loaded.resolved_revision.startswith("sha256:") and len(loaded.resolved_revision) == 23


def test_a_changed_local_checkpoint_gets_another_revision(stand_ins, tmp_path):
    """Re-training in place changes the revision (so cached scores are not reused); copying the
    folder elsewhere does not; hidden files (caches, .git) do not count."""
    import shutil

    from dialscore_server.checkpoints.content_hash import folder_revision

    copy = tmp_path / "ckpt"
    shutil.copytree(stand_ins / "nli-contradiction-first", copy)
    original = folder_revision(stand_ins / "nli-contradiction-first")
    assert folder_revision(copy) == original
    (copy / ".cache").mkdir()
    (copy / ".cache" / "x").write_text("y")
    assert folder_revision(copy) == original
    weights = next(p for p in copy.iterdir() if p.suffix in (".safetensors", ".bin"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert folder_revision(copy) != original


def test_marker_detected_even_when_config_does_not_say(stand_in_registry):
    """A local checkpoint with the marker reports stand_in even if its config says otherwise."""
    from dialscore_server.checkpoints.loading import load_model

    cfg = stand_in_registry.get("dialogpt-medium").model_copy(update={"stand_in": False})
    assert load_model(cfg).stand_in is True
