"""Reading the metrics of a local cluster while nodes come and go."""

from __future__ import annotations

from typing import Any

from ray_metrics import sample_sum
from waiting import wait_until


def scrape(cluster: Any, limit_s: float = 180.0) -> dict[str, str]:
    """Per node id, the Prometheus text of that node's metrics agent. A node that was just
    killed or removed can still be listed alive for a while, its agent gone: then wait until
    every listed agent answers (a hang guard: `limit_s`)."""
    def every_agent() -> dict[str, str] | None:
        try:
            return cluster.metrics()
        except OSError:  # a listed node's agent refused: the node is going
            return None

    return wait_until(every_agent, "every listed node's metrics agent answering", limit_s)


def total(cluster: Any, name: str, **labels: str) -> float:
    """The cluster-wide sum of the samples named `name` whose labels include `labels`."""
    return sample_sum(scrape(cluster), name, **labels)
