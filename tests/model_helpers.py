"""Checkpoint helpers that only the tests need (the stand-ins themselves, and the helpers that
benchmarks share, stay in dialscore_server.checkpoints.standins)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def lay_out_as_hub_cache(checkpoint: str | Path, cache_dir: str | Path, repo_id: str,
                         snapshot: str = "0000000000000000000000000000000000000000") -> Path:
    """Copy a checkpoint into the Hugging Face hub cache layout, so `repo_id` loads offline.

    Produces ``cache_dir/models--org--name/{snapshots/<snapshot>/..., refs/main}``; with
    ``HF_HUB_OFFLINE=1`` and ``cache_dir`` as the hub cache, ``from_pretrained(repo_id)`` resolves
    ``main`` through ``refs/main`` to the snapshot.
    """
    repo_dir = Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))
    snap = repo_dir / "snapshots" / snapshot
    if snap.exists():
        shutil.rmtree(snap)
    shutil.copytree(checkpoint, snap)
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / "main").write_text(snapshot)
    return snap


@contextmanager
def input_shapes(module) -> Iterator[list[tuple[int, ...]]]:
    """The shape of ``input_ids`` of every forward call of `module` (a torch module called with
    ``input_ids=`` as a keyword) while the block runs, in call order."""
    shapes: list[tuple[int, ...]] = []
    hook = module.register_forward_hook(
        lambda mod, args, kwargs, out: shapes.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True)
    try:
        yield shapes
    finally:
        hook.remove()
