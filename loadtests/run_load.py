"""`make loadtest` (``python -m loadtests.run_load``): Locust, headless, against the local service
on stand-ins (loopback only).

Starts the app from deployments/local.yaml on a free port, then for each scenario steps the number
of closed-loop users up (1, 2, 4, ...) for --seconds each, reading Locust's CSV stats, until p99
latency crosses 1 s or --max-users is reached. Prints and writes (runs/loadtest/) throughput and
p50/p95/p99 per step, and the request rate at which p99 crossed 1 s.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from typing import Any

from dialscore_server.gateway.embedded import app_args_from_yaml
from loadtests.common import ROOT, parser, serve_app, write_json

#: The Locust scenarios (Locust loads the file itself, in its own process).
LOCUSTFILE = Path(__file__).with_name("locustfile.py")


def locust_step(url: str, user_class: str, users: int, seconds: int, out: Path) -> dict[str, Any]:
    """One Locust run of `users` closed-loop `user_class` users for `seconds` against `url`:
    its aggregated request count, failures, requests/s and p50/p95/p99 latency (s)."""
    prefix = out / f"{user_class}-{users}"
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), user_class,
           "--headless", "-u", str(users), "-r", str(users), "--run-time", f"{seconds}s",
           "--host", url, "--csv", str(prefix), "--only-summary", "--stop-timeout", "30"]
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   cwd=ROOT, timeout=seconds + 120)
    with open(f"{prefix}_stats.csv", newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["Name"] == "Aggregated")
    return {"users": users, "requests": int(row["Request Count"]), "failures": int(row["Failure Count"]),
            "rps": float(row["Requests/s"]), "p50_s": float(row["50%"]) / 1000,
            "p95_s": float(row["95%"]) / 1000, "p99_s": float(row["99%"]) / 1000}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--seconds", type=int, default=20, help="duration of each step")
    ap.add_argument("--max-users", type=int, default=256,
                    help="stop doubling users here (default 256: enough for p99 to cross 1 s on 2 cores)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "loadtest"))
    args = ap.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    with serve_app(app_args_from_yaml(), name="dialscore", num_cpus=None) as url:
        for scenario in ("ProbeUser", "ChatbotUser"):
            steps, crossed = [], None
            users = 1
            while users <= args.max_users:
                step = locust_step(url, scenario, users, args.seconds, out)
                steps.append(step)
                print(f"{scenario:12s} users={users:3d} rps={step['rps']:7.2f} p50={step['p50_s']:.3f}s "
                      f"p95={step['p95_s']:.3f}s p99={step['p99_s']:.3f}s failures={step['failures']}",
                      flush=True)
                if step["p99_s"] > 1.0:
                    crossed = step["rps"]
                    break
                users *= 2
            results[scenario] = {"steps": steps, "rps_at_p99_over_1s": crossed,
                                 "max_rps": max(s["rps"] for s in steps)}
    write_json(out / "results.json", results)
    for scenario, r in results.items():
        where = (f"{r['rps_at_p99_over_1s']:.2f} req/s" if r["rps_at_p99_over_1s"] is not None
                 else f"not reached up to {args.max_users} users")
        print(f"{scenario}: max throughput {r['max_rps']:.2f} req/s; p99 crosses 1 s at {where}")
    print(f"results in {out}/results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
