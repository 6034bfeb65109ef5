"""Calling a deployment handle under deadlines, and what its failures mean.

:class:`Deadlines` is how every typed handle (``NLLHandle``, ``ClassifierHandle``,
``RerankHandle``) calls its deployment: :func:`answer` waits with two deadlines, one for a
replica to accept the request and one for the answer, and :func:`from_ray` maps the errors Ray
raises onto the closed error set, so a dead or saturated model is a prompt 503 or 424, never a
silent wait or a 500."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from dialscore_server import compat
from dialscore_server.contract.errors import ServiceError
from dialscore_server.contract.import_path import imported

logger = logging.getLogger("dialscore.gateway")

#: Waits until a deadline `seconds` from now has passed, by the clock it keeps. Default: the
#: event loop's (``asyncio.sleep``); a test passes one whose deadlines pass when it says.
Timer = Callable[[float], Awaitable[None]]


def timer_at(path: str | None) -> Timer | None:
    """The :data:`Timer` an import path (``package.module:function``, AppArgs.deadline_timer)
    names; None when `path` is None (the event loop's clock). Raises ValueError naming the path
    when it cannot be imported or is not callable."""
    if path is None:
        return None
    timer = imported(path, "deadline_timer")
    if not callable(timer):
        raise ValueError(f"deadline_timer {path!r} is not callable")
    return timer


def cancel(pending) -> None:
    """Best-effort cancellation of a handle call nobody will read (frees its queue slot/replica)."""
    try:
        pending.cancel()
    except Exception:  # noqa: BLE001 - best effort
        logger.debug("could not cancel a request", exc_info=True)


async def answer(pending, timeout: float, queue_timeout: float | None,
                 timer: Timer | None = None):
    """The result of `pending` (a DeploymentResponse).

    A request that no replica accepts within `queue_timeout` (queued behind busy replicas, or
    waiting while a crashed replica is replaced: Serve's router would hold it until one is back)
    is cancelled and answered 503 ``overloaded`` with Retry-After. The whole call is bounded by
    `timeout` (then TimeoutError, which the caller maps to 408), timed by `timer` when given (it
    is then the whole bound, and `queue_timeout` is not used). However the wait ends without
    an answer (a deadline, a Ray error, or the caller cancelled because its client left), the
    call itself is cancelled, so a replica never computes for nobody. Ray errors are raised as
    they are (see :func:`from_ray`).
    """
    if timer is not None:
        return await _answer_by(timer, pending, timeout)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    if queue_timeout is not None and queue_timeout < timeout:
        assigned = compat.replica_accepted(pending)
    else:
        assigned = None
    try:
        if assigned is not None:
            try:
                await asyncio.wait_for(asyncio.shield(assigned), queue_timeout)
            except TimeoutError:
                raise ServiceError(
                    "overloaded", f"no model replica accepted the request within "
                    f"{queue_timeout:g} s (all busy, or restarting after a failure); retry later",
                    retry_after=2.0) from None
        return await asyncio.wait_for(pending, max(0.0, deadline - loop.time()))
    except BaseException:
        # Whatever ends the wait early (a deadline, or the caller cancelled: its client left)
        # cancels the call, wherever it is: queued or computing.
        cancel(pending)
        raise


async def _answer_by(timer: Timer, pending, timeout: float):
    """:func:`answer` with the deadline `timeout` timed by `timer`. A timer that raises has not
    timed the deadline: its error is raised (a failure of the call), never taken for a 408."""
    result = asyncio.ensure_future(pending)
    deadline = asyncio.ensure_future(timer(timeout))
    try:
        await asyncio.wait({result, deadline}, return_when=asyncio.FIRST_COMPLETED)
        if result.done():
            return result.result()
        deadline.result()  # raises the timer's own error
        raise TimeoutError(f"the deadline of {timeout:g} s passed")
    except BaseException:
        result.cancel()
        cancel(pending)
        raise
    finally:
        deadline.cancel()


def from_ray(exc: BaseException) -> ServiceError:
    """Errors raised by a deployment handle: backpressure, dead replicas, timeouts."""
    from ray import exceptions as ray_exc
    from ray.serve.exceptions import (
        BackPressureError, DeploymentUnavailableError, ReplicaUnavailableError, RequestCancelledError,
    )

    if isinstance(exc, BackPressureError):
        return ServiceError("overloaded", "the model's queue is full; retry later", retry_after=1.0)
    if isinstance(exc, (TimeoutError, RequestCancelledError)):
        return ServiceError("timeout", "the request did not finish within the server's deadline")
    if isinstance(exc, (ray_exc.RayActorError, ray_exc.ActorDiedError, ray_exc.ActorUnavailableError,
                        ReplicaUnavailableError)):
        return ServiceError("model_error", "the model replica failed or is restarting; retry",
                            retry_after=2.0)
    if isinstance(exc, DeploymentUnavailableError):
        return ServiceError("model_error", "the model deployment is unavailable (it failed to "
                            "deploy); retry later", retry_after=10.0)
    logger.exception("model deployment failed", exc_info=exc)
    return ServiceError("model_error", f"the model deployment failed: {type(exc).__name__}",
                        retry_after=2.0)


@dataclass(frozen=True)
class Deadlines:
    """The deadlines of every call a caller makes to a model deployment: `request_s` for the
    whole call (then 408), `queue_s` for a replica to accept it (then 503; None: no separate
    queue deadline). With `count_in_flight` (the gateway's handles), calls are counted in
    ``dialscore_queue_length`` under the label each call names. `timer` times `request_s`
    (see :func:`answer`); None: the event loop's clock."""

    request_s: float
    queue_s: float | None = None
    count_in_flight: bool = False
    timer: Timer | None = None

    async def call(self, pending: Any, label: str) -> Any:
        """The answer of `pending` (a DeploymentResponse) under the deadlines; every Ray failure
        raised as its typed :class:`ServiceError`."""
        from dialscore_server import metrics

        if self.count_in_flight:
            metrics.IN_FLIGHT.labels(label).inc()
        try:
            return await answer(pending, self.request_s, self.queue_s, self.timer)
        except ServiceError:
            raise
        except Exception as exc:  # noqa: BLE001 - every Ray failure maps to a typed error
            raise from_ray(exc) from None
        finally:
            if self.count_in_flight:
                metrics.IN_FLIGHT.labels(label).dec()
