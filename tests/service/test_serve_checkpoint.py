"""`dialscore serve MODEL_OR_PATH`: arguments inferred from a checkpoint's config, and the command
run for real on a stand-in checkpoint folder (its own local Ray, on a free loopback port)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from dialscore_server.gateway.checkpoint_args import checkpoint_app_args

#: How long `dialscore serve` may take to answer /readyz before the test calls it hung.
HANG_GUARD_S = 900.0


def test_family_and_window_come_from_the_checkpoint_config(stand_ins):
    gpt2 = checkpoint_app_args(str(stand_ins / "gpt2"), dtype="float32", device="cpu")
    (cfg, _), = gpt2.model_configs()
    assert (cfg.name, cfg.family, cfg.source, cfg.device, cfg.stand_in) == (
        "gpt2", "causal", str(stand_ins / "gpt2"), "cpu", False)
    assert cfg.max_length == 512  # the checkpoint's n_positions, below the base entry's window
    (bart, _), = checkpoint_app_args(str(stand_ins / "bart"), name="my-bart").model_configs()
    assert (bart.name, bart.family) == ("my-bart", "seq2seq")
    nli = next(p for p in stand_ins.iterdir() if p.name.startswith("nli"))
    with pytest.raises(ValueError, match="classifier"):
        checkpoint_app_args(str(nli))


def test_dialogue_format_comes_from_the_model_type_or_the_like_flag(tmp_path):
    from transformers import BlenderbotSmallConfig, T5Config

    from dialscore_server.checkpoints.registry import paper_registry

    registry = paper_registry()
    BlenderbotSmallConfig(max_position_embeddings=64).save_pretrained(tmp_path / "bb")
    (bb, _), = checkpoint_app_args(str(tmp_path / "bb")).model_configs()
    assert bb.family == "seq2seq" and bb.format == registry.get("blenderbot-400m").format
    assert bb.max_length == 64
    assert bb.format != registry.get("bart-base").format  # the families' default would differ
    T5Config().save_pretrained(tmp_path / "t5")  # no registry entry of its kind: the family's
    (t5, _), = checkpoint_app_args(str(tmp_path / "t5")).model_configs()
    assert t5.format == registry.get("bart-base").format
    (t5_bb, _), = checkpoint_app_args(str(tmp_path / "t5"), like="blenderbot-400m").model_configs()
    assert t5_bb.format == registry.get("blenderbot-400m").format
    with pytest.raises(ValueError, match="causal model"):
        checkpoint_app_args(str(tmp_path / "t5"), like="dialogpt-medium")
    with pytest.raises(ValueError, match="not a registry entry"):
        checkpoint_app_args(str(tmp_path / "t5"), like="blender")


@pytest.mark.slow
def test_dialscore_serve_path_scores_on_loopback(stand_ins):
    from dialscore_server.gateway.embedded import free_port

    port = free_port()
    code = "import sys; from dialscore.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, "serve", str(stand_ins / "gpt2"), "--port", str(port),
                             "--device", "cpu"], env={**os.environ, "HF_HUB_OFFLINE": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        # A hang guard, not a speed test: with both cores saturated and the suite's own Ray
        # session running beside it, starting a second local Ray and its app took over 240 s.
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        else:
            pytest.fail(f"dialscore serve did not become ready in {HANG_GUARD_S:.0f} s")
        models = httpx.get(f"{url}/v1/models", timeout=30).json()
        assert [m["id"] for m in models["data"]] == ["gpt2"]
        r = httpx.post(f"{url}/v1/nll", timeout=60,
                       json={"model": "gpt2", "items": [{"context": ["Hello there."], "target": "Hi!"}]})
        assert r.status_code == 200, r.text
        assert r.json()["results"][0]["nll"] > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
