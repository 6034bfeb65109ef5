"""Autoscaling across nodes: Serve adds a model replica under load, Ray's (fake) autoscaler adds a
GPU node for it, and both go away after the load. Records the timeline and plots it.

    python -m loadtests.autoscale_cluster [--load-seconds 40] [--idle-seconds 90] [--out runs/autoscale]

A local cluster (tests/cluster/localcluster.py): a head (2 logical CPUs, no GPU) and Ray's fake
autoscaler with one worker type `gpu` (2 CPUs, 1 GPU; min_workers 0, max_workers 2, idle timeout
6 s). The application is the stand-in NLL model with `num_gpus: 1` and Serve autoscaling 1-2
replicas (target 2 ongoing requests, up after 2 s, down after 10 s), one gateway on the head.
Deploying it makes the autoscaler start the first GPU node. Then 8 closed-loop clients send
32-item /v1/nll requests to 127.0.0.1 for --load-seconds, and the script waits up to
--idle-seconds for the second replica and node to go. Every second it records: alive worker
nodes, RUNNING and STARTING model replicas, the gateway's queue length (requests sent to the
model and not answered: ray_dialscore_queue_length summed over gateway replicas), Serve's own
queued requests (ray_serve_deployment_queued_queries) and requests completed.

Writes <out>/timeline.jsonl, <out>/timeline.png and <out>/summary.json (scale-up: load start to
second replica RUNNING and to second node alive; scale-down: load end to replica stopped and to
node gone). Bounded in time; loopback only.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from dialscore_server.checkpoints.standins import build_stand_ins, templated_sentences
from dialscore_server.gateway.embedded import free_port
from loadtests.common import NLL_MODEL, ROOT, parser, write_json
from tests.cluster.localcluster import Autoscaler, LocalCluster
from tests.ray_metrics import sample_sum

MODEL = NLL_MODEL
DEPLOYMENT = f"nll-{MODEL}"
#: Serve autoscaling of the model: short delays so the whole demo fits in about 3 minutes
#: (the production values and why: deployments/cluster.yaml).
AUTOSCALING = {"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 2,
               "upscale_delay_s": 2, "downscale_delay_s": 10, "metrics_interval_s": 1,
               "look_back_period_s": 3}
CLIENTS = 8
ITEMS_PER_REQUEST = 32


def app_args(stand_ins: Path) -> dict[str, Any]:
    """The demo's application: one gateway and the autoscaled stand-in model (see above)."""
    return {"stand_ins": str(stand_ins), "request_timeout_s": 60, "queue_timeout_s": 10,
            "gateway_num_cpus": 0.25,
            "models": [{"name": MODEL, "serving": {
                "num_cpus": 0.5, "num_gpus": 1, "num_threads": 1, "max_ongoing_requests": 16,
                "max_queued_requests": 256, "autoscaling_config": AUTOSCALING}}]}


def sample(cluster: LocalCluster, started: float, done: dict[str, int]) -> dict[str, Any]:
    """One row of the timeline."""
    nodes = cluster.nodes()
    replicas = cluster.replicas().get(DEPLOYMENT, [])
    texts = cluster.metrics()
    return {
        "t": round(time.monotonic() - started, 2),
        "worker_nodes": sum(not n["is_head"] for n in nodes),
        "replicas_running": sum(r["state"] == "RUNNING" for r in replicas),
        "replicas_starting": sum(r["state"] in ("STARTING", "PENDING_MIGRATION") for r in replicas),
        "queue_length": sample_sum(texts, "ray_dialscore_queue_length", model=MODEL),
        "serve_queued": sample_sum(texts, "ray_serve_deployment_queued_queries", deployment=DEPLOYMENT),
        "completed": done["ok"], "errors": done["errors"],
    }


def record_timeline(stand_ins: Path, load_s: float, idle_s: float,
                    on_row: Callable[[dict[str, Any]], object] | None = None,
                    max_load_s: float | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the scenario; return the timeline rows and the summary (times in seconds). With
    `max_load_s`, the load goes on after `load_s` until the second replica is RUNNING (at most
    `max_load_s` in all): on a busy machine its start-up can outlast a fixed load."""
    pool = templated_sentences(500, seed=3)
    body = {"model": MODEL, "items": [{"context": pool[k:k + 4], "target": pool[k + 5]}
                                      for k in range(ITEMS_PER_REQUEST)]}
    rows: list[dict[str, Any]] = []
    marks: dict[str, float] = {}
    done = {"ok": 0, "errors": 0}
    spec = Autoscaler(resources={"CPU": 2, "GPU": 1}, min_workers=0, max_workers=2, idle_timeout_s=6)
    with LocalCluster(head={"num_cpus": 2, "num_gpus": 0}, autoscaler=spec) as cluster:
        started = time.monotonic()
        stop_sampling = threading.Event()

        def sampler():
            while not stop_sampling.is_set():
                t = time.monotonic()
                try:
                    row = sample(cluster, started, done)
                except Exception as exc:  # noqa: BLE001 - a missed sample is a gap, not a failure
                    row = {"t": round(t - started, 2), "error": repr(exc)[:200]}
                rows.append(row)
                if on_row:
                    on_row(row)
                stop_sampling.wait(max(0.0, 1.0 - (time.monotonic() - t)))

        threading.Thread(target=sampler, daemon=True).start()
        # Not blocking: the child process that drives the cluster keeps answering the sampler.
        url = cluster.deploy(app_args(stand_ins), http_port=free_port(), wait=False)
        ready_by = time.monotonic() + 180
        while not (rows and rows[-1].get("replicas_running", 0) >= 1):
            if time.monotonic() > ready_by:
                raise RuntimeError("the model replica did not start within 180 s")
            time.sleep(0.5)
        while httpx.get(f"{url}/readyz", timeout=10).status_code != 200:
            time.sleep(0.5)
        marks["deployed"] = time.monotonic() - started

        def loading(t0: float) -> bool:
            elapsed = time.monotonic() - t0
            if elapsed < load_s:
                return True
            peaked = any(r.get("replicas_running", 0) >= 2 for r in rows)
            return max_load_s is not None and elapsed < max_load_s and not peaked

        async def load():
            t0 = time.monotonic()
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:
                async def worker():
                    while loading(t0):
                        r = await client.post("/v1/nll", json=body)
                        done["ok" if r.status_code == 200 else "errors"] += 1
                await asyncio.gather(*(worker() for _ in range(CLIENTS)))

        marks["load_start"] = time.monotonic() - started
        asyncio.run(load())
        marks["load_end"] = time.monotonic() - started
        deadline = time.monotonic() + idle_s
        while time.monotonic() < deadline:
            last = rows[-1] if rows else {}
            if (last.get("replicas_running") == 1 and last.get("worker_nodes") == 1
                    and last["t"] > marks["load_end"] + 1):
                break
            time.sleep(1)
        stop_sampling.set()
        time.sleep(1.1)
    return rows, summarize(rows, marks)


def first(rows: list[dict[str, Any]], after: float,
          test: Callable[[dict[str, Any]], bool]) -> float | None:
    """The time of the first good row at or after `after` that passes `test` (None: none)."""
    return next((r["t"] for r in rows if "error" not in r and r["t"] >= after and test(r)), None)


def summarize(rows: list[dict[str, Any]], marks: dict[str, float]) -> dict[str, Any]:
    """Scale-up and scale-down times read off the timeline (None: did not happen)."""
    start, end = marks["load_start"], marks["load_end"]
    up_replica = first(rows, start, lambda r: r["replicas_running"] >= 2)
    up_node = first(rows, start, lambda r: r["worker_nodes"] >= 2)
    # Down is counted from the load's end, and only after the peak (under 2 cores the second
    # replica may still be starting when the load ends).
    down_replica = first(rows, max(end, up_replica or end), lambda r: r["replicas_running"] <= 1)
    down_node = first(rows, max(end, up_node or end, down_replica or end), lambda r: r["worker_nodes"] <= 1)

    def since(t, mark):
        return None if t is None else round(t - mark, 1)

    good = [r for r in rows if "error" not in r]
    return {
        "deployed_s": round(marks["deployed"], 1), "load_s": round(end - start, 1),
        "max_worker_nodes": max((r["worker_nodes"] for r in good), default=0),
        "max_replicas": max((r["replicas_running"] for r in good), default=0),
        "max_queue_length": max((r["queue_length"] for r in good), default=0),
        "second_node_after_load_start_s": since(up_node, start),
        "second_replica_running_after_load_start_s": since(up_replica, start),
        "replica_stopped_after_load_end_s": since(down_replica, end),
        "node_gone_after_load_end_s": since(down_node, end),
        "requests_ok": good[-1]["completed"] if good else 0,
        "requests_failed": good[-1]["errors"] if good else 0,
        "marks": {k: round(v, 1) for k, v in marks.items()},
    }


def plot(rows: list[dict[str, Any]], summary: dict[str, Any], path: Path) -> None:
    """The timeline as a PNG at `path` (written whole, then moved into place)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    good = [r for r in rows if "error" not in r]
    t = [r["t"] for r in good]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    top.step(t, [r["worker_nodes"] for r in good], where="post", label="GPU worker nodes (alive)")
    top.step(t, [r["replicas_running"] for r in good], where="post", label="model replicas RUNNING")
    top.step(t, [r["replicas_running"] + r["replicas_starting"] for r in good], where="post",
             linestyle=":", label="model replicas RUNNING + STARTING")
    top.set_ylabel("count")
    top.set_yticks(range(0, 4))
    bottom.plot(t, [r["queue_length"] for r in good], label="gateway queue length (in flight to the model)")
    bottom.plot(t, [r["serve_queued"] for r in good], label="Serve queued requests")
    bottom.set_ylabel("requests")
    bottom.set_xlabel("seconds since the cluster started")
    for ax in (top, bottom):
        ax.axvspan(summary["marks"]["load_start"], summary["marks"]["load_end"], color="0.9",
                   label="load (8 clients)" if ax is top else None)
        ax.legend(loc="upper right", fontsize=8)
    top.set_title("Serve autoscaling 1-2 replicas (num_gpus 1) on Ray's fake autoscaler, 0-2 GPU nodes")
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--load-seconds", type=float, default=40)
    ap.add_argument("--idle-seconds", type=float, default=90)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "autoscale")
    ap.add_argument("--stand-ins", type=Path, default=ROOT / "artifacts" / "stand-ins")
    args = ap.parse_args(argv)

    build_stand_ins(args.stand_ins)
    args.out.mkdir(parents=True, exist_ok=True)
    rows, summary = record_timeline(args.stand_ins, args.load_seconds, args.idle_seconds,
                                    on_row=lambda r: print(json.dumps(r), flush=True))
    (args.out / "timeline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_json(args.out / "summary.json", summary)
    plot(rows, summary, args.out / "timeline.png")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
