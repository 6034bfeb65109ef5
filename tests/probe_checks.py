"""What the failure tests share: a transport that fires a kill at a known point of a probe run,
and the exactly-once check of the run's output files."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import httpx

from dialscore.client import DialscoreClient, RetryPolicy
from dialscore.probes import SAMPLE_DATA
from dialscore.probes.data import load_dialogues
from dialscore.probes.run import SCORES_FILE, plan_probes

#: Retries for a run that must outlive a failure: up to 12 sends, short backoff, Retry-After cut
#: to 3 s (replica replacement takes seconds, node replacement tens of seconds).
RETRY = RetryPolicy(max_attempts=12, backoff_base=0.25, backoff_max=2.0, max_retry_after=3.0)


class KillAfter(httpx.BaseTransport):
    """Counts the answers to `path`; after the `after`-th 200 it calls `kill()` (once, in the
    thread of that request): the kill lands in the middle of the run, at a known point. Transport
    errors (a connection reset by a dying proxy or gateway) are counted under ``"reset"`` and
    re-raised for the client to retry."""

    def __init__(self, path: str, after: int, kill):
        self.inner = httpx.HTTPTransport()
        self.path, self.after, self.kill = path, after, kill
        self.lock = threading.Lock()
        self.ok = 0
        self.statuses: Counter = Counter()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = self.inner.handle_request(request)
        except httpx.TransportError:
            with self.lock:
                self.statuses["reset"] += 1
            raise
        if request.url.path == self.path:
            with self.lock:
                self.statuses[response.status_code] += 1
                self.ok += response.status_code == 200
                fire = self.ok == self.after and response.status_code == 200
            if fire:
                self.kill()
        return response

    def close(self) -> None:  # shared by several clients: closed by the test, not by each client
        pass


def assert_scored_once(out_dir: Path, url: str, model: str, settings: list[str], report,
                       token: str | None = None) -> tuple[int, int]:
    """Every planned item and pair of the run in `out_dir` is in its files exactly once, none
    torn, none extra; returns (pairs, items)."""
    with DialscoreClient(url, token=token) as client:
        info = next(m for m in client.models() if m.name == model)
    plan = plan_probes(load_dialogues(SAMPLE_DATA), [info], settings, seed=0)
    ids = [json.loads(line)["id"] for line in (out_dir / SCORES_FILE).read_text().splitlines()]
    assert len(ids) == len(set(ids)) == len(plan.items), (len(ids), len(set(ids)), len(plan.items))
    assert set(ids) == set(plan.items)
    pairs = [json.loads(line)["pair_id"] for line in (out_dir / "pairs.jsonl").read_text().splitlines()]
    assert len(pairs) == len(set(pairs)) == len(plan.pairs) == len(report.pairs)
    assert set(pairs) == {p.pair_id for p in plan.pairs}
    return len(plan.pairs), len(plan.items)
