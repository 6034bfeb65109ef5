"""Kernel routes are chosen once per machine and read by every process
(services/dialscore_server/nll/engine/kernel_choice.py, route_store.py).

The timer is injected in every process, so no outcome depends on how fast or busy the machine
is: the first chooser's fake timings fix the choice, and a later or concurrent process whose own
fake timer would choose otherwise (or fail) must read the first one instead. The processes are real
subprocesses sharing one ``DIALSCORE_CACHE_DIR``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dialscore_server.nll.engine import kernel_choice
from dialscore_server.nll.engine.route_store import CACHE_DIR_VARIABLE, RouteStore

SHAPES = [kernel_choice.Shape(64, 256, "float32", True, True),
          kernel_choice.Shape(256, 64, "float32", True, False)]

#: A chooser process: argv = timer ("fail": raising if asked to time; "even"/"odd": oneDNN
#: faster for the first shape only / the second only, after a pause that widens any race),
#: thread count, a folder to signal readiness in and wait for "go" (or "-"), the output file.
CHOOSER = """
import json, sys, time
from pathlib import Path
import torch
from dialscore_server.nll.engine import kernel_choice

timer, threads, sync, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
torch.set_num_threads(threads)
shapes = [kernel_choice.Shape(*s) for s in json.loads(sys.argv[5])]
timed = []

def measure(shape, rows=kernel_choice.TIMING_ROWS, repeats=kernel_choice.TIMING_REPEATS):
    if timer == "fail":
        raise AssertionError(f"timed {shape.key()} again")
    timed.append(shape.key())
    time.sleep(0.3)
    onednn = (shape == shapes[0]) == (timer == "even")
    return kernel_choice.Timing(1.0 if onednn else 2.0, 1.5)

kernel_choice.measure = measure
if sync != "-":
    Path(sync, out.name + ".ready").touch()
    deadline = time.time() + 120
    while not Path(sync, "go").exists() and time.time() < deadline:
        time.sleep(0.01)
choices = [kernel_choice.onednn_is_faster(s, 256) for s in shapes]
out.write_text(json.dumps({"choices": choices, "timed": timed}))
"""


def _shape_args() -> str:
    return json.dumps([[s.in_features, s.out_features, s.dtype, s.weight_in_out, s.gelu]
                       for s in SHAPES])


def _chooser(cache: Path, timer: str, out: Path, sync: str = "-",
             threads: int | None = None) -> subprocess.Popen:
    """Start one chooser. The script goes on the command line (``-c``), never through a shared
    file: rewriting such a file for the next child could leave an earlier one reading it empty,
    running nothing and exiting 0."""
    env = {**os.environ, CACHE_DIR_VARIABLE: str(cache)}
    return subprocess.Popen([sys.executable, "-c", CHOOSER, timer,
                             str(threads or torch.get_num_threads()), sync, str(out),
                             _shape_args()], env=env, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen, out: Path) -> dict:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert out.exists(), f"{out.name} was not written; stderr: {err[-2000:]}"
    return json.loads(out.read_text())


def test_a_second_process_reads_the_first_choice_instead_of_timing(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(cache))
    monkeypatch.setattr(kernel_choice, "_READ", {})
    timed = []

    def measure(shape, rows=kernel_choice.TIMING_ROWS, repeats=kernel_choice.TIMING_REPEATS):
        timed.append(shape)
        return kernel_choice.Timing(1.0 if shape == SHAPES[1] else 2.0, 1.5)

    monkeypatch.setattr(kernel_choice, "measure", measure)
    first = [kernel_choice.onednn_is_faster(s, 256) for s in SHAPES]
    assert first == [False, True] and timed == SHAPES

    # A process whose timer fails if asked reads both choices from the file.
    out = tmp_path / "second.json"
    assert _result(_chooser(cache, "fail", out), out) == {"choices": first, "timed": []}
    # At another thread count the choice is another one: that process times its own.
    threads = torch.get_num_threads() + 1
    out = tmp_path / "other-threads.json"
    assert _result(_chooser(cache, "even", out, threads=threads), out) == {
        "choices": [True, False], "timed": [s.key() for s in SHAPES]}
    assert len(RouteStore(cache / kernel_choice.ROUTES_FILE).read()[kernel_choice.machine()]) == 4


def test_concurrent_choosers_agree(tmp_path):
    """Four processes ask at the same moment, each with a timer that would choose by its own
    parity: one of them times each shape, under the lock; all four take its choices."""
    cache, sync = tmp_path / "cache", tmp_path / "sync"
    sync.mkdir()
    outs = [tmp_path / f"chooser-{k}.json" for k in range(4)]
    procs = [_chooser(cache, "even" if k % 2 == 0 else "odd", out, sync=str(sync))
             for k, out in enumerate(outs)]
    deadline = time.time() + 240
    while len(list(sync.glob("*.ready"))) < len(procs) and time.time() < deadline:
        time.sleep(0.05)
    (sync / "go").touch()
    results = [_result(p, out) for p, out in zip(procs, outs)]
    assert len({tuple(r["choices"]) for r in results}) == 1, results
    timed = [key for r in results for key in r["timed"]]
    assert sorted(timed) == sorted(s.key() for s in SHAPES), results


def test_an_unreadable_file_is_replaced_and_an_unwritable_folder_routes_nothing(tmp_path,
                                                                              monkeypatch):
    monkeypatch.setattr(kernel_choice, "_READ", {})
    monkeypatch.setattr(kernel_choice, "measure",
                        lambda shape, rows=128, repeats=3: kernel_choice.Timing(1.0, 2.0))
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / kernel_choice.ROUTES_FILE).write_text("{not json")
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(cache))
    assert kernel_choice.onednn_is_faster(SHAPES[0])
    assert list(kernel_choice.recorded_routes().values()) == [kernel_choice.Timing(1.0, 2.0)]

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv(CACHE_DIR_VARIABLE, str(blocked / "cache"))  # its parent is a file
    assert not kernel_choice.onednn_is_faster(SHAPES[0])
    assert kernel_choice.recorded_routes() == {}


def test_an_entry_once_written_never_changes(tmp_path):
    store = RouteStore(tmp_path / "routes.json")
    assert store.get_or_create("m", "e", lambda: {"v": 1}) == {"v": 1}
    assert store.get_or_create("m", "e", lambda: pytest.fail("created twice")) == {"v": 1}
    assert store.get_or_create("m", "f", lambda: {"v": 2}) == {"v": 2}
    assert store.read() == {"m": {"e": {"v": 1}, "f": {"v": 2}}}
    with pytest.raises(ZeroDivisionError):
        store.get_or_create("m", "g", lambda: 1 / 0)
    assert "g" not in store.read()["m"]
