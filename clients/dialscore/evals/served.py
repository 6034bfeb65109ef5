"""The served models an evaluation may use: GET /v1/models by name, and the check that a name fits."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the client (httpx) is imported when a runner runs: `--help` stays light
    from dialscore.client import AsyncDialscoreClient
    from dialscore.model_card import ModelCard

__all__ = ["Served", "resolve_model", "served_models"]

#: GET /v1/models as {name: card}, in the service's order.
Served = Mapping[str, "ModelCard"]


async def served_models(client: AsyncDialscoreClient) -> dict[str, ModelCard]:
    """The service's models by name."""
    return {m.name: m for m in await client.models()}


def resolve_model(served: Served, name: str | None, kind: Literal["classifier", "dialogue"],
                  purpose: str) -> ModelCard:
    """The served model `name`, checked to be of `kind`: an NLI classifier (family "classifier")
    or a dialogue model (any other family). `purpose` names what needs it in the errors.

    Raises ValueError when `name` is None, not served (with the closest served name as a hint)
    or of the other kind (listing the suitable ones).
    """
    wanted = [m for m, info in served.items() if (info.family == "classifier") == (kind == "classifier")]
    what = "an NLI classifier" if kind == "classifier" else "a dialogue (NLL) model"
    if name is None:
        raise ValueError(f"{purpose} needs {what}; served: {', '.join(wanted) or 'none'}")
    if name not in served:
        close = difflib.get_close_matches(name, list(served), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"model {name!r} is not served{hint} (served: {', '.join(served)})")
    if name not in wanted:
        raise ValueError(f"{purpose} needs {what}, and {name!r} is a {served[name].family} model "
                         f"(suitable: {', '.join(wanted) or 'none'})")
    return served[name]
