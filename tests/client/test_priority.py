"""The client's priority lanes: which requests ask for the bulk lane (X-Dialscore-Priority)."""

from __future__ import annotations

import httpx
import pytest

from dialscore.cli import build_parser
from dialscore.client import PRIORITY_HEADER, DialscoreClient
from dialscore.commands.service_args import client_from_args
from dialscore.sync_bridge import run_sync


def sent_headers(**options) -> httpx.Headers:
    """The headers of a request sent by a client built with `options`."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"models": []})

    with DialscoreClient("http://x", transport=httpx.MockTransport(answer), **options) as client:
        client.models()
    return seen[0].headers


def test_a_client_asks_for_no_lane_unless_told_and_then_for_the_one_named():
    assert PRIORITY_HEADER not in sent_headers()
    assert sent_headers(priority="bulk")[PRIORITY_HEADER] == "bulk"
    with pytest.raises(ValueError, match="priority"):
        DialscoreClient("http://x", priority="low")  # type: ignore[arg-type]


def test_probe_and_evaluation_runs_ask_for_bulk_unless_the_client_names_a_priority():
    async def headers_of(mirror):
        return dict(mirror.headers)

    assert run_sync("http://x", None, "probes", headers_of)[PRIORITY_HEADER] == "bulk"
    assert run_sync(DialscoreClient("http://x"), None, "probes",
                    headers_of)[PRIORITY_HEADER] == "bulk"
    interactive = DialscoreClient("http://x", priority="interactive")
    assert run_sync(interactive, None, "probes", headers_of)[PRIORITY_HEADER] == "interactive"


@pytest.mark.parametrize("argv,lane", [
    (["probe"], "bulk"),
    (["probe", "--priority", "interactive"], "interactive"),
    (["eval", "mutual", "--data", "d"], "bulk"),
    (["models"], "interactive"),
])
def test_the_commands_default_lane_is_bulk_for_probes_and_evaluations(argv, lane):
    args = build_parser().parse_args(argv)
    assert client_from_args(args).headers[PRIORITY_HEADER] == lane
