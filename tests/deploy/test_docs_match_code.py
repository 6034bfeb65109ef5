"""The documentation's tables are read and compared with the code they describe, so the docs
cannot promise a status or a default the service does not have (text-embeddings-inference's slip:
docs promising 413 where the code sends 422): the error and limit tables of docs/api.md, and the
README's layout tree."""

from __future__ import annotations

import re
from pathlib import Path

from dialscore_server.contract.errors import STATUS, error_responses
from dialscore_server.contract.limits import Limits

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
API_PAGE = ROOT / "docs" / "api.md"


def table(header: list[str], page: Path = API_PAGE) -> list[list[str]]:
    """The body rows of the table of `page` whose header row is `header`, or fail."""
    lines = page.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if _cells(line) == header:
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(_cells(row))
            return rows
    raise AssertionError(f"{page.relative_to(ROOT)} has no table headed {header}")


def _cells(line: str) -> list[str]:
    if not line.startswith("|"):
        return []
    return [c.strip() for c in line.strip().strip("|").split("|")]


def name(cell: str) -> str:
    """The identifier a cell starts with: ``max_items` (per /v1/nll)`` -> ``max_items``."""
    match = re.match(r"`?([\w.]+)`?", cell)
    assert match, cell
    return match.group(1)


def test_error_table_lists_every_type_with_its_real_status():
    rows = table(["type", "status", "when"])
    documented = {name(r[0]): int(r[1]) for r in rows}
    # internal and not_found are documented outside the table (a bug, and an unknown route).
    assert documented == {t: s for t, s in STATUS.items() if t not in ("internal", "not_found")}
    for error_type, status in documented.items():
        assert status in error_responses(error_type)  # what /openapi.json documents, too


def test_limits_table_lists_every_limit_with_its_default():
    rows = table(["limit", "default"])
    documented = {name(r[0]): int(re.sub(r"[,_\s]", "", r[1])) for r in rows}
    assert documented == Limits().model_dump()


def test_layout_tree_names_every_package_folder() -> None:
    """Every folder holding Python modules appears in the README's layout tree, at its depth, so a
    newcomer finds each one there (a folder added or renamed without the docs fails here)."""
    text = README.read_text(encoding="utf-8")
    tree = text[text.index("## Layout"):].split("```")[1]
    named: set[str] = set()
    stack: list[tuple[int, str]] = []
    for line in tree.splitlines():
        entry = line.split()[0] if line.strip() else ""
        if not entry.endswith("/"):
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        stack = [(d, p) for d, p in stack if d < depth]
        path = (stack[-1][1] if stack else "") + entry
        stack.append((depth, path))
        named.add(path.rstrip("/"))
    root = README.parent
    folders = {str(p.parent.relative_to(root)) for top in ("clients", "services")
               for p in (root / top).rglob("*.py") if "build" not in p.parts}
    assert folders - named == set()
