"""The retry decisions of one client across the attempts of a call, without I/O: after each
attempt's outcome (a response or a transport error), :meth:`Retrier.next_delay` says how long to
wait before sending again, or that the outcome is the answer, or raises the error to give up
with. The sync and async clients' send loops do nothing but send, sleep and ask it.

What is worth another attempt is the :class:`~dialscore.retry_policy.RetryPolicy`'s; how many
retries a client may still spend is its :class:`~dialscore.retry_budget.RetryBudget`'s.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

import httpx

from dialscore.errors import APIConnectionError, APITimeoutError, RetryBudgetExhaustedError
from dialscore.responses import status_error
from dialscore.retry_budget import RetryBudget
from dialscore.retry_policy import RETRYABLE_TRANSPORT_ERRORS, RetryPolicy, parse_retry_after

__all__ = ["BUDGET_SPENT", "Outcome", "Retrier", "Unreachable", "connection_error"]

log = logging.getLogger("dialscore.client")

#: What a retry decision returns when the retry budget forbids the retry.
BUDGET_SPENT = -1.0

#: What one attempt at sending a request gave: a response, or the transport error it raised.
Outcome = httpx.Response | httpx.TransportError


@dataclass
class Unreachable:
    """One call's wait for the service to be reachable: refused connections in a row, and the
    seconds waited after refusals in all (:attr:`RetryPolicy.unreachable_wait_s`)."""

    in_a_row: int = 0
    refused: int = 0
    waited_s: float = 0.0


class Retrier:
    """One client's retry decisions: its `policy`, its `budget` (shared by all its calls and
    threads) and the random source of its jittered delays."""

    def __init__(self, policy: RetryPolicy, budget: RetryBudget,
                 rng: random.Random | None = None):
        self.policy = policy
        self.budget = budget
        self._rng = rng or random.Random()

    def next_delay(self, outcome: Outcome, request: httpx.Request, attempt: int,
                   state: Unreachable) -> tuple[float | None, int]:
        """The delay before the next send (None: `outcome` is the answer) and the attempts
        counted so far: a refused connection does not count while the call waits for the
        service to be reachable (:attr:`RetryPolicy.unreachable_wait_s`)."""
        if isinstance(outcome, httpx.ConnectError) and self.policy.unreachable_wait_s > 0:
            return self._unreachable_delay(outcome, request, state, attempt + 1), attempt
        state.in_a_row = 0
        return self._retry_delay(outcome, request, attempt + 1), attempt + 1

    def _delay_after_response(self, response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before re-sending, None to stop here, or BUDGET_SPENT."""
        if not self.policy.retries(response):
            if response.status_code < 500 and response.status_code not in self.policy.retry_statuses:
                self.budget.on_success()
            return None
        allowed = self.budget.on_failure()
        if attempt >= self.policy.max_attempts:
            return None
        if not allowed:
            log.warning("%s %s -> %d; not retried: the retry budget is spent",
                        response.request.method, response.request.url.path, response.status_code)
            return BUDGET_SPENT
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        if retry_after is not None:
            delay = min(retry_after * (1 + self._rng.uniform(0, self.policy.retry_after_jitter)),
                        self.policy.max_retry_after)
        else:
            delay = self.policy.backoff(attempt, self._rng)
        log.warning("%s %s -> %d; retry %d/%d in %.2f s", response.request.method,
                    response.request.url.path, response.status_code, attempt,
                    self.policy.max_attempts - 1, delay)
        return delay

    def _delay_after_exception(self, exc: httpx.TransportError, request: httpx.Request,
                               attempt: int) -> float | None:
        if (not self.policy.retry_connection_errors
                or not isinstance(exc, RETRYABLE_TRANSPORT_ERRORS)
                or (isinstance(exc, (httpx.ReadTimeout, httpx.WriteTimeout))
                    and not self.policy.retry_read_timeouts)):
            return None
        allowed = self.budget.on_failure()
        if attempt >= self.policy.max_attempts:
            return None
        if not allowed:
            log.warning("%s %s: %s; not retried: the retry budget is spent", request.method,
                        request.url.path, type(exc).__name__)
            return BUDGET_SPENT
        delay = self.policy.backoff(attempt, self._rng)
        log.warning("%s %s: %s (%s); retry %d/%d in %.2f s", request.method, request.url.path,
                    type(exc).__name__, exc, attempt, self.policy.max_attempts - 1, delay)
        return delay

    def _unreachable_delay(self, exc: httpx.ConnectError, request: httpx.Request,
                           state: Unreachable, attempts: int) -> float:
        """Seconds to wait after a refused connection, or raise
        :class:`~dialscore.errors.APIConnectionError` once the call has waited
        ``unreachable_wait_s`` in all (see :class:`RetryPolicy`)."""
        state.in_a_row += 1
        state.refused += 1
        if state.waited_s >= self.policy.unreachable_wait_s:
            raise APIConnectionError(
                f"{request.method} {request.url}: the service is unreachable: {state.refused} "
                f"connections refused over {state.waited_s:.1f} s of waiting (RetryPolicy."
                f"unreachable_wait_s={self.policy.unreachable_wait_s:g}); last: {exc}",
                request=request, attempts=attempts) from exc
        delay = self.policy.unreachable_backoff(state.in_a_row, self._rng)
        state.waited_s += delay
        log.warning("%s %s: connection refused (%s); waiting %.2f s for the service (%.1f of "
                    "%g s)", request.method, request.url.path, exc, delay, state.waited_s,
                    self.policy.unreachable_wait_s)
        return delay

    def _retry_delay(self, outcome: Outcome, request: httpx.Request, attempt: int) -> float | None:
        """Seconds to wait before sending `request` again after attempt number `attempt` gave
        `outcome`; None when `outcome` (then a response) is the answer to return. Raises the error
        to give up with: the connection error after the last try, or
        :class:`~dialscore.errors.RetryBudgetExhaustedError`."""
        if isinstance(outcome, httpx.TransportError):
            delay = self._delay_after_exception(outcome, request, attempt)
            if delay is None:
                raise connection_error(outcome, request, attempt) from outcome
            if delay == BUDGET_SPENT:
                raise self._budget_error(request, attempt) from connection_error(
                    outcome, request, attempt)
            return delay
        delay = self._delay_after_response(outcome, attempt)
        if delay == BUDGET_SPENT:
            raise self._budget_error(request, attempt, outcome) from status_error(
                outcome, attempt)
        return delay

    def _budget_error(self, request: httpx.Request, attempt: int,
                      response: httpx.Response | None = None) -> RetryBudgetExhaustedError:
        what = f"HTTP {response.status_code}" if response is not None else "connection failure"
        return RetryBudgetExhaustedError(
            f"{request.method} {request.url}: {what} not retried: this client's retry budget is "
            f"spent ({self.budget.tokens:.1f} of {self.budget.max_tokens:g} tokens; most "
            "recent attempts failed). The service is failing or shedding load: stop and resume "
            "later.", request=request, response=response, attempts=attempt)


def connection_error(exc: httpx.TransportError, request: httpx.Request,
                     attempt: int) -> APIConnectionError:
    """The error a call gives up with after `exc` on attempt number `attempt`: an
    :class:`~dialscore.errors.APITimeoutError` for a timeout, else an
    :class:`~dialscore.errors.APIConnectionError`."""
    cls = APITimeoutError if isinstance(exc, httpx.TimeoutException) else APIConnectionError
    return cls(f"{request.method} {request.url}: {type(exc).__name__}: {exc}",
               request=request, attempts=attempt)
