"""The client's tests and the test modules they use import nothing of the server: no
``dialscore_server``, torch, transformers, Ray, FastAPI or Starlette, and not ``fake_api`` (the
server's app in-process). In the client-only environment such an import fails anyway; this
check says which file has it, in either environment."""

from __future__ import annotations

import ast
from pathlib import Path

from server_packages import SERVER_ONLY

TESTS = Path(__file__).resolve().parents[1]
#: The test modules outside tests/client that the client's tests import.
SHARED = ("contract_snapshot.py", "fake_models.py", "shared_data.py")
FORBIDDEN = {*SERVER_ONLY, "fake_api"}


def imported(path: Path, nested: bool = True) -> set[str]:
    """The top-level names of the modules `path` imports: everywhere in it, or (not `nested`)
    in its module-level statements only."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree) if nested else tree.body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_no_client_test_imports_the_server():
    files = sorted((TESTS / "client").glob("*.py")) + [TESTS / name for name in SHARED]
    offending = {str(f.relative_to(TESTS)): sorted(imported(f) & FORBIDDEN) for f in files}
    assert {f: names for f, names in offending.items() if names} == {}
    assert len(files) > len(SHARED) + 10


def test_the_conftest_every_test_loads_imports_no_server_at_load_time():
    """tests/conftest.py's fixtures may import the server when a server test asks for them; the
    client's tests ask for none, and loading the file imports none of it."""
    assert imported(TESTS / "conftest.py", nested=False) & FORBIDDEN == set()
