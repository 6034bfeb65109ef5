"""Priority lanes of a request: what a caller may ask for, and how the answer says what it got.

Every scoring request is served in one of two lanes on each model replica it reaches:
``interactive`` (the default) or ``bulk``. A replica's engine serves waiting interactive chunks
before bulk ones and gives bulk a bounded share meanwhile
(:mod:`dialscore_server.scheduling.lanes`).

A caller asks for a lane with the header :data:`PRIORITY_HEADER` (``bulk`` or ``interactive``),
on every scoring route, or with the body field ``priority`` where the body is a JSON object of
ours or vLLM's shape (vLLM's semantics: an integer, lower is served earlier; ``priority > 0``
asks for bulk, ``priority <= 0`` for interactive). Asking for bulk, by either, is always honoured;
asking for interactive is not a right: a request whose cost, in the replica's unit of work (NLL
tokens, NLI pairs), exceeds the model's ``interactive_max_cost`` is served in the bulk lane
whatever it asks (:class:`~dialscore_server.contract.options.ServingOptions`). The lane actually
used comes back in the response header :data:`LANE_HEADER` (``bulk`` when any model the request
reached served it in the bulk lane).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Header
from pydantic import Field

from dialscore_server.contract.errors import InputError

#: A request's lane on a model replica.
Lane = Literal["interactive", "bulk"]
LANES: tuple[Lane, ...] = ("interactive", "bulk")

#: The request header that asks for a lane (case-insensitive values ``bulk``/``interactive``).
PRIORITY_HEADER = "X-Dialscore-Priority"
#: The response header that says which lane served the request.
LANE_HEADER = "x-dialscore-lane"

#: The body field ``priority`` of the request schemas that accept one (vLLM's meaning).
PriorityField = Field(
    None, strict=True,
    description="vLLM's request priority: lower is served earlier. `priority > 0` asks for the "
    "bulk lane, `priority <= 0` (or none) for the interactive lane; a request over the model's "
    "`interactive_max_cost` is served in the bulk lane whatever it asks. The header "
    f"`{PRIORITY_HEADER}: bulk` asks for bulk too (see the Priority lanes section of the API "
    "docs); the lane used comes back in `x-dialscore-lane`.")


#: The route parameter of the priority header (FastAPI reads it at runtime: routers annotate with it).
PriorityHeader = Annotated[str | None, Header(
    alias=PRIORITY_HEADER,
    description="`bulk` or `interactive` (default): the priority lane this request asks for. "
    "Bulk is always honoured; interactive only for a request within the model's "
    "`interactive_max_cost`. The lane used comes back in `x-dialscore-lane`.")]


def requested_lane(header: str | None, priority: int | None = None) -> Lane:
    """The lane a request asks for: ``bulk`` when the header says ``bulk`` or the body's
    `priority` is above 0, else ``interactive``. A header other than ``bulk``/``interactive``
    (any case, surrounding spaces ignored) is an InputError naming the header."""
    lane: Lane = "interactive"
    if header is not None:
        value = header.strip().lower()
        if value not in LANES:
            raise InputError(f"{PRIORITY_HEADER} must be 'bulk' or 'interactive', got {header!r}",
                             PRIORITY_HEADER)
        lane = value  # type: ignore[assignment]
    if priority is not None and priority > 0:
        lane = "bulk"
    return lane


def served_lane(*lanes: Lane | None) -> Lane | None:
    """The lane to report for a request that reached several models: ``bulk`` if any served it
    in bulk, else ``interactive`` if any served it, else None (it reached none)."""
    got = [lane for lane in lanes if lane is not None]
    if not got:
        return None
    return "bulk" if "bulk" in got else "interactive"
