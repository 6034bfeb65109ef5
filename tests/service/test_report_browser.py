"""report.html in a real browser: headless Debian Chromium driven by Playwright, over runs that
went through the real Serve app (the shared `served` app's stand-ins).

The page is opened from disk; the tests apply filters, open drill-downs, compare the numbers
shown with the run's own rows (pairs.jsonl, scores.jsonl, the evaluations' rows), and check that
the page made no request but its own file and logged no console error. Screenshots go to the
test's tmp_path, and also to $DIALSCORE_REPORT_SCREENSHOTS when set (how docs/images/report/
was made).

Nothing downloads a browser: the system Chromium is named by path. Without the `playwright`
package (the server's `test` extra) or the Debian package `chromium`, the tests skip.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from dialscore.cli import main
from dialscore.probes import SAMPLE_DATA
from dialscore.probes.data import dump_dialogues, load_dialogues

pytestmark = pytest.mark.serve

MODELS = ("dialogpt-medium", "bart-base")  # the shared app's causal and seq2seq stand-ins
CLASSIFIER = "roberta-large-mnli"


def cli(*args: str) -> int:
    """`dialscore ARGS` in a thread of its own: Playwright's sync API keeps an event loop
    running in the test's thread, where the sync runners refuse to start one."""
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(main(list(args))))
    worker.start()
    worker.join()
    assert codes, "the command raised (see the thread's traceback above)"
    return codes[0]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip(
        "playwright.sync_api",
        reason="needs the Python package playwright (pip install -e '.[test]')")
    executable = _chromium()
    if executable is None:
        pytest.skip("needs headless Chromium: the Debian package chromium (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, headless=True)
        yield b
        b.close()


class Opened:
    """A page opened on a report file, with every request and console error it made."""

    def __init__(self, browser, path: Path, shots: Path):
        self.url = path.resolve().as_uri()
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.shots = shots
        self.context = browser.new_context(viewport={"width": 1360, "height": 900})
        self.page = self.context.new_page()
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: m.type in ("error", "warning") and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(self.url)
        self.page.wait_for_function("window.dialscoreReportReady === true")

    def shot(self, name: str, locator=None) -> None:
        target = locator if locator is not None else self.page
        target.screenshot(path=str(self.shots / name))
        extra = os.environ.get("DIALSCORE_REPORT_SCREENSHOTS")
        if extra:
            Path(extra).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.shots / name, Path(extra) / name)

    def close(self) -> None:
        self.context.close()
        assert [u for u in self.requests if not u.startswith("data:")] == [self.url], self.requests
        assert self.errors == []


@pytest.fixture(scope="module")
def probe_dir(served, tmp_path_factory) -> Path:
    """A real probe run of both stand-ins on two dialogues, then `probe compare`."""
    base = tmp_path_factory.mktemp("report")
    data = base / "two.jsonl"
    dump_dialogues([d for d in load_dialogues(SAMPLE_DATA) if d.id in ("dd-01", "ed-01")], data)
    out = base / "probe"
    assert cli("probe", "--url", served.url, "--data", str(data), "--models", ",".join(MODELS),
               "--out", str(out), "--no-progress", "--bootstrap", "50") == 0
    assert cli("probe", "compare", str(out), "--models", *MODELS, "--n-boot", "200") == 0
    return out


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_probe_report_filters_and_drills_down_to_the_run_rows(browser, probe_dir, tmp_path):
    pairs = _rows(probe_dir / "pairs.jsonl")
    scores = {r["id"]: r for r in _rows(probe_dir / "scores.jsonl")}
    view = Opened(browser, probe_dir / "report.html", tmp_path)
    page = view.page
    view.shot("probe-summary.png")
    section = page.locator("section#probe")
    assert section.locator(".count").inner_text() == f"({len(pairs)} of {len(pairs)})"

    section.locator("select[data-filter=model]").select_option("bart-base")
    section.locator("select[data-filter=setting]").select_option("attribution")
    chosen = [p for p in pairs if p["model"] == "bart-base" and p["setting"] == "attribution"]
    assert section.locator(".count").inner_text() == f"({len(chosen)} of {len(pairs)})"
    shown = section.locator(".list tbody tr")
    assert shown.count() == min(25, len(chosen))
    # Sorted by ΔNLL, lowest first: the first row is the pair the model got most wrong.
    worst = min(chosen, key=lambda p: p["delta"])
    first = shown.first
    assert first.locator("td[data-key=delta]").inner_text() == f"{worst['delta']:.4f}"
    first.click()
    detail = section.locator(".detail")
    assert detail.locator(".nll-valid").inner_text() == f"{worst['nll_valid']:.4f}"
    assert detail.locator(".nll-corrupted").inner_text() == f"{worst['nll_corrupted']:.4f}"
    assert detail.locator(".delta").inner_text() == f"{worst['delta']:.4f}"
    assert worst["valid_text"] in detail.inner_text() and worst["corrupted_text"] in detail.inner_text()
    # The heat maps: one span per scored token of each explanation, with its NLL.
    for side, key in ((0, "valid_item"), (1, "corrupted_item")):
        stored = scores[worst[key]]
        spans = detail.locator(".side").nth(side).locator(".heat span")
        assert spans.count() == len(stored["tokens"]) == stored["num_tokens"]
        nlls = [float(x) for x in spans.evaluate_all("els => els.map(e => e.dataset.nll)")]
        assert nlls == pytest.approx(stored["token_nlls"], abs=1e-4)
        assert sum(nlls) / len(nlls) == pytest.approx(stored["nll"], abs=1e-3)
    view.shot("probe-drilldown.png", section.locator(".browser"))

    if len(chosen) > 25:
        section.locator("button[data-page=next]").click()
        assert "page 2 of" in section.locator(".pageinfo").inner_text()
    view.close()


def test_compare_page_shows_the_paired_differences(browser, probe_dir, tmp_path):
    doc = json.loads((probe_dir / f"compare-{MODELS[0]}-vs-{MODELS[1]}.json").read_text())
    view = Opened(browser, probe_dir / f"compare-{MODELS[0]}-vs-{MODELS[1]}.html", tmp_path)
    text = view.page.locator("section#compare").inner_text()
    for g in doc["groups"]:
        assert f"{g['difference']:.4f}" in text
    section = view.page.locator("section#compare")
    section.locator("select[data-filter=category]").select_option("complete")
    assert section.locator(".list tbody tr").count() > 0
    assert set(section.locator(".list td[data-key=category]").all_inner_texts()) == {"complete"}
    view.shot("compare.png")
    view.close()


MUTUAL = [
    {"id": "d_1", "answers": "B", "article": "m : did you see the game last night ? f : no , i was working late .",
     "options": ["m : i was at the game too .", "m : you missed a great match then .",
                 "m : i hate working late .", "m : the game is tomorrow ."]},
    {"id": "d_2", "answers": "A", "article": "f : could you pass me the salt ?",
     "options": ["m : sure , here it is .", "m : i do not like salt .", "m : the salt is blue .",
                 "m : pass what ?"]},
]
DECODE = [
    {"record_id": "c1", "turns": [{"turn_id": 0, "agent_id": 0, "text": "i have two dogs at home ."},
                                  {"turn_id": 1, "agent_id": 1, "text": "nice , what are their names ?"},
                                  {"turn_id": 2, "agent_id": 0, "text": "i have never owned a dog ."}],
     "is_contradiction": True, "aggregated_contradiction_indices": [0, 2]},
    {"record_id": "c2", "turns": [{"turn_id": 0, "agent_id": 0, "text": "i love hiking ."},
                                  {"turn_id": 1, "agent_id": 1, "text": "me too ."},
                                  {"turn_id": 2, "agent_id": 0, "text": "we should go together ."}],
     "is_contradiction": False, "aggregated_contradiction_indices": []},
]


def test_evaluation_report_drill_downs(browser, served, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "mutual.jsonl").write_text("".join(json.dumps(r) + "\n" for r in MUTUAL))
    (data / "decode.jsonl").write_text("".join(json.dumps(r) + "\n" for r in DECODE))
    out = tmp_path / "eval"
    assert cli("eval", "mutual", "--url", served.url, "--data", str(data / "mutual.jsonl"),
               "--scorer", "nll", "--model", MODELS[0], "--out", str(out), "--no-progress") == 0
    assert cli("eval", "decode", "--url", served.url, "--data", str(data / "decode.jsonl"),
               "--model", CLASSIFIER, "--out", str(out), "--no-progress") == 0
    mutual_rows = json.loads((out / f"mutual-nll-{MODELS[0]}.json").read_text())
    decode_rows = json.loads((out / "decode.json").read_text())
    view = Opened(browser, out / "report.html", tmp_path)

    section = view.page.locator(f"section#mutual-nll-{MODELS[0]}")
    section.locator("input[data-search]").fill("d_2")
    section.locator(".list tbody tr").first.click()
    recorded = next(r for r in mutual_rows if r["id"] == "d_2")
    for letter in "ABCD":
        option = section.locator(f".detail tr[data-option={letter}]")
        assert option.locator(".score").inner_text() == f"{recorded[f'score_{letter}']:.4f}"
    assert "gold" in section.locator(".detail tr[data-option=A]").inner_text()
    view.shot("mutual-drilldown.png", section.locator(".browser"))

    section = view.page.locator("section#decode")
    section.locator("select[data-filter=set]").select_option("original")
    section.locator("select[data-filter=mode]").select_option("structured")
    section.locator("input[data-search]").fill("c1")
    section.locator(".list tbody tr").first.click()
    recorded = next(r for r in decode_rows if r["id"] == "c1" and r["set"] == "original")
    assert section.locator(".detail li.gold").count() == len(recorded["gold_evidence"]) == 1
    assert section.locator(".detail li.pred").count() == len(recorded["structured_evidence"])
    assert section.locator(".list td[data-key=probability]").first.inner_text() == \
        f"{recorded['structured_probability']:.4f}"
    view.shot("decode-drilldown.png", section.locator(".browser"))
    view.close()
