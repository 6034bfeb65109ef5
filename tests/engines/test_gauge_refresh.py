"""Gauges stay exported while their value holds: Ray's metrics agent drops a gauge series not
recorded within twice its export interval, so every gauge that records to Ray is recorded again
by :func:`~dialscore_server.metric_recording.refresh_gauges`, which a daemon thread calls every
``GAUGE_REFRESH_S`` once a gauge has been recorded to Ray. The test calls it itself (no clock),
with a stand-in for Ray's gauge that keeps what it is given."""

from __future__ import annotations

from typing import Any

from dialscore_server import metric_recording


class RayGaugeStandIn:
    """Keeps every ``set(value, tags=...)`` it is given."""

    def __init__(self) -> None:
        self.sets: list[tuple[float, dict[str, Any]]] = []

    def set(self, value: float, tags: dict[str, Any]) -> None:
        self.sets.append((value, dict(tags)))


def test_every_gauge_value_is_recorded_to_ray_again_while_it_holds():
    gauge = metric_recording.Metric("gauge", "dialscore_test_refreshed", "A test gauge.", ["model"])
    ray_gauge = RayGaugeStandIn()
    gauge._ray, gauge._ray_checked = ray_gauge, True  # as inside a Serve replica
    gauge.labels("a").inc()
    gauge.labels("a").inc()
    gauge.labels("b").set(5)
    gauge.labels("a").dec()
    assert ray_gauge.sets == [(1, {"model": "a"}), (2, {"model": "a"}), (5, {"model": "b"}),
                              (1, {"model": "a"})]
    assert metric_recording._refresher is not None and metric_recording._refresher.is_alive()

    ray_gauge.sets.clear()
    metric_recording.refresh_gauges()
    assert sorted(ray_gauge.sets, key=lambda s: s[1]["model"]) == [(1, {"model": "a"}),
                                                                 (5, {"model": "b"})]


def test_counters_and_gauges_outside_ray_are_not_recorded_again():
    gauge = metric_recording.Metric("gauge", "dialscore_test_not_refreshed", "A test gauge.", ["model"])
    gauge._ray_checked = True  # looked for, none: a process outside Serve
    gauge.labels("a").set(3)
    gauge.refresh()  # nothing to record to, and no error
    assert gauge._ray is None and not gauge._ray_failed
    counter = metric_recording.Metric("counter", "dialscore_test_counter_not_refreshed_total", "A test.",
                             ["model"])
    counter._ray, counter._ray_checked = RayGaugeStandIn(), True
    counter.refresh()
    assert counter._ray.sets == []
