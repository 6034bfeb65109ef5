"""PNG figures of the reports, drawn with matplotlib when it is installed (the `reports` extra).

Figures are built on :class:`matplotlib.figure.Figure` directly, never pyplot: no global state
and no GUI backend. A run checks :func:`plots_available` first and, without matplotlib, writes
no PNG and says so in one line (:data:`NO_PLOTS_NOTE`).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from dialscore.extras import REPORTS, available, install_hint
from dialscore.reporting.atomic import atomic_write_bytes

__all__ = ["NO_PLOTS_NOTE", "new_figure", "plots_available", "save_png"]

#: The line a run prints instead of writing its PNG files.
NO_PLOTS_NOTE = f"no PNG plots: matplotlib is not installed ({install_hint(REPORTS)})"

#: Resolution of every PNG, in dots per inch.
DPI = 110


def plots_available() -> bool:
    """Whether matplotlib can be imported."""
    return available("matplotlib")


def new_figure(width: float, height: float) -> Any:
    """An empty figure of `width` x `height` inches, constrained layout."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def save_png(fig: Any, path: str | Path) -> Path:
    """Render `fig` as PNG at :data:`DPI` and write it atomically; returns the path."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return atomic_write_bytes(path, buffer.getvalue())
