"""lm-evaluation-harness, unmodified, on a MuTual dev task (loadtests/lm_eval_tasks/mutual_dev, on
../shared/data/mutual/dev.jsonl): its `local-completions` model against the served checkpoint
gives every sample's option log-likelihoods, and the accuracy, of its own `hf` model (HFLM) on
the same checkpoint folder (the gpt2 stand-in re-initialised at std 0.3), to 1e-4.

The first DOCS instances, 4 options each; the window is the stand-in's position table (512
tokens), which about a quarter of them exceed. With token ids (``tokenized_requests``, lm-eval's
default), `local-completions` with ``max_length`` = the window and `hf` with two less keep the
same last tokens, so every sample is equal, those over the window too (docs/ecosystem.md, "Long
contexts"). With text prompts the samples that fit are equal; a cut one is decoded and tokenized
again, which need not give the same ids, so it is not compared. The wall-time comparison is
loadtests/bench_lm_eval_mutual.py's (docs/benchmarks/lm-eval.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve_apps import ONE_THREAD, app_args, deploy_app
from shared_data import shared_file

pytestmark = [pytest.mark.serve, pytest.mark.slow]

MODEL = "dialogpt-medium"
TASK = "mutual_dev"
TASK_YAML = Path(__file__).resolve().parents[2] / "loadtests" / "lm_eval_tasks" / TASK / f"{TASK}.yaml"
TOL = 1e-4
#: The window: the sharp gpt2 stand-in's position table.
WINDOW = 512
#: Instances evaluated (lm-eval's `limit`): 160 requests.
DOCS = 40


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    """A task folder for lm-eval's `include_path`: the repository's task, its data file the
    shared MuTual dev (skip when absent), by absolute path."""
    data = shared_file("data/mutual/dev.jsonl")
    folder = tmp_path_factory.mktemp("lm-eval-tasks")
    (folder / f"{TASK}.yaml").write_text(
        f"include: {TASK_YAML}\ntask: {TASK}\n"
        f"dataset_kwargs:\n  data_files:\n    validation: {data}\n")
    return folder


def _evaluate(lm, tasks: Path) -> dict:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    return simple_evaluate(model=lm, tasks=[TASK], task_manager=TaskManager(include_path=str(tasks)),
                           limit=DOCS, log_samples=True)


def _samples(out: dict) -> dict[int, list[float]]:
    return {s["doc_id"]: [float(r[0]) for r in s["filtered_resps"]] for s in out["samples"][TASK]}


@pytest.fixture(scope="module")
def hf(sharp_stand_ins, tasks) -> dict:
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(sharp_stand_ins["gpt2"]), backend="causal", device="cpu",
              dtype="float32", batch_size=8, max_length=WINDOW - 2)
    return _evaluate(lm, tasks)


@pytest.fixture(scope="module")
def fits(sharp_stand_ins, hf) -> dict[int, bool]:
    """Per doc id: whether each of its requests (context + option, as lm-eval logs them) fits the
    window with the greedy token: at most WINDOW - 1 tokens, so neither side cuts it."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(sharp_stand_ins["gpt2"])
    return {s["doc_id"]: all(len(tok(ctx + cont).input_ids) <= WINDOW - 1
                             for ctx, cont in s["arguments"])
            for s in hf["samples"][TASK]}


@pytest.fixture(scope="module")
def one_model(served, stand_ins, sharp_stand_ins):
    args = app_args(stand_ins, models=[
        {"name": MODEL, "overrides": {"source": str(sharp_stand_ins["gpt2"]), "max_length": WINDOW},
         "serving": ONE_THREAD}])
    with deploy_app(served, "mutual", args) as app:
        yield app


@pytest.mark.parametrize("tokenized_requests", [True, False])
def test_local_completions_matches_hf_on_mutual(tasks, one_model, sharp_stand_ins, hf, fits,
                                                tokenized_requests):
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    api = LocalCompletionsAPI(
        base_url=f"{one_model.url}/v1/completions", model=MODEL, tokenizer=str(sharp_stand_ins["gpt2"]),
        tokenizer_backend="huggingface", tokenized_requests=tokenized_requests, batch_size=16,
        num_concurrent=2, max_retries=1, max_length=WINDOW)
    out = _evaluate(api, tasks)
    got, ref = _samples(out), _samples(hf)
    assert sorted(got) == sorted(ref) == list(range(DOCS))
    assert 0 < sum(not f for f in fits.values()) < DOCS / 2  # most fit, some do not
    compared = [d for d in ref if tokenized_requests or fits[d]]
    for d in compared:
        assert got[d] == pytest.approx(ref[d], abs=TOL), f"doc {d}"
    if len(compared) == DOCS:
        assert out["results"][TASK]["acc,none"] == hf["results"][TASK]["acc,none"]
        assert out["results"][TASK]["acc_norm,none"] == hf["results"][TASK]["acc_norm,none"]
