"""Where a job's requests are scored: each executor takes the requests in scoring order and yields
blocks of output lines as they finish (in no particular order across blocks).

* :class:`InlineExecutor`: one :class:`~dialscore_server.batch.scorer.BatchScorer` in this process
  (no Ray): for small files, debugging, and the tests of everything around the scoring.
* :class:`RayDataExecutor`: Ray Data. The requests become a dataset of rows (scoring order kept,
  cut into blocks of ``batch_size`` rows), ``map_batches`` runs a pool of ``concurrency``
  BatchScorer actors, each holding ``num_cpus``/``num_gpus`` (the job asks for nothing else, so a
  Serve application on the same cluster keeps its replicas and resources), and the driver
  iterates the result with the streaming executor, so blocks come back, and are written, while
  later ones are still being scored. A task lost with its node is retried by Ray Data; its rows
  come back once, from the retry. Nodes alive at the start and gone at the end are reported in
  :attr:`RayDataExecutor.notes` (the job's summary).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dialscore_server.batch.lines import Request
from dialscore_server.batch.models import JobModels


class Executor(Protocol):
    #: What the run met that the summary should say (e.g. nodes lost), filled in by :meth:`run`.
    notes: list[str]

    def run(self, requests: Sequence[Request]) -> Iterator[list[dict[str, Any]]]:
        """Blocks of output lines, one line per request overall."""
        ...


@dataclass
class InlineExecutor:
    """Scores in this process, `batch_size` requests at a time (sent concurrently)."""

    models: JobModels
    batch_size: int = 16
    notes: list[str] = field(default_factory=list)

    def run(self, requests: Sequence[Request]) -> Iterator[list[dict[str, Any]]]:
        if not requests:
            return
        from dialscore_server.batch.scorer import BatchScorer

        scorer = BatchScorer(self.models)
        for start in range(0, len(requests), self.batch_size):
            yield scorer.score(requests[start:start + self.batch_size])


@dataclass
class RayDataExecutor:
    """Scores on Ray Data (see the module docstring). `address`: the cluster's (None: the
    ``RAY_ADDRESS`` environment variable, else a local Ray started for the job and stopped after
    it, with `local_cpus` CPUs when given)."""

    models: JobModels
    address: str | None = None
    concurrency: int = 1
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    batch_size: int = 16
    local_cpus: int | None = None
    notes: list[str] = field(default_factory=list)

    def run(self, requests: Sequence[Request]) -> Iterator[list[dict[str, Any]]]:
        if not requests:
            return
        import json
        import os

        import ray

        from dialscore_server.batch.scorer import BatchScorer

        started = False
        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS")
            kwargs: dict[str, Any] = {"address": address} if address else (
                {"num_cpus": self.local_cpus} if self.local_cpus else {})
            ray.init(log_to_driver=False, include_dashboard=False, **kwargs)
            started = True
        alive_at_start = _alive_nodes(ray)
        # The job's own bar counts lines written; Ray Data's per-operator bars would draw beside it.
        ray.data.DataContext.get_current().enable_progress_bars = False
        try:
            rows = [r.row() for r in requests]
            ds = ray.data.from_items(rows, override_num_blocks=math.ceil(len(rows) / self.batch_size))
            ds = ds.map_batches(
                BatchScorer, fn_constructor_args=(self.models,), batch_size=self.batch_size,
                compute=ray.data.ActorPoolStrategy(size=self.concurrency),
                num_cpus=self.num_cpus, num_gpus=self.num_gpus or None, batch_format="numpy")
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                yield [json.loads(x) for x in batch["output"]]
            lost = alive_at_start - _alive_nodes(ray)
            if lost:
                self.notes.append(
                    f"{len(lost)} node(s) lost during the job ({', '.join(sorted(lost))}); Ray "
                    "Data re-ran the blocks their actors held, each line was written once")
        finally:
            if started:
                ray.shutdown()


def _alive_nodes(ray: Any) -> set[str]:
    """The ids of the cluster's alive nodes (``ray.nodes()``)."""
    return {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
