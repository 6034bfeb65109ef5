"""report.html built from recorded rows, no browser (tests/service/test_report_browser.py opens it
in Chromium): every run writes it, `dialscore report RUN_DIR` rebuilds it from the folder alone,
the rows embedded are the run's rows, nothing in it points outside the page, and a text that
looks like markup stays text."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from contract_fake import ContractFake
from dialscore.cli import main
from dialscore.client import DialscoreClient
from dialscore.evals.runners.decode import arun_decode
from dialscore.evals.runners.mutual import arun_mutual
from dialscore.evals.runners.robustness import arun_robustness
from dialscore.probes import SAMPLE_DATA
from dialscore.probes.data import dump_dialogues, load_dialogues
from dialscore.probes.run import run_probes
from dialscore.reporting.html_page import PAGE_SIZE
from dialscore.reporting.html_runs import write_report_html
from test_eval_runners import DECODE, MUTUAL, ROBUST, _run, _with, fake_service

pytest.importorskip("numpy")  # the probe report's intervals (the `reports` extra)

DATA_BLOCK = re.compile(r'<script type="application/json" id="([^"]+)-data">(.*?)</script>', re.S)


def sections(page: str) -> dict[str, dict]:
    """The item data of every section of a page, by section id, its rows unpacked as objects."""
    out = {}
    for m in DATA_BLOCK.finditer(page):
        spec = json.loads(m.group(2))
        keys, text, texts = spec["keys"], spec["textKeys"], spec["texts"]
        spec["rows"] = [{k: (texts[v] if t and v is not None else v) for k, t, v in zip(keys, text, row)}
                        for row in spec["rows"]]
        out[m.group(1)] = spec
    return out


def assert_self_contained(page: str) -> None:
    without_data = DATA_BLOCK.sub("", page)
    assert not re.search(r'src\s*=\s*"(?!data:)', without_data), "a resource outside the page"
    # Links only to the page's own anchors and to sibling compare pages (followed on click only).
    assert not re.search(r'href\s*=\s*"(?!data:|#|compare-[^"/]+\.html")', without_data)
    assert "@import" not in without_data and "url(" not in without_data
    assert "default-src 'none'" in page  # and the browser is told to fetch nothing


def probe_run(tmp_path, **kw):
    out = tmp_path / "run"
    data = tmp_path / "small.jsonl"
    dump_dialogues([d for d in load_dialogues(SAMPLE_DATA) if d.id.endswith(("-01", "-02"))], data)
    with DialscoreClient("http://fake", transport=ContractFake().transport()) as client:
        run_probes(client, data, ["fake-gpt", "fake-bart"], ["inference", "attribution"], seed=3,
                   out_dir=out, n_boot=20, progress=False, **kw)
    return out


def test_probe_run_writes_a_self_contained_page_of_its_rows(tmp_path):
    out = probe_run(tmp_path, plots=True)
    page = (out / "report.html").read_text(encoding="utf-8")
    assert_self_contained(page)
    assert page.count('src="data:image/png;base64,') == 2  # corruptions.png, models.png inline
    assert "fake/gpt" in page and "0123abcd" in page and "stand-in" in page  # provenance
    probe = sections(page)["probe"]
    pairs = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines()]
    assert len(probe["rows"]) == len(pairs) > PAGE_SIZE
    for row, pair in zip(probe["rows"], pairs):
        for key in ("model", "setting", "dialogue_id", "corruption", "nll_valid", "nll_corrupted",
                    "delta", "correct"):
            assert row[key] == pair[key]
    assert probe["filters"] == ["model", "setting", "dataset", "corruption", "category", "correct"]
    # Each pair's two items are there, with the fake's tokens (one per word, then eos).
    scores = {r["id"]: r for r in map(json.loads, (out / "scores.jsonl").read_text().splitlines())}
    strings, items = probe["lookup"]["strings"], probe["lookup"]["items"]
    for row in probe["rows"]:
        for key in ("valid_item", "corrupted_item"):
            item, stored = items[row[key]], scores[row[key]]
            assert [strings[i] for i in item["k"]] == stored["tokens"] == [*stored["target"].split(), "<eos>"]
            assert item["n"] == [round(x, 4) for x in stored["token_nlls"]]
            context = [strings[i] for i in probe["lookup"]["contexts"][item["c"]]]
            assert context == stored["context"]


def test_report_command_rebuilds_the_page_from_the_folder_alone(tmp_path, capsys):
    out = probe_run(tmp_path, plots=False)
    first = sections((out / "report.html").read_text(encoding="utf-8"))
    moved = tmp_path / "elsewhere"
    shutil.copytree(out, moved)
    (moved / "report.html").unlink()
    (tmp_path / "small.jsonl").unlink()  # the probe data is not needed: scores.jsonl holds the texts
    assert main(["report", str(moved)]) == 0
    assert "report.html" in capsys.readouterr().out
    assert sections((moved / "report.html").read_text(encoding="utf-8")) == first
    assert main(["report", str(tmp_path / "nothing-here")]) == 1
    assert "not the folder of a finished run" in capsys.readouterr().err


def test_without_tokens_the_page_says_so(tmp_path):
    out = probe_run(tmp_path, plots=False, tokens=False)
    row = json.loads((out / "scores.jsonl").read_text().splitlines()[0])
    assert "tokens" not in row
    probe = sections((out / "report.html").read_text(encoding="utf-8"))["probe"]
    assert not any("k" in i for i in probe["lookup"]["items"].values())
    assert "0 with per-token NLLs" in (out / "report.html").read_text(encoding="utf-8")


def test_compare_writes_its_page(tmp_path, capsys):
    out = probe_run(tmp_path, plots=False)
    assert main(["probe", "compare", str(out), "--models", "fake-gpt", "fake-bart", "--n-boot", "50"]) == 0
    page = (out / "compare-fake-gpt-vs-fake-bart.html").read_text(encoding="utf-8")
    assert_self_contained(page)
    rows = sections(page)["compare"]["rows"]
    pairs = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines()]
    assert len(rows) == len(pairs) // 2
    doc = json.loads((out / "compare-fake-gpt-vs-fake-bart.json").read_text())
    for g in doc["groups"]:
        assert f"{g['difference']:.4f}" in page
    assert "compare-fake-gpt-vs-fake-bart.html" in (out / "report.html").read_text(encoding="utf-8")


def test_evaluations_of_one_folder_share_one_page(tmp_path):
    mutual = tmp_path / "mutual.jsonl"
    mutual.write_text("".join(json.dumps(r) + "\n" for r in MUTUAL))
    decode = tmp_path / "decode.jsonl"
    decode.write_text("".join(json.dumps(r) + "\n" for r in DECODE))
    robust = tmp_path / "robust.jsonl"
    robust.write_text("".join(json.dumps(r) + "\n" for r in ROBUST))
    out = tmp_path / "eval"
    service = fake_service()
    _run(_with(service, lambda c: arun_mutual(c, mutual, "nll", "fake-gpt", out, progress=False)))
    _run(_with(service, lambda c: arun_decode(c, decode, out, seed=1, progress=False)))
    _run(_with(service, lambda c: arun_robustness(c, robust, "nll", "fake-gpt", None, 0, out,
                                                  progress=False)))
    page = (out / "report.html").read_text(encoding="utf-8")
    assert_self_contained(page)
    got = sections(page)
    assert set(got) == {"mutual-nll-fake-gpt", "decode", "robustness-nll-fake-gpt"}

    m = got["mutual-nll-fake-gpt"]
    recorded = json.loads((out / "mutual-nll-fake-gpt.json").read_text())
    assert [r["id"] for r in m["rows"]] == [r["id"] for r in recorded]
    first = m["rows"][0]
    assert first["correct"] is True and first["margin"] > 0  # d_1: the gold option ranks first
    assert [o["score"] for o in first["options"]] == [recorded[0][f"score_{x}"] for x in "ABCD"]
    assert m["lookup"]["instances"]["d_1"]["options"][1] == "m : a"

    d = got["decode"]
    assert {r["mode"] for r in d["rows"]} == {"structured", "unstructured"}
    assert d["lookup"]["dialogues"]["original"]["c1"][2] == [2, "0", "i never had dogs ."]
    assert "original" in d["lookup"]["dialogues"]
    tp = next(r for r in d["rows"] if r["id"] == "c1" and r["mode"] == "structured")
    assert tp["gold"] and tp["predicted"] and tp["gold_evidence"] == [0] and tp["evidence"] == [0]

    r = got["robustness-nll-fake-gpt"]
    recorded = json.loads((out / "robustness-nll-fake-gpt.json").read_text())
    assert len(r["rows"]) == len(recorded) and r["sort"] == "delta"

    # The page survives the data files' move: the drill-downs then say the text is missing.
    mutual.unlink()
    decode.unlink()
    write_report_html(out)
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "not found: options shown without their text" in page
    assert sections(page)["mutual-nll-fake-gpt"]["lookup"]["instances"] == {}


def test_markup_in_the_data_stays_text(tmp_path):
    hostile = "</script><script>alert(1)</script><!-- <b>"
    dialogues = load_dialogues(SAMPLE_DATA)[:1]
    d = dialogues[0]
    d.history[0] = hostile  # a history turn, shown in the drill-down
    data = tmp_path / "hostile.jsonl"
    dump_dialogues(dialogues, data)
    out = tmp_path / "run"
    with DialscoreClient("http://fake", transport=ContractFake().transport()) as client:
        run_probes(client, data, ["fake-gpt"], ["attribution"], out_dir=out, n_boot=10,
                   progress=False, plots=False)
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<script>alert(1)" not in page
    probe = sections(page)["probe"]
    assert hostile in probe["lookup"]["strings"]
