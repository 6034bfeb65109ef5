"""Client-side durability: `dialscore probe` killed with SIGKILL mid-run (a real subprocess against the
real app) resumes from its output folder with no duplicated or missing rows, no half-written file
and no stale temporary file; report files are only ever replaced whole."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from dialscore.client import DialscoreClient
from dialscore.probes.data import load_dialogues
from dialscore.probes.report import write_outputs
from dialscore.probes.plan import plan_probes
from dialscore.probes.run import SCORES_FILE, ScoreStore
from waiting import wait_until

pytestmark = pytest.mark.serve

#: A hang guard for every wait, not a speed requirement.
HANG_S = 150.0

ROOT = Path(__file__).resolve().parents[2]
from dialscore.probes import SAMPLE_DATA as SAMPLE
REPORT_FILES = ("pairs.csv", "pairs.jsonl", "summary.csv", "report.json", "tables.txt")


def _probe(url: str, out: Path, log: Path) -> subprocess.Popen:
    """`dialscore probe` in a subprocess, its output to `log` (a file: a pipe nobody reads
    while it runs could fill and stall it)."""
    cmd = [sys.executable, "-m", "dialscore.cli", "probe", "--url", url, "--data", str(SAMPLE),
           "--models", "untrained-gpt2", "--settings", "attribution", "--out", str(out),
           "--chunk-size", "8", "--concurrency", "2", "--bootstrap", "50", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    with open(log, "wb") as sink:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


class _GateProxy:
    """A loopback HTTP proxy to the real app that lets exactly ``allow`` scoring requests be
    answered 200 and holds every later one until closed. The probe run can then never finish
    before the test kills it, however fast the machine (on a fast CI runner the whole run once
    completed between two polls of its output file), and it stores exactly ``allow`` chunks: a
    request the app does not answer 200 (a 503 from a busy machine) gives its place back, to
    the client's retry."""

    def __init__(self, upstream: str, allow: int):
        self.release = threading.Event()
        self.taken = 0  # scoring requests forwarded and not answered otherwise than 200
        lock = threading.Lock()
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep the test output quiet
                pass

            def _forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                scoring = self.path.startswith("/v1/nll")
                if scoring:
                    with lock:
                        held = gate.taken >= allow
                        gate.taken += not held
                    if held:
                        gate.release.wait(300)
                        try:
                            self.send_error(503)
                        except OSError:  # the killed client's socket is gone
                            pass
                        return
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() in ("content-type", "authorization", "accept")}
                resp: httpx.Response | None = None
                try:
                    resp = httpx.request(method, upstream + self.path, content=body, headers=headers,
                                         timeout=HANG_S)
                finally:
                    if scoring and (resp is None or resp.status_code != 200):
                        with lock:
                            gate.taken -= 1
                self.send_response(resp.status_code)
                self.send_header("Content-Type", resp.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(resp.content)))
                self.end_headers()
                self.wfile.write(resp.content)

            def do_GET(self) -> None:
                self._forward("GET")

            def do_POST(self) -> None:
                self._forward("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []


def test_sigkill_mid_run_then_resume_scores_every_item_once(served, tmp_path):
    out = tmp_path / "run"
    with DialscoreClient(served.url) as client:
        info = next(m for m in client.models() if m.name == "untrained-gpt2")
    plan = plan_probes(load_dialogues(SAMPLE), [info], ["attribution"], seed=0)
    scores = out / SCORES_FILE

    # 1. Start through a proxy that lets 6 chunks of 8 through and holds the rest; SIGKILL once
    #    all 48 rows are stored whole (the run can store no more: the next requests are held),
    #    with later requests in flight.
    gate = _GateProxy(served.url, allow=6)
    log = tmp_path / "probe.log"
    try:
        proc = _probe(gate.url, out, log)

        def stored_all_it_can() -> bool:
            assert proc.poll() is None, f"the run ended before it could be killed: {_tail(log)}"
            return len(ScoreStore(scores).load()) >= 6 * 8

        wait_until(stored_all_it_can, "the 6 chunks let through stored", HANG_S)
        proc.send_signal(signal.SIGKILL)
        proc.wait(HANG_S)
    finally:
        gate.close()
    stored = ScoreStore(scores).load()
    assert len(stored) == 6 * 8 < len(plan.items), (len(stored), len(plan.items))
    assert not any((out / name).exists() for name in REPORT_FILES), "a report before the scores were complete"

    # 2. Resume: only the missing items are sent; the run completes.
    proc = _probe(served.url, out, log)
    assert proc.wait(timeout=2 * HANG_S) == 0, _tail(log)

    rows = [json.loads(line) for line in _lines(scores) if line.strip().startswith("{") and line.rstrip().endswith("}")]
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == len(plan.items), (len(ids), len(set(ids)), len(plan.items))
    assert set(ids) == set(plan.items)
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["items_reused"] == len(stored)
    assert report["config"]["items_scored_now"] == len(plan.items) - len(stored)
    pairs = [json.loads(line)["pair_id"] for line in _lines(out / "pairs.jsonl")]
    assert len(pairs) == len(set(pairs)) == len(plan.pairs)
    for name in REPORT_FILES:
        assert (out / name).stat().st_size > 0
    assert (out / "corruptions.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob(".*.tmp")), list(out.glob(".*.tmp"))
    print(f"\nSIGKILL resume: killed with {len(stored)}/{len(plan.items)} items stored "
          f"({report['config']['torn_score_lines_ignored']} torn line(s) ignored), resumed and scored "
          f"{len(plan.items) - len(stored)} more; {len(plan.pairs)} pairs, 0 duplicated, 0 missing")


def test_report_files_are_replaced_whole_or_not_at_all(served, tmp_path, monkeypatch):
    """A crash between writing a report file and renaming it over the old one (simulated: the
    rename fails) leaves the old file intact; the next write removes the temporary files."""
    from dialscore.client import DialscoreClient as Client
    from dialscore.probes.run import run_probes

    with Client(served.url) as client:
        report = run_probes(client, load_dialogues(SAMPLE)[:4], ["untrained-gpt2"], ["attribution"],
                            out_dir=tmp_path, progress=False, plots=True, n_boot=20)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != SCORES_FILE}
    assert set(before) >= set(REPORT_FILES) | {"corruptions.png", "models.png"}

    import dialscore.reporting.atomic as report_module

    def crash(src, dst):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(report_module, "_replace", crash)
    report.pairs = report.pairs[:1]  # the new content would differ
    with pytest.raises(OSError):
        write_outputs(report, tmp_path, plots=True)
    monkeypatch.undo()
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name in before}
    assert after == before
    # A SIGKILL leaves its temporary file behind: the next write cleans it up.
    (tmp_path / ".pairs.csv.abc123.tmp").write_text("half a fi")
    write_outputs(report, tmp_path, plots=False)
    assert not list(tmp_path.glob(".*.tmp"))
