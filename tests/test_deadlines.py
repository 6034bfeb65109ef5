"""Deadlines timed by an injected timer (contract/deadline.py: ``answer`` with `timer`,
AppArgs.deadline_timer): the answer wins when it comes first; when the timer returns first the
call is cancelled and the wait raises TimeoutError (408). No Ray, no wall clock: the test
decides which comes first."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from dialscore_server.contract.deadline import Deadlines, answer, timer_at
from dialscore_server.contract.errors import ServiceError
from dialscore_server.gateway.args import AppArgs


class FakeResponse:
    """A DeploymentResponse stand-in: awaiting it waits for :attr:`result`; :meth:`cancel` is
    recorded."""

    def __init__(self) -> None:
        self.result: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.cancelled = False

    def __await__(self):
        return self.result.__await__()

    def cancel(self) -> None:
        self.cancelled = True


class DrivenTimer:
    """A timer whose deadlines pass when the test calls :meth:`pass_now`."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self.passed = asyncio.Event()
        self.abandoned = 0

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        try:
            await self.passed.wait()
        except asyncio.CancelledError:
            self.abandoned += 1
            raise

    def pass_now(self) -> None:
        self.passed.set()


def test_an_answer_before_the_deadline_is_returned_and_the_timer_abandoned():
    async def go():
        timer, pending = DrivenTimer(), FakeResponse()
        call = asyncio.ensure_future(answer(pending, 30.0, 5.0, timer))
        await asyncio.sleep(0)
        pending.result.set_result("scored")
        got = await call
        await asyncio.sleep(0)
        return got, timer.asked, timer.abandoned, pending.cancelled

    assert asyncio.run(go()) == ("scored", [30.0], 1, False)


def test_a_deadline_that_passes_first_cancels_the_call_and_is_a_timeout():
    async def go():
        timer, pending = DrivenTimer(), FakeResponse()
        call = asyncio.ensure_future(Deadlines(30.0, 5.0, timer=timer).call(pending, "m"))
        await asyncio.sleep(0)
        timer.pass_now()
        with pytest.raises(ServiceError) as raised:
            await call
        return raised.value, pending.cancelled

    error, cancelled = asyncio.run(go())
    assert cancelled and error.type == "timeout"


def test_a_timer_that_fails_is_not_taken_for_a_deadline():
    async def broken(seconds: float) -> None:
        raise ValueError("no clock")

    async def go():
        pending = FakeResponse()
        with pytest.raises(ValueError, match="no clock"):
            await answer(pending, 30.0, None, broken)
        return pending.cancelled

    assert asyncio.run(go())


def test_a_timer_is_named_by_its_import_path_and_a_bad_one_names_the_field():
    assert timer_at(None) is None
    assert timer_at("asyncio:sleep") is asyncio.sleep
    with pytest.raises(ValueError, match="deadline_timer 'asyncio:no_such'"):
        timer_at("asyncio:no_such")
    with pytest.raises(ValueError, match="is not callable"):
        timer_at("math:pi")
    with pytest.raises(ValidationError, match="deadline_timer"):
        AppArgs.model_validate({"models": [{"name": "dialogpt-medium"}],
                                "deadline_timer": "not a path"})
