"""The metrics of a process without Ray (the engines and servings run without it): recorded to
the process's own registry, with no attempt to reach Ray's metrics after the first."""

from __future__ import annotations

import sys

from dialscore_server import metric_recording


def test_a_process_without_ray_records_to_its_registry_only(monkeypatch):
    for name in [m for m in sys.modules if m == "ray" or m.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    metric = metric_recording.Metric("counter", "dialscore_test_without_ray_total", "A test counter.",
                            ["model"])
    metric.labels("m").inc()
    metric.labels("m").inc(2)
    assert not metric._ray_failed  # not an error: a process outside Serve
    assert metric._ray_checked and metric._ray_metric() is None  # looked for once
    recorded = metric_recording.REGISTRY.get_sample_value("dialscore_test_without_ray_total", {"model": "m"})
    assert recorded == 3
