"""Shared fixtures. Stand-ins are built once per session; the hub is never contacted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Without this, a missing checkpoint makes from_pretrained retry against the hub for minutes.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def stand_ins(tmp_path_factory) -> Path:
    """Root folder of the stand-in checkpoints (one subfolder per kind), built once."""
    from services.standins import build_stand_ins

    root = tmp_path_factory.mktemp("stand-ins")
    build_stand_ins(root)
    return root


@pytest.fixture(scope="session")
def stand_in_registry(stand_ins):
    from services.registry import stand_in_registry as make

    return make(stand_ins)


def shared_file(relative: str) -> Path:
    """A file under ../shared, or skip the test with the reason when it is absent."""
    path = SHARED / relative
    if not path.is_file():
        pytest.skip(f"../shared/{relative} is absent (benchmark data lives beside the checkout, "
                    "never in it)")
    return path
