"""Reading what model replicas record through ``ray.serve.metrics``, as an operator's Prometheus
scrapes it: from each Ray node's metrics agent. Imports nothing from the test folders, so the
benchmarks (``loadtests``) import it as ``tests.ray_metrics``."""

from __future__ import annotations

import httpx


def replica_metrics() -> list[str]:
    """The Prometheus text of every alive node's Ray metrics agent, in the Ray cluster this process
    is connected to: the series model replicas record (``ray_dialscore_*``) and Serve's own."""
    import ray

    texts = []
    for node in ray.nodes():
        port = node.get("MetricsExportPort")
        if node.get("Alive") and port:
            texts.append(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text)
    return texts


def sample_sum(texts: dict[str, str] | list[str], name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels`, over Prometheus texts
    (a list, or the values of a dict such as per node id): a cluster-wide total."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for text in (texts.values() if isinstance(texts, dict) else texts):
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
    return total
