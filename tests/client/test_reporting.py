"""The reporting kit: the atomic writer's guarantees, the table renderer, the run envelope, and
the envelope shared by the probe and evaluation reports."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
import sys
from importlib.metadata import version

import pytest

from dialscore.client import AsyncDialscoreClient, DialscoreClient
from dialscore.reporting import atomic
from dialscore.reporting.atomic import atomic_write_bytes, atomic_write_text, remove_stale_temporaries
from dialscore.reporting.envelope import (
    RunEnvelope, data_checksum, model_provenance, write_run_report,
)
from dialscore.reporting.rows import write_json
from dialscore.reporting.tables import format_table, render_grid
from contract_fake import FAKE_CARDS, ContractFake

# --- the atomic writer ---------------------------------------------------------------------------


def test_atomic_write_creates_folders_and_a_shared_file(tmp_path):
    target = tmp_path / "a" / "b" / "out.txt"
    assert atomic_write_text(target, "héllo\r\nworld\n") == target
    assert target.read_bytes() == "héllo\r\nworld\n".encode()  # newlines written as given
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]


def test_a_crash_before_the_rename_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = atomic_write_bytes(tmp_path / "report.json", b"old")
    seen: list[bytes] = []

    def crash(src, dst):
        seen.append(open(src, "rb").read())  # the new content was complete in the temporary
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(atomic, "_replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        atomic_write_bytes(target, b"new")
    assert seen == [b"new"]
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_the_temporary_is_synced_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append("fsync-folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync-file")
        real_fsync(fd)

    def replace(src, dst):
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(atomic, "_replace", replace)
    atomic_write_text(tmp_path / "x.txt", "x")
    expected = ["fsync-file", "replace"] + (["fsync-folder"] if sys.platform != "win32" else [])
    assert events == expected


def test_stale_temporaries_of_a_killed_write_are_removed(tmp_path):
    # What a process killed between writing its temporary and renaming it leaves behind.
    stale = [tmp_path / ".pairs.csv.k1ll3d.tmp", tmp_path / ".pairs.csv.abc123.tmp"]
    other = tmp_path / ".summary.csv.zzz.tmp"
    for path in [*stale, other]:
        path.write_text("half a fi")
    atomic_write_text(tmp_path / "pairs.csv", "a,b\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".summary.csv.zzz.tmp", "pairs.csv"]
    assert remove_stale_temporaries(tmp_path, ["summary.csv", "absent.png"]) == [other]
    assert [p.name for p in tmp_path.iterdir()] == ["pairs.csv"]
    assert remove_stale_temporaries(tmp_path / "no-such-folder", ["pairs.csv"]) == []


def test_names_with_glob_characters_are_matched_literally(tmp_path):
    bystander = tmp_path / ".a.txt.x.tmp"  # what ".[ab].txt.*.tmp" would match as a pattern
    bystander.write_text("another file's temporary")
    atomic_write_text(tmp_path / "[ab].txt", "x")
    assert bystander.exists()


# --- tables --------------------------------------------------------------------------------------


def test_render_grid_aligns_columns_and_their_headers():
    text = render_grid([["model", "n", "acc"], ["m", "12", "0.5"], ["longer", "3", "0.25"]],
                       right={1, 2})
    assert text.splitlines() == ["model    n   acc",
                                 "------  --  ----",
                                 "m       12   0.5",
                                 "longer   3  0.25"]


def test_render_grid_with_two_header_rows_and_no_trailing_spaces():
    text = render_grid([["model", "DailyDialog", ""], ["", "logical", "complete"],
                        ["m", "0.50 / +0.10", ""]], header_rows=2)
    lines = text.splitlines()
    assert lines[2] == "-----  ------------  --------" and len(lines) == 4
    assert all(line == line.rstrip() for line in lines)


def test_format_table_right_aligns_numbers_and_formats_cells():
    table = format_table([{"variant": "jumbled", "mean": -3.21, "n": 200, "ok": True},
                          {"variant": "reversed", "mean": float("nan"), "n": None, "ok": False}],
                         title="t")
    assert table.splitlines() == ["t",
                                  "variant      mean    n  ok",
                                  "--------  -------  ---  ---",
                                  "jumbled   -3.2100  200  yes",
                                  "reversed      nan    -  no"]


# --- the run envelope ----------------------------------------------------------------------------


def test_data_checksum_of_a_file_and_of_a_folder(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.txt").write_bytes(b"2")
    (tmp_path / "d" / "a.txt").write_bytes(b"1")
    assert data_checksum(tmp_path / "d" / "a.txt") == hashlib.sha256(b"1").hexdigest()
    assert data_checksum(tmp_path / "d") == hashlib.sha256(b"a.txt\x001b.txt\x002").hexdigest()


def test_model_provenance_from_the_cards():
    served = {c.name: c for c in FAKE_CARDS}
    prov = model_provenance(served, ["fake-gpt", None, "gone", "fake-gpt"])
    assert list(prov) == ["fake-gpt", "gone"]
    assert prov["fake-gpt"] == FAKE_CARDS[0].provenance()
    assert prov["gone"] == {"name": "gone", "reported": False}


def test_envelope_records_configuration_timings_files_and_version(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("{}\n")
    env = RunEnvelope(run="mutual", config={**RunEnvelope.data_config(data), "seed": 3})
    assert env.config["data_sha256"] == hashlib.sha256(b"{}\n").hexdigest()
    assert RunEnvelope.data_config(None) == {"data": "<in memory>", "data_sha256": None}
    env.finish({"csv": tmp_path / "x.csv"})
    assert env.elapsed_s is not None and env.elapsed_s >= 0 and env.finished_at >= env.started_at
    assert env.files == {"csv": str(tmp_path / "x.csv")}
    assert env.client_version == version("dialscore")
    head = env.to_json()
    assert list(head) == ["run", "client_version", "config", "models", "started_at",
                          "finished_at", "elapsed_s", "files"]
    assert env.report({"metrics": 1}) == {**head, "metrics": 1}
    with pytest.raises(ValueError, match="config"):
        env.report({"config": {}})


def test_write_run_report_writes_the_table_and_the_report_last(tmp_path):
    env = RunEnvelope(run="decode", config={"seed": 0})
    printed: list[str] = []
    rows = write_json(tmp_path / "rows.json", [{"a": 1}])
    files = write_run_report(env, {"metrics": {"accuracy": float("nan")}}, table="T\n",
                             table_path=tmp_path / "decode.txt",
                             report_path=tmp_path / "decode.report.json",
                             files={"rows": rows}, echo=printed.append)
    assert list(files) == ["rows", "table", "report"]
    assert (tmp_path / "decode.txt").read_text() == "T\n"
    saved = json.loads((tmp_path / "decode.report.json").read_text())
    assert saved["run"] == "decode" and saved["metrics"] == {"accuracy": None}
    assert saved["files"] == {k: str(v) for k, v in files.items()}
    assert printed[0] == "T" and "decode.report.json" in printed[1]


def test_probe_and_evaluation_reports_open_with_the_same_envelope(tmp_path):
    from dialscore.evals.runners.mutual import arun_mutual
    from dialscore.probes import SAMPLE_DATA
    from dialscore.probes.run import run_probes

    with DialscoreClient("http://fake", transport=ContractFake().transport()) as client:
        run_probes(client, SAMPLE_DATA, "fake-gpt", "attribution", out_dir=tmp_path / "probe",
                   progress=False, plots=False, n_boot=20)
    mutual = tmp_path / "mutual.jsonl"
    mutual.write_text(json.dumps({"id": "d_1", "answers": "A", "article": "m : hi . f : hello .",
                                  "options": ["m : a", "m : b", "m : c", "m : d"]}) + "\n")

    async def go():
        async with AsyncDialscoreClient("http://fake", transport=ContractFake().transport()) as client:
            await arun_mutual(client, mutual, "nll", "fake-gpt", tmp_path / "eval", progress=False)

    asyncio.run(go())
    probe = json.loads((tmp_path / "probe" / "report.json").read_text())
    evaluation = json.loads((tmp_path / "eval" / "mutual-nll-fake-gpt.report.json").read_text())
    head = list(RunEnvelope(run="x").to_json())
    for report, run, data in ((probe, "probe", SAMPLE_DATA), (evaluation, "mutual", mutual)):
        assert list(report)[:len(head)] == head
        assert report["run"] == run and report["client_version"] == version("dialscore")
        assert report["config"]["data"] == str(data)
        assert report["config"]["data_sha256"] == data_checksum(data)
        assert report["models"]["fake-gpt"]["revision"] == "0123abcd"
        assert report["files"]["report"].endswith("report.json")
        assert report["elapsed_s"] >= 0
