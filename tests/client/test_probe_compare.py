"""`dialscore probe compare`: two models of a finished probe run compared from its pairs.jsonl,
through the CLI entry point, on a generated run whose differences are known."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

pytest.importorskip("numpy")

from dialscore.cli import build_parser, main  # noqa: E402
from dialscore.probes.compare import compare_models, read_scored_pairs  # noqa: E402
from dialscore.probes.report import ScoredPair  # noqa: E402


def _pair(model: str, setting: str, dialogue: int, k: int, category: str,
          correct: bool) -> ScoredPair:
    return ScoredPair(pair_id=f"d{dialogue}-{k}", model=model, setting=setting, dataset="DD",
                      dialogue_id=f"d{dialogue}", explanation_index=k, dimension="event",
                      corruption="swapped" if category == "logical" else "shuffle",
                      category=category, valid_text="v", corrupted_text="c", nll_valid=1.0,
                      nll_corrupted=2.0 if correct else 0.5)


def _run_dir(tmp_path):
    """30 dialogues x 2 pairs (one logical, one complete) per setting. Inference: "big" always
    right, "small" wrong on the logical pair of every third dialogue (accuracies 1.0 and 50/60).
    Attribution: both right on the same pairs (no difference)."""
    pairs = []
    for d in range(30):
        for k, category in enumerate(("logical", "complete")):
            pairs.append(_pair("big", "inference", d, k, category, True))
            pairs.append(_pair("small", "inference", d, k, category,
                               not (category == "logical" and d % 3 == 0)))
            for model in ("big", "small"):
                pairs.append(_pair(model, "attribution", d, k, category, d % 2 == 0))
    rows = [{**asdict(p), "delta": p.delta, "correct": p.correct} for p in pairs]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path, pairs


def test_compare_command_prints_and_writes_the_paired_comparison(tmp_path, capsys):
    run_dir, pairs = _run_dir(tmp_path)
    assert read_scored_pairs(run_dir) == pairs
    code = main(["probe", "compare", str(run_dir), "--models", "big", "small", "--seed", "3",
                 "--n-boot", "500"])
    assert code == 0
    out = capsys.readouterr().out
    doc = json.loads((run_dir / "compare-big-vs-small.json").read_text())
    assert (doc["model_a"], doc["model_b"], doc["seed"], doc["n_boot"]) == ("big", "small", 3, 500)
    rows = {(g["setting"], g["category"]): g for g in doc["groups"]}
    assert list(rows) == [("inference", "all"), ("inference", "logical"),
                          ("inference", "complete"), ("attribution", "all"),
                          ("attribution", "logical"), ("attribution", "complete")]
    inf = rows[("inference", "all")]
    assert (inf["n_pairs"], inf["n_dialogues"]) == (60, 30)
    assert inf["accuracy_a"] == 1.0 and inf["accuracy_b"] == pytest.approx(50 / 60)
    assert inf["difference"] == pytest.approx(10 / 60)
    assert 0 < inf["ci_low"] < 10 / 60 < inf["ci_high"] and inf["p_value"] < 0.01
    # Same bootstrap as the library call on the setting's pairs.
    want = compare_models([p for p in pairs if p.setting == "inference"], "big", "small",
                          seed=3, n_boot=500)
    assert (inf["ci_low"], inf["ci_high"], inf["p_value"]) == (want.ci_low, want.ci_high,
                                                               want.p_value)
    assert rows[("inference", "complete")]["difference"] == 0
    att = rows[("attribution", "all")]
    assert att["difference"] == 0 and att["p_value"] == 1.0 and att["accuracy_a"] == 0.5
    # The printed table is the one written beside the run.
    table = (run_dir / "compare-big-vs-small.txt").read_text().strip()
    assert table in out and "+0.167" in table and "A = big, B = small" in table


def test_probe_without_a_subcommand_still_runs_the_probes():
    args = build_parser().parse_args(["probe", "--models", "a,b", "--seed", "2"])
    assert args.func.__name__ == "_probe" and args.models == ["a", "b"] and args.seed == 2


def test_compare_command_errors(tmp_path, capsys):
    assert main(["probe", "compare", str(tmp_path), "--models", "big", "small"]) == 1
    assert "pairs.jsonl not found" in capsys.readouterr().err
    run_dir, _ = _run_dir(tmp_path)
    assert main(["probe", "compare", str(run_dir), "--models", "big", "nope"]) == 1
    assert "'nope' scored no pair in this run; it has big, small" in capsys.readouterr().err
    assert not list(run_dir.glob("compare-*"))
