"""A job killed mid-way (SIGKILL of its process, at a line count the test chooses through the
job's test hook) resumes from its output file: every custom_id answered exactly once overall, the
lines answered before the kill not sent again, a torn last line cut off."""

from __future__ import annotations

import json
import signal

from batch_kit import FAKE_ARGS, nll_line, read_output, run_batch_command, write_config, write_lines
from dialscore_server.batch.job import KILL_AFTER_ENV

N = 24
KILL_AFTER = 8  # lines; blocks are 4 lines, so the kill comes right after the second block


def test_killed_job_resumes_scoring_each_custom_id_once(tmp_path):
    lines = [nll_line(f"id-{i}", [f"context {i % 3}"], f"target number {i}") for i in range(N)]
    lines.insert(5, "torn {")  # a bad line among them: answered once too
    src = write_lines(tmp_path / "in.jsonl", lines)
    config = write_config(tmp_path / "fake.yaml", FAKE_ARGS)
    out = tmp_path / "out.jsonl"
    argv = ["-i", str(src), "-o", str(out), "--config", str(config), "--executor", "inline",
            "--batch-size", "4", "--no-progress", "--summary-json", str(tmp_path / "s.json")]

    killed = run_batch_command(argv, env={KILL_AFTER_ENV: str(KILL_AFTER)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    first = read_output(out)
    assert KILL_AFTER <= len(first) < N + 1
    with out.open("a") as f:  # the kill also tore a line being written
        f.write('{"id": "batch-torn", "custom_id": "id-')

    resumed = run_batch_command(argv)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["resumed"] == len(first) and summary["torn_bytes"] > 0
    assert summary["done"] + summary["failed"] == N + 1 - len(first)

    final = read_output(out)
    assert final[:len(first)] == first  # appended to, never rewritten
    ids = [r["custom_id"] for r in final]
    assert sorted(i for i in ids if i) == sorted(f"id-{i}" for i in range(N))
    assert sorted(r["line"] for r in final) == list(range(1, N + 2))
    assert all(r["error"] is None for r in final if r["custom_id"])

    again = run_batch_command(argv)  # a finished job: nothing left to score
    assert again.returncode == 0 and read_output(out) == final
    assert json.loads((tmp_path / "s.json").read_text())["resumed"] == N + 1
