"""The model registry (issue 2): the paper's models by hub id, strict typed configs that YAML can
fill, a helpful unknown-name error, and a loader that never enables remote code."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml
from pydantic import ValidationError

from dialscore_server.checkpoints.registry import (
    PAPER_MODELS, STAND_IN_FOR, DialogueFormat, ModelConfig, Registry, UnknownModelError,
    paper_registry, stand_in_registry,
)

PAPER_SOURCES = {
    "dialogpt-medium": ("microsoft/DialoGPT-medium", "causal"),
    "blenderbot-400m": ("facebook/blenderbot-400M-distill", "seq2seq"),
    "bart-base": ("facebook/bart-base", "seq2seq"),
    "bart-large": ("facebook/bart-large", "seq2seq"),
    "topical-gpt2": ("./checkpoints/topical-gpt2", "causal"),
    "roberta-large-mnli": ("roberta-large-mnli", "classifier"),
    "roberta-large-anli": ("ynie/roberta-large-snli_mnli_fever_anli_R1_R2_R3-nli", "classifier"),
}

YAML_MODELS = """
models:
  - name: my-dialogpt
    source: microsoft/DialoGPT-small
    family: causal
    max_length: 1024
    format:
      turn_separator: "{eos}"
      separator_after_last: true
  - name: my-bart
    source: /srv/checkpoints/bart
    revision: v1.0
    family: seq2seq
    max_length: 512
    dtype: bfloat16
    device: cpu
    format: {turn_separator: " </s> ", target_bos: true, source_bos: true, append_eos: false}
"""


def _minimal(**extra):
    return {"name": "m", "source": "org/model", "family": "causal", "max_length": 64,
            "format": {"turn_separator": "{eos}"}, **extra}


# ------------------------------------------------------------------------------ paper entries
def test_paper_entries_by_hub_id():
    reg = paper_registry()
    assert {cfg.name: (cfg.source, cfg.family) for cfg in reg} == PAPER_SOURCES
    for cfg in reg:
        assert cfg.revision == "main" and cfg.dtype == "float32" and cfg.device == "auto"
        assert cfg.stand_in is False
    assert reg.get("blenderbot-400m").max_length == 128
    assert reg.get("dialogpt-medium").max_length == 1024


def test_paper_formats():
    reg = paper_registry()
    dialogpt = reg.get("dialogpt-medium").format
    assert dialogpt.turn_separator == "{eos}" and dialogpt.separator_after_last
    assert dialogpt.join_turns(["a", "b"]) == "a{eos}b{eos}"
    assert dialogpt.join_turns([]) == ""
    blender = reg.get("blenderbot-400m").format
    assert blender.join_turns(["a", "b"]) == "a  b" and not blender.target_bos
    bart = reg.get("bart-base").format
    assert bart.target_bos and bart.source_bos and bart.source_eos
    assert reg.get("topical-gpt2").format.knowledge_position == "before_history"
    assert all(cfg.format.append_eos for cfg in reg if cfg.family != "classifier")
    # No shipped separator writes a space next to a special token (tests/engines/test_layout.py).
    for cfg in reg:
        for sep in (cfg.format.turn_separator, cfg.format.knowledge_separator):
            for special in ("{eos}", "{bos}", "</s>", "<s>", "<|endoftext|>"):
                assert f" {special}" not in sep and f"{special} " not in sep, (cfg.name, sep)
    assert {cfg.format.truncation for cfg in reg} == {"turns"}
    assert not reg.get("roberta-large-mnli").format.append_eos


def test_stand_in_registry_repoints_every_paper_model(tmp_path):
    reg = stand_in_registry(tmp_path)
    assert reg.names() == [m.name for m in PAPER_MODELS]
    for cfg in reg:
        assert cfg.source == str(tmp_path / STAND_IN_FOR[cfg.name])
        assert cfg.stand_in and cfg.device == "cpu"
        assert "STAND-IN" in cfg.description
    assert reg.get("blenderbot-400m").max_length == 128
    assert reg.get("dialogpt-medium").max_length == 512  # capped at the stand-in's positions
    assert stand_in_registry(tmp_path, names=["bart-base"]).names() == ["bart-base"]


# ------------------------------------------------------------------------------ unknown names
def test_unknown_name_suggests_closest():
    reg = paper_registry()
    with pytest.raises(UnknownModelError) as err:
        reg.get("dialogpt-meduim")
    msg = str(err.value)
    assert "Did you mean 'dialogpt-medium'?" in msg
    assert "bart-large" in msg  # the known names are listed
    assert isinstance(err.value, KeyError) and err.value.name == "dialogpt-meduim"
    assert "Did you mean 'blenderbot-400m'" in str(pytest.raises(KeyError, reg.get, "blenderbot").value)


def test_unknown_name_without_close_match_lists_names():
    with pytest.raises(UnknownModelError) as err:
        paper_registry().get("zzzz")
    assert "Did you mean" not in str(err.value) and "dialogpt-medium" in str(err.value)
    assert "zzzz" in str(err.value)


def test_registry_membership():
    reg = paper_registry()
    assert "bart-base" in reg and "nope" not in reg and len(reg) == len(PAPER_MODELS)


# --------------------------------------------------------------------------- YAML validation
def test_yaml_dicts_validate():
    reg = Registry(yaml.safe_load(YAML_MODELS)["models"])
    assert reg.names() == ["my-dialogpt", "my-bart"]
    gpt = reg.get("my-dialogpt")
    assert isinstance(gpt.format, DialogueFormat) and gpt.format.separator_after_last
    assert gpt.revision == "main" and gpt.dtype == "float32" and gpt.format.append_eos
    bart = reg.get("my-bart")
    assert bart.revision == "v1.0" and bart.dtype == "bfloat16" and not bart.format.append_eos
    assert bart.format.target_bos and bart.format.source_bos


@pytest.mark.parametrize("bad", [
    _minimal(extra_key=1),
    _minimal(trust_remote_code=True),          # not a config field at all: never configurable
    _minimal(format={"turn_separator": " ", "turn_seperator": " "}),
    _minimal(family="encoder"),
    _minimal(dtype="float64"),
    _minimal(max_length=4),
    _minimal(source="   "),
    _minimal(name="has space"),
    {k: v for k, v in _minimal().items() if k != "format"},
], ids=["extra-key", "trust_remote_code", "nested-typo", "family", "dtype", "max-length",
        "blank-source", "bad-name", "missing-format"])
def test_invalid_configs_rejected(bad):
    with pytest.raises(ValidationError):
        Registry([bad])


def test_truncation_is_configurable_and_checked():
    assert ModelConfig.model_validate(_minimal()).format.truncation == "turns"
    cfg = ModelConfig.model_validate(_minimal(format={"turn_separator": "{eos}", "truncation": "tokens"}))
    assert cfg.format.truncation == "tokens"
    with pytest.raises(ValidationError, match="truncation"):
        ModelConfig.model_validate(_minimal(format={"turn_separator": "{eos}", "truncation": "words"}))


def test_duplicate_names_rejected():
    with pytest.raises(ValueError, match="duplicate"):
        Registry([_minimal(), _minimal()])


def test_configs_are_frozen():
    cfg = ModelConfig.model_validate(_minimal())
    with pytest.raises(ValidationError):
        cfg.max_length = 10


def test_is_local(tmp_path):
    assert ModelConfig.model_validate(_minimal(source=str(tmp_path))).is_local
    assert not ModelConfig.model_validate(_minimal()).is_local


# ----------------------------------------------------------------- loader: no remote code ever
@pytest.fixture
def captured(monkeypatch):
    """Replace every from_pretrained the loader may call; record (class, source, kwargs)."""
    import transformers

    calls = []

    def fake_for(cls_name):
        def fake(source, **kwargs):
            calls.append((cls_name, str(source), kwargs))
            if cls_name == "AutoTokenizer":
                return SimpleNamespace(eos_token_id=0)
            model = SimpleNamespace(config=SimpleNamespace())
            model.to = lambda device: model
            model.eval = lambda: model
            return model
        return fake

    for cls_name in ("AutoTokenizer", "AutoModelForCausalLM", "AutoModelForSeq2SeqLM",
                     "AutoModelForSequenceClassification"):
        monkeypatch.setattr(getattr(transformers, cls_name), "from_pretrained", fake_for(cls_name))
    return calls


@pytest.mark.parametrize("name", [m.name for m in PAPER_MODELS])
def test_loader_never_trusts_remote_code(captured, name, tmp_path, monkeypatch):
    """Hub ids and local paths, every family: trust_remote_code is never True (and never
    configurable: see test_invalid_configs_rejected)."""
    from dialscore_server.checkpoints.loading import load_model

    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints" / "topical-gpt2").mkdir(parents=True)  # the user-supplied path

    expected_auto = {"causal": "AutoModelForCausalLM", "seq2seq": "AutoModelForSeq2SeqLM",
                     "classifier": "AutoModelForSequenceClassification"}
    for cfg in (paper_registry().get(name), stand_in_registry(tmp_path).get(name)):
        cfg = cfg.model_copy(update={"device": "cpu"})
        if cfg.stand_in:
            (tmp_path / STAND_IN_FOR[name]).mkdir(exist_ok=True)  # make the source a local path
        captured.clear()
        load_model(cfg)
        assert [c[0] for c in captured] == ["AutoTokenizer", expected_auto[cfg.family]]
        for _, source, kwargs in captured:
            assert source == cfg.source
            assert kwargs.get("trust_remote_code", False) is False
            assert ("revision" in kwargs) == (not cfg.is_local)


def test_float16_on_cpu_is_refused(captured):
    from dialscore_server.checkpoints.loading import load_model

    cfg = paper_registry().get("dialogpt-medium").model_copy(update={"dtype": "float16", "device": "cpu"})
    with pytest.raises(ValueError, match="float16"):
        load_model(cfg)
    assert captured == []  # refused before anything was loaded


def test_resolve_device(monkeypatch):
    import torch

    from dialscore_server.checkpoints.loading import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cuda:1") == "cuda:1"
