"""Progress bars: tqdm's when it is installed (the `reports` extra), none otherwise.

A run asks for a bar with :func:`progress_bar` and uses it as a context manager with
``update(n)``, ``reset(total=...)`` and ``close()``, whether or not tqdm is there: without
it (or with ``enabled=False``, or nothing to count) the bar is :class:`NoBar`, which does
nothing. Bars write to stderr, so tables on stdout stay clean.
"""

from __future__ import annotations

from typing import Any, Protocol

from dialscore.extras import available

__all__ = ["Bar", "NoBar", "progress_bar"]


class Bar(Protocol):
    """What a run calls on a progress bar (tqdm's methods of the same names)."""

    def update(self, n: int = 1) -> Any: ...

    def reset(self, total: int | None = None) -> Any: ...

    def close(self) -> Any: ...

    def __enter__(self) -> Bar: ...

    def __exit__(self, *exc_info: object) -> Any: ...


class NoBar:
    """A progress bar that shows nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def reset(self, total: int | None = None) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> NoBar:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


def progress_bar(total: int, desc: str, enabled: bool = True, unit: str = "item") -> Bar:
    """A bar counting to `total` `unit`s, labelled `desc`; :class:`NoBar` when disabled, when
    `total` is 0 or when tqdm is not installed."""
    if not enabled or total == 0 or not available("tqdm"):
        return NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True)
