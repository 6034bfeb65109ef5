"""How a metric is recorded: one definition (:class:`Metric`), recorded to two places.

* **Ray's metrics** (``ray.serve.metrics``), when the recording process is a Serve replica: Serve
  adds the ``deployment``, ``replica`` and ``application`` tags and each node's metrics agent
  (port 8080 on KubeRay pods) exports the series of the replicas on that node as
  ``ray_dialscore_*``. Every replica is its own series, so a cluster's totals are sums over
  series (``sum(rate(ray_dialscore_requests_total[1m]))``), correct whatever the number of gateway
  replicas and wherever they run. This is what Prometheus scrapes (deployments/kuberay/
  podmonitor.yaml) and what the Grafana dashboard (deployments/grafana/) reads. The embedded
  default's front door (gateway/front_door.py) runs in the driver, no replica: it records
  :data:`~dialscore_server.metrics.SLOW_CLIENTS` through ``ray.util.metrics`` to the same agent
  (:meth:`Metric.record_to_ray_from_this_process`), as a series without replica tags.
* **This process's own registry** (``prometheus_client``), exported as ``dialscore_*`` by the
  gateway's ``GET /metrics``. It holds only the counts of the gateway replica that answers the
  scrape, so it is the whole story only with one gateway replica (the local default); on a
  cluster it is a debugging view of one replica, never a total.

The service's metrics themselves are defined in :mod:`dialscore_server.metrics`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as _PromCounter
from prometheus_client import Gauge as _PromGauge
from prometheus_client import Histogram as _PromHistogram

REGISTRY = CollectorRegistry(auto_describe=True)

logger = logging.getLogger("dialscore.metrics")

Kind = Literal["counter", "gauge", "histogram"]

#: Seconds between re-recordings of every gauge value to Ray. Ray's metrics agent drops a gauge
#: series that has not been recorded within twice its export interval (20 s at Ray's default
#: 10 s), and a process re-exports a gauge only when it is recorded again: a gauge set once (the
#: queue length while requests are held) would vanish from Prometheus while its value holds.
GAUGE_REFRESH_S = 5.0

#: Every gauge defined, for :func:`refresh_gauges`.
_GAUGES: list[Metric] = []
_refresher: threading.Thread | None = None
_refresher_lock = threading.Lock()


def refresh_gauges() -> None:
    """Record every gauge's current values to Ray again (where it records to Ray), so each
    series stays exported while its value holds."""
    for metric in _GAUGES:
        metric.refresh()


def _refresh_forever() -> None:
    while True:
        time.sleep(GAUGE_REFRESH_S)
        refresh_gauges()


def _ensure_refresher() -> None:
    """Start this process's refresher thread (a daemon calling :func:`refresh_gauges` every
    :data:`GAUGE_REFRESH_S`) unless it runs already."""
    global _refresher
    if _refresher is not None:
        return
    with _refresher_lock:
        if _refresher is None:
            _refresher = threading.Thread(target=_refresh_forever, name="dialscore-gauges",
                                          daemon=True)
            _refresher.start()


def _in_serve_replica() -> bool:
    """Whether this process is a Serve replica; False where Ray is not installed (the engines
    and servings run without it)."""
    try:
        from ray import serve
        from ray.serve.exceptions import RayServeException
    except ImportError:
        return False

    try:
        serve.get_replica_context()
    except RayServeException:
        return False
    return True


class Metric:
    """One metric with fixed label names, recorded to this process's registry and, inside a
    Serve replica, to Ray's metrics. ``labels(*values)`` returns a child with ``inc``, ``dec``,
    ``set`` and ``observe``, as prometheus_client's do.

    `name` is the exported name (``dialscore_requests_total``); Ray's exporter adds the ``ray_``
    prefix, and its counters get ``_total`` appended, so a counter's Ray name drops the suffix.
    """

    def __init__(self, kind: Kind, name: str, doc: str, labels: Sequence[str],
                 buckets: Sequence[float] | None = None):
        self.kind, self.name, self.doc, self.label_names = kind, name, doc, tuple(labels)
        self.buckets = tuple(buckets) if buckets else None
        if kind == "counter":
            self._prom: Any = _PromCounter(name, doc, self.label_names, registry=REGISTRY)
        elif kind == "gauge":
            self._prom = _PromGauge(name, doc, self.label_names, registry=REGISTRY)
            _GAUGES.append(self)
        else:
            self._prom = _PromHistogram(name, doc, self.label_names, registry=REGISTRY,
                                        buckets=self.buckets)
        self._ray: Any = None
        self._ray_checked = False
        self._outside_replica = False
        self._ray_failed = False
        self._lock = threading.Lock()
        self._gauge_values: dict[tuple[str, ...], float] = {}

    @property
    def ray_name(self) -> str:
        return self.name.removesuffix("_total") if self.kind == "counter" else self.name

    def record_to_ray_from_this_process(self, enabled: bool = True) -> None:
        """Record this metric to Ray's metrics (``ray.util.metrics``) from this process although
        it is no Serve replica, or stop (`enabled` False; do so before Ray shuts down). The
        embedded default's driver does this for :data:`~dialscore_server.metrics.SLOW_CLIENTS`,
        which its front door counts (gateway/front_door.py): the series reach the node's metrics
        agent with Ray's own tags and no replica tags."""
        with self._lock:
            self._outside_replica = enabled
            self._ray = None
            self._ray_checked = False

    def _ray_metric(self) -> Any:
        """Ray's metric, created on first use inside a Serve replica, or in a process where
        :meth:`record_to_ray_from_this_process` enabled it (None elsewhere)."""
        if not self._ray_checked:
            with self._lock:
                if not self._ray_checked:
                    in_replica = _in_serve_replica()
                    if in_replica or self._outside_replica:
                        if in_replica:
                            from ray.serve import metrics as serve_metrics
                        else:
                            from ray.util import metrics as serve_metrics  # type: ignore[no-redef]

                        if self.kind == "counter":
                            self._ray = serve_metrics.Counter(self.ray_name, self.doc, self.label_names)
                        elif self.kind == "gauge":
                            self._ray = serve_metrics.Gauge(self.ray_name, self.doc, self.label_names)
                        else:
                            self._ray = serve_metrics.Histogram(self.ray_name, self.doc,
                                                                list(self.buckets or ()),
                                                                self.label_names)
                    self._ray_checked = True
        return self._ray

    def refresh(self) -> None:
        """A gauge: record each of its series' current values to Ray again (nothing where it
        does not record to Ray, and nothing for counters and histograms, which Ray keeps)."""
        if self.kind != "gauge" or self._ray is None:
            return
        with self._lock:
            values = list(self._gauge_values.items())
        for labels, value in values:
            _Child(self, labels)._set_in_ray(value)

    def labels(self, *values: str) -> _Child:
        if len(values) != len(self.label_names):
            raise ValueError(f"{self.name}: expected labels {self.label_names}, got {values}")
        return _Child(self, tuple(str(v) for v in values))


class _Child:
    """One labelled series of a :class:`Metric`."""

    def __init__(self, metric: Metric, values: tuple[str, ...]):
        self.metric, self.values = metric, values
        self.tags = dict(zip(metric.label_names, values))

    def inc(self, amount: float = 1.0) -> None:
        if self.metric.kind == "gauge":
            self._add(amount)
            return
        self.metric._prom.labels(*self.values).inc(amount)
        if amount > 0:  # Ray's counters refuse 0
            self._to_ray(lambda m: m.inc(amount, tags=self.tags))

    def dec(self, amount: float = 1.0) -> None:
        self._add(-amount)

    def set(self, value: float) -> None:
        with self.metric._lock:
            self.metric._gauge_values[self.values] = value
        self._publish(value)

    def observe(self, value: float) -> None:
        self.metric._prom.labels(*self.values).observe(value)
        self._to_ray(lambda m: m.observe(value, tags=self.tags))

    def _add(self, amount: float) -> None:
        # Ray's gauges only `set`: the process keeps the value, as prometheus_client's gauge does.
        with self.metric._lock:
            value = self.metric._gauge_values.get(self.values, 0.0) + amount
            self.metric._gauge_values[self.values] = value
        self._publish(value)

    def _publish(self, value: float) -> None:
        self.metric._prom.labels(*self.values).set(value)
        self._set_in_ray(value)
        if self.metric._ray is not None:
            _ensure_refresher()  # keeps the series exported while the value holds

    def _set_in_ray(self, value: float) -> None:
        self._to_ray(lambda m: m.set(value, tags=self.tags))

    def _to_ray(self, record: Callable[[Any], None]) -> None:
        # A metric must never fail the request it describes: a broken Ray metric is logged
        # (once per metric) and the request goes on.
        try:
            ray_metric = self.metric._ray_metric()
            if ray_metric is not None:
                record(ray_metric)
        except Exception:  # noqa: BLE001
            if not self.metric._ray_failed:
                self.metric._ray_failed = True
                logger.exception("recording %s to Ray's metrics failed", self.metric.name)
