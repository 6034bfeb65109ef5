"""What the failure tests share: a probe run in a background thread, a transport that keeps every
answer the client got, and the exactly-once check of the run's output files."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import httpx

from dialscore.client import DialscoreClient, RetryPolicy
from dialscore.probes import SAMPLE_DATA
from dialscore.probes.data import load_dialogues
from dialscore.probes.plan import plan_probes
from dialscore.probes.run import SCORES_FILE
from waiting import InBackground

#: Retries for a run that must outlive a failure: short backoff, Retry-After cut to 3 s, and
#: enough sends (each retried answer during an outage takes 2-6 s) that only an outage of
#: minutes, a stuck system, exhausts them: a hang guard, not a bound on how fast the service
#: recovers.
RETRY = RetryPolicy(max_attempts=40, backoff_base=0.25, backoff_max=2.0, max_retry_after=3.0)


class Answer(NamedTuple):
    """One answer the client got: its status (``"reset"``: the connection failed), the
    service's error type (``x-error-type``, None on a 200 or a proxy's own answer) and its
    Retry-After."""

    status: int | str
    error_type: str | None
    retry_after: str | None


class Answers(httpx.BaseTransport):
    """A transport that keeps every answer to `path`, in order, for the test to check what the
    client met; a transport error (a connection reset by a dying proxy or gateway) is kept as
    ``"reset"`` and re-raised for the client to retry. Several clients may share it: the test
    closes it (:meth:`close_inner`)."""

    def __init__(self, path: str):
        self.inner = httpx.HTTPTransport()
        self.path = path
        self.log: list[Answer] = []
        self._changed = threading.Condition()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = self.inner.handle_request(request)
        except httpx.TransportError:
            self._keep(request, Answer("reset", None, None))
            raise
        self._keep(request, Answer(response.status_code, response.headers.get("x-error-type"),
                                   response.headers.get("retry-after")))
        return response

    def _keep(self, request: httpx.Request, answer: Answer) -> None:
        if request.url.path == self.path:
            with self._changed:
                self.log.append(answer)
                self._changed.notify_all()

    @property
    def statuses(self) -> Counter:
        with self._changed:
            return Counter(a.status for a in self.log)

    def failures(self) -> list[Answer]:
        """Every answer but a 200."""
        with self._changed:
            return [a for a in self.log if a.status != 200]

    def wait_for(self, status: int | str, limit_s: float) -> None:
        """Wait until an answer with `status` came; fail if none does within `limit_s` (a hang
        guard)."""
        with self._changed:
            if not self._changed.wait_for(lambda: any(a.status == status for a in self.log), limit_s):
                seen = Counter(a.status for a in self.log)
                raise AssertionError(f"no {status} within {limit_s:.0f} s: {seen}")

    def close(self) -> None:  # shared by several clients: closed by the test, not by each client
        pass

    def close_inner(self) -> None:
        self.inner.close()


def assert_retryable(answers: list[Answer], proxy_failures: bool = False) -> None:
    """Every failed answer is one the client may retry and says when: a 424 ``model_error`` or a
    503 ``overloaded``, each with a Retry-After of at least a second; with `proxy_failures` also
    what a dying gateway or node leaves to Serve's proxy and the network (a 500 without the
    service's ``x-error-type``, a reset connection)."""
    for a in answers:
        if a.status == 200:
            continue
        if proxy_failures and (a.status == "reset" or (a.status == 500 and a.error_type is None)):
            continue
        assert (a.status, a.error_type) in ((424, "model_error"), (503, "overloaded")), answers
        assert a.retry_after is not None and float(a.retry_after) >= 1, answers


def probe_run(url: str, model: str, out_dir: Path, transport: Answers, token: str | None = None,
              concurrency: int = 2) -> InBackground:
    """The attribution probes of `model` over the shipped sample (chunks of 16 items), run in
    the background by a client with :data:`RETRY` over `transport`."""
    from dialscore.probes.run import run_probes

    def run():
        with DialscoreClient(url, token=token, retry=RETRY, max_concurrency=concurrency,
                             transport=transport) as client:
            return run_probes(client, SAMPLE_DATA, [model], ["attribution"], seed=0,
                              out_dir=out_dir, chunk_size=16, progress=False, plots=False,
                              n_boot=100)

    return InBackground(run)


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
