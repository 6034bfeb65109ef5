"""Settings that name Python objects by import path (``package.module:name``): an engine class
(``ServingOptions.engine``), a deadline timer (``AppArgs.deadline_timer``)."""

from __future__ import annotations

import importlib
from typing import Any


def imported(path: str, setting: str) -> Any:
    """The object `path` (``package.module:name``) names, imported where this runs. Raises
    ValueError naming `setting` and the path when it cannot be imported."""
    module, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{setting} {path!r} cannot be imported: {exc}") from exc
