"""The benchmark data beside the checkout (``../shared/data``), which the project never copies."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def shared_file(relative: str) -> Path:
    """A file under ../shared, or skip the test with the reason when it is absent."""
    path = SHARED / relative
    if not path.is_file():
        pytest.skip(f"../shared/{relative} is absent (benchmark data lives beside the checkout, "
                    "never in it)")
    return path
