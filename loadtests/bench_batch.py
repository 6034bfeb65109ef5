"""A CEDAR probe sweep two ways, in one run, on the same items and one checkpoint: the client's
HTTP probe run (`dialscore probe`, chunks of --chunk-size items sent concurrently to the Serve
application) against the same items as a `dialscore batch` job on Ray Data (`dialscore probe
--as-batch`, the job, `--from-batch-output`), on the same Ray instance.

Rows (items/s: NLL items scored per second; every row scores the same items):

  http          run_probes over HTTP: wall time of the probe run (report writing included, with
                a 10-resample bootstrap; the service already up and warm);
  batch job     the job's own time (its summary: resume read, Ray Data plan, actor start and
                model load, scoring, writing);
  batch wall    the `dialscore batch` process from start to exit (Python and Ray client start
                included), plus reading the output back into the probe run;
  after 1st block  the job's scoring rate once its first block is written (the items of the
                later blocks over the job's time after the first block): what a large sweep
                approaches, with the job's start-up (about the first block's time) paid once.

The service's replica and the job's actor get the same CPUs and torch threads (--threads); they
run one after the other, never together. With ``--cluster`` the job also runs on a local
multi-node cluster (tests/cluster/localcluster.py: a head and two workers with one logical GPU
each, separate raylets on this machine; one actor per worker, ``--num-gpus 1``), once undisturbed
and once with a worker node killed once the output holds a third of the lines: lines lost and
duplicated, and the time against the undisturbed run. (The kill is timed by polling the output
file: fine for a benchmark, never for a test.)

    python -m loadtests.bench_batch                 # this machine
    python -m loadtests.bench_batch --cluster       # and the local multi-node cluster

Checkpoint: the gpt2 stand-in re-initialised N(0, 0.3) under $TMPDIR/dialscore-bench (``small``),
or DialoGPT-medium's shapes (``--model medium``, 1.4 GB). Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from dialscore.probes import SAMPLE_DATA
from dialscore.probes.run import run_probes, write_probe_batch
from dialscore_server.gateway.args import AppArgs
from dialscore_server.gateway.embedded import serve_locally
from loadtests.common import NLL_MODEL, WORK, add_threads, checkpoint, parser


def app_args(ckpt: Path, threads: int) -> AppArgs:
    return AppArgs.model_validate({
        "stand_ins": str(WORK / "stand-ins"), "request_timeout_s": 600, "queue_timeout_s": None,
        "models": [{"name": NLL_MODEL, "overrides": {"source": str(ckpt)},
                    "serving": {"num_cpus": 1, "num_threads": threads,
                                "max_ongoing_requests": 64}}]})


def batch_command(argv: list[str]) -> tuple[dict[str, Any], float, subprocess.Popen]:
    """Start ``dialscore batch ARGV`` (with --summary-json appended); the caller waits."""
    summary = Path(tempfile.mkstemp(suffix=".json")[1])
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "dialscore.cli", "batch", *argv, "--no-progress",
                             "--summary-json", str(summary)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return {"summary": summary}, time.perf_counter(), proc


def finish(state: dict[str, Any], started: float, proc: subprocess.Popen) -> dict[str, Any]:
    _, err = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"dialscore batch failed ({proc.returncode}):\n{err[-3000:]}")
    return {**json.loads(state["summary"].read_text()), "wall_s": wall, "log": err}


def output_check(path: Path, requests: Path) -> dict[str, int]:
    """Lines lost (a request with no output line) and duplicated (a custom_id answered twice)."""
    wanted = [json.loads(x)["custom_id"] for x in requests.read_text().splitlines()]
    got = [json.loads(x)["custom_id"] for x in path.read_text().splitlines()]
    return {"lost": len(set(wanted) - set(got)), "duplicated": len(got) - len(set(got)),
            "failed": sum(json.loads(x)["error"] is not None for x in path.read_text().splitlines())}


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--model", choices=["small", "medium"], default="small")
    p.add_argument("--chunk-size", type=int, default=16, help="items per request / batch line")
    p.add_argument("--batch-size", type=int, default=8, help="batch lines per Ray Data block")
    p.add_argument("--repeat", type=int, default=2, help="runs of each row (the fastest kept)")
    p.add_argument("--cluster", action="store_true", help="also on the local multi-node cluster")
    add_threads(p)
    args = p.parse_args()
    ckpt = checkpoint(args.model)
    app = app_args(ckpt, args.threads)
    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    config = work / "app.yaml"
    config.write_text(yaml.safe_dump({"applications": [
        {"name": "bench", "import_path": "x:y", "args": app.model_dump(mode="json")}]}))
    fast = {"progress": False, "plots": False, "n_boot": 10, "chunk_size": args.chunk_size}
    rows: dict[str, list[float]] = {"http": [], "batch job": [], "batch wall": [],
                                    "after 1st block": []}
    items = 0
    with serve_locally(app, num_cpus=4) as url:
        import ray

        address = ray.get_runtime_context().gcs_address
        run_probes(url, SAMPLE_DATA, [NLL_MODEL], out_dir=work / "warm", **fast)  # warm-up
        for rep in range(args.repeat):
            t0 = time.perf_counter()
            report = run_probes(url, SAMPLE_DATA, [NLL_MODEL], out_dir=work / f"http-{rep}", **fast)
            rows["http"].append(time.perf_counter() - t0)
            items = int(report.config["items_scored_now"])

            req, out = work / f"req-{rep}.jsonl", work / f"out-{rep}.jsonl"
            counts = write_probe_batch(url, SAMPLE_DATA, req, [NLL_MODEL], out_dir=work / f"job-{rep}",
                                       chunk_size=args.chunk_size)
            assert counts["items"] == items, (counts, items)
            t0 = time.perf_counter()
            state, started, proc = batch_command(
                ["-i", str(req), "-o", str(out), "--config", str(config), "--address", address,
                 "--num-cpus", "1", "--batch-size", str(args.batch_size)])
            summary = finish(state, started, proc)
            job = run_probes(url, SAMPLE_DATA, [NLL_MODEL], out_dir=work / f"job-{rep}",
                             batch_output=out, **fast)
            rows["batch wall"].append(time.perf_counter() - t0)
            rows["batch job"].append(summary["seconds"])
            first_items = args.batch_size * args.chunk_size  # the first block's items, at most
            rows["after 1st block"].append((summary["seconds"] - summary["first_block_s"])
                                           * items / max(1, items - first_items))
            worst = max(abs(a.nll_valid - b.nll_valid) for a, b in zip(job.pairs, report.pairs))
            print(f"run {rep}: http {rows['http'][-1]:.1f} s, batch job {summary['seconds']:.1f} s "
                  f"(wall {rows['batch wall'][-1]:.1f} s), max |dNLL| {worst:.2e}", flush=True)
    print(f"\n{items} NLL items ({ckpt.name}, {args.threads} threads), chunks of "
          f"{args.chunk_size}, blocks of {args.batch_size} lines; fastest of {args.repeat}:")
    print("| path | s | items/s | x http |\n|---|---:|---:|---:|")
    http = min(rows["http"])
    for name, secs in rows.items():
        best = min(secs)
        print(f"| {name} | {best:.2f} | {items / best:.1f} | {http / best:.2f} |")
    if args.cluster:
        cluster_rows(work, config, req, args.batch_size)
    return 0


def cluster_rows(work: Path, config: Path, req: Path, batch_size: int) -> None:
    """The job on the local multi-node cluster, undisturbed and with a worker node killed."""
    from tests.cluster.localcluster import LocalCluster

    n = len(req.read_text().splitlines())
    items = sum(len(json.loads(x)["body"]["items"]) for x in req.read_text().splitlines())
    with LocalCluster(head={"num_cpus": 1},
                      workers=[{"num_cpus": 1, "num_gpus": 1}, {"num_cpus": 1, "num_gpus": 1}]) as cl:
        argv = ["-i", str(req), "--config", str(config), "--address", cl.address,
                "--num-cpus", "1", "--num-gpus", "1", "--concurrency", "2",
                "--batch-size", str(batch_size)]
        out = work / "cluster-calm.jsonl"
        calm = finish(*batch_command([*argv, "-o", str(out)]))
        calm_check = output_check(out, req)
        out = work / "cluster-kill.jsonl"
        state, started, proc = batch_command([*argv, "-o", str(out)])
        while proc.poll() is None and (not out.exists()
                                       or len(out.read_text().splitlines()) < n // 3):
            time.sleep(0.2)
        workers = [x["node_id"] for x in cl.nodes() if not x["is_head"]]
        cl.kill_worker(workers[0])
        killed = finish(state, started, proc)
        kill_check = output_check(out, req)
    print(f"\nLocal multi-node cluster (head + 2 workers with 1 logical GPU each), {n} lines, "
          f"{items} items:")
    print("| run | job s | wall s | items/s (wall) | lost | duplicated | failed |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, s, c in (("undisturbed", calm, calm_check), ("worker killed", killed, kill_check)):
        print(f"| {name} | {s['seconds']:.1f} | {s['wall_s']:.1f} | {items / s['wall_s']:.1f} | "
              f"{c['lost']} | {c['duplicated']} | {c['failed']} |")
    print(f"time with the kill / undisturbed: {killed['wall_s'] / calm['wall_s']:.2f}")
    print("the killed run's summary notes:", *killed.get("notes", []), sep="\n  ")


if __name__ == "__main__":
    sys.exit(main())
