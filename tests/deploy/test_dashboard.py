"""The Grafana dashboard (deployments/grafana/dialscore.json) queries only series that exist:
ours as Ray exports them (``ray_`` prefix, ``_total`` on counters, ``_bucket/_sum/_count`` on
histograms: the names tests/cluster/test_multinode.py reads from real metrics agents) and Serve's
own; and it has the panels operators asked for."""

from __future__ import annotations

import json
import re
from pathlib import Path

from dialscore_server import metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deployments" / "grafana" / "dialscore.json"
#: Serve's own series the dashboard uses (ray/serve/_private/router.py, deployment_state.py, 2.60).
SERVE_SERIES = {"ray_serve_deployment_queued_queries", "ray_serve_deployment_replica_healthy"}


def exported() -> set[str]:
    names = set(SERVE_SERIES)
    for m in metrics.ALL:
        base = f"ray_{m.ray_name}"
        names |= {base + "_total"} if m.kind == "counter" else (
            {base} if m.kind == "gauge" else {base + s for s in ("_bucket", "_sum", "_count")})
    return names


def test_every_query_names_an_exported_series_and_the_panels_are_there():
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"\b(ray_[a-z_]+)\s*\{", e)}
    assert used and used <= exported(), used - exported()
    titles = " | ".join(p["title"].lower() for p in dash["panels"])
    for topic in ("request rate", "errors", "latency", "batch size", "padding", "tokens", "queue", "replicas",
                  "nobody waited", "abandoned", "priority lanes", "context cache"):
        assert topic in titles, topic
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
