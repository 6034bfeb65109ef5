"""A revision for a checkpoint that has none: a hash of the content of its files.

A local checkpoint folder (every stand-in, every fine-tuned model served from a path) has no hub
commit, so a model re-trained in place would keep its name, source and (absent) revision, and a
client's resume cache would reuse scores of the old weights. :func:`folder_revision` names the
content instead: ``sha256:`` and the first 16 hex digits of a SHA-256 over every regular file
below the folder (relative path, size and bytes, in sorted path order), hidden files and
folders (``.cache``, ``.git``...) excepted. Any change of weights, config or tokenizer files
changes it; copying or moving the folder does not.

Cost: one read of the checkpoint at load time (about 1 s per GB from the page cache).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

PREFIX = "sha256:"
_CHUNK = 1 << 20


def folder_revision(folder: str | os.PathLike[str]) -> str:
    """The content revision of the checkpoint folder (or single file) at `folder`."""
    root = Path(folder)
    digest = hashlib.sha256()
    files = [root] if root.is_file() else sorted(
        p for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
    for path in files:
        rel = path.name if path == root else path.relative_to(root).as_posix()
        digest.update(rel.encode("utf-8") + b"\0" + str(path.stat().st_size).encode() + b"\0")
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                digest.update(chunk)
    return PREFIX + digest.hexdigest()[:16]
