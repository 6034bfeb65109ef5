"""Waiting without racing a clock: for a condition (with a generous limit that only catches a
stuck system), for work running in the background, for answers to requests sent at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx


def wait_until(check: Callable[[], Any], what: str, limit_s: float = 120.0, step_s: float = 0.25) -> Any:
    """Poll ``check()`` until it returns something truthy and return it; fail naming `what` if
    it does not within `limit_s` (a hang guard: e.g. metrics reach the agents about once a
    second, a replica starts in seconds)."""
    deadline = time.monotonic() + limit_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {limit_s:.0f} s")
        time.sleep(step_s)


class InBackground(threading.Thread):
    """``fn()`` in a thread of its own; :meth:`result` waits for it (a hang guard) and returns
    what it returned or raises what it raised."""

    def __init__(self, fn: Callable[[], Any]):
        super().__init__(daemon=True)
        self.fn = fn
        self.value: Any = None
        self.error: BaseException | None = None
        self.seconds: float | None = None
        self.start()

    def run(self) -> None:
        started = time.monotonic()
        try:
            self.value = self.fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test by result()
            self.error = exc
        self.seconds = time.monotonic() - started

    def result(self, limit_s: float) -> Any:
        self.join(limit_s)
        assert not self.is_alive(), f"still running after {limit_s:.0f} s"
        if self.error is not None:
            raise self.error
        return self.value


class Posts:
    """JSON POSTs sent at once, each from a thread of its own, and their answers as they come:
    ``answers[label]`` is the response (or the httpx error) of the body sent under `label`."""

    def __init__(self, url: str, bodies: dict[str, dict[str, Any]], timeout_s: float = 300.0):
        self.labels = list(bodies)
        self.answers: dict[str, httpx.Response | httpx.HTTPError] = {}
        self._changed = threading.Condition()

        def post(label: str, body: dict[str, Any]) -> None:
            try:
                answer: httpx.Response | httpx.HTTPError = httpx.post(url, json=body, timeout=timeout_s)
            except httpx.HTTPError as exc:
                answer = exc
            with self._changed:
                self.answers[label] = answer
                self._changed.notify_all()

        for label, body in bodies.items():
            threading.Thread(target=post, args=(label, body), daemon=True).start()

    def wait_answers(self, n: int, limit_s: float = 120.0) -> dict[str, httpx.Response | httpx.HTTPError]:
        """The answers once at least `n` have come (a copy); fail if they do not within `limit_s`
        (a hang guard)."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.answers) >= n, limit_s):
                raise AssertionError(f"{len(self.answers)} of {len(self.labels)} answers, not {n}, "
                                     f"within {limit_s:.0f} s")
            return dict(self.answers)

    def answer(self, label: str, limit_s: float = 120.0) -> httpx.Response:
        """The response to the body sent under `label`, once it came (a hang guard: `limit_s`);
        an httpx error is raised."""
        with self._changed:
            if not self._changed.wait_for(lambda: label in self.answers, limit_s):
                raise AssertionError(f"no answer to {label} within {limit_s:.0f} s")
            answer = self.answers[label]
        if isinstance(answer, httpx.HTTPError):
            raise answer
        return answer
