"""Every repository path and every ``dialscore`` command the documentation names exists.

Read: the Markdown files of the repository (README.md, docs/**, the client's READMEs) and the
docstrings and comments of every module under services/, clients/ and loadtests/. Checked:

* **paths** (not those a command writes, after ``--out``) that start at a top-level folder (``services/...``, ``clients/...``, ``tests/...``,
  ``deployments/...``, ``loadtests/...``, ``docs/...``) or at a package folder
  (``dialscore_server/...`` under services/, ``dialscore/...`` under clients/) exist on disk;
* **modules** run as ``python -m loadtests.<name>`` (or ``dialscore...``) exist;
* **commands** written as ``dialscore <command> [<subcommand>]`` in code (fenced blocks, inline
  code, docstring literals) are commands of the CLI, and ``dialscore <command> --help`` exits 0.

A file moved or a command renamed without its documentation fails here, naming every stale
reference with where it was found.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]

#: Top-level folders whose paths are checked from the root.
TOP = ("services", "clients", "tests", "deployments", "loadtests", "docs")
#: Folders a path may start at instead, with the folders it is then read from: the two packages,
#: and their sub-packages (``nll/engine/kernels.py``, ``probes/README.md``).
BASES: dict[str, list[Path]] = {"dialscore_server": [ROOT / "services"], "dialscore": [ROOT / "clients"]}
for _package in (ROOT / "services" / "dialscore_server", ROOT / "clients" / "dialscore"):
    for _sub in _package.iterdir():
        if _sub.is_dir() and not _sub.name.startswith("__"):
            BASES.setdefault(_sub.name, []).append(_package)

_PATH = re.compile(
    r"(?<![\w./~:<-])((?:%s)/[\w./-]*[\w/])" % "|".join(map(re.escape, TOP + tuple(BASES))))
#: A path cut at a line end inside its folder part (``services/dialscore_server/`` + newline +
#: ``nll/engine.py``) is read whole.
_WRAPPED = re.compile(r"/\n[ \t>#]*(?=[\w-]+(?:[./][\w-]+)+)")
#: Paths a command writes (``--out checkpoints/new-model``) are the user's, not the repository's.
_OUTPUT = re.compile(r"--(?:out|output|json|save)[ =]\S+")
_MODULE = re.compile(r"python3? -m ((?:loadtests|dialscore|dialscore_server)(?:\.\w+)+)")
_COMMAND = re.compile(r"(?:^|(?<=[\s`/(]))dialscore ((?:[a-z][a-z-]*)(?:\|[a-z][a-z-]*)*)"
                      r"(?: ((?:[a-z][a-z-]*)(?:\|[a-z][a-z-]*)*))?")
_INLINE_CODE = re.compile(r"``?([^`\n]+)``?")


def markdown_files() -> list[Path]:
    out = [p for p in ROOT.glob("*.md")]
    out += sorted((ROOT / "docs").rglob("*.md"))
    out += sorted((ROOT / "clients").rglob("*.md"))
    return [p for p in out if "build" not in p.relative_to(ROOT).parts]


def python_files() -> list[Path]:
    return sorted(p for top in ("services", "clients", "loadtests") for p in (ROOT / top).rglob("*.py")
                  if "build" not in p.relative_to(ROOT).parts)


def docstrings_and_comments(path: Path) -> str:
    """The module's docstrings (module, classes, functions) and its comment lines, joined."""
    source = path.read_text(encoding="utf-8")
    parts = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                parts.append(doc)
    parts += [line.split("#", 1)[1] for line in source.splitlines() if line.lstrip().startswith("#")]
    return "\n".join(parts)


def code_of_markdown(text: str) -> str:
    """The code in a Markdown text: fenced blocks and inline code spans, one per line."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            out.append(line)
        else:
            out += _INLINE_CODE.findall(line)
    return "\n".join(out)


def code_of_docstring(text: str) -> str:
    """The code in a docstring: ``literals``, `spans` and indented or ``$``-prompted lines."""
    out = _INLINE_CODE.findall(text)
    out += [line for line in text.splitlines() if line.startswith("    ")]
    return "\n".join(out)


def sources() -> list[tuple[str, str, str]]:
    """(where, all text, its code) of every documented text that is checked."""
    out = []
    for path in markdown_files():
        text = path.read_text(encoding="utf-8")
        out.append((str(path.relative_to(ROOT)), text, code_of_markdown(text)))
    for path in python_files():
        text = docstrings_and_comments(path)
        out.append((str(path.relative_to(ROOT)), text, code_of_docstring(text)))
    return out


def path_exists(ref: str) -> bool:
    ref = ref.rstrip(".")
    first = ref.split("/", 1)[0]
    return any((base / ref).exists() for base in BASES.get(first, [ROOT]))


def module_exists(name: str) -> bool:
    first, *rest = name.split(".")
    base = {"loadtests": ROOT, "dialscore": ROOT / "clients", "dialscore_server": ROOT / "services"}[first]
    stem = base.joinpath(first, *rest)
    return stem.with_suffix(".py").exists() or (stem / "__init__.py").exists()


@functools.cache
def command_tree() -> dict[tuple[str, ...], bool]:
    """Every command path of the CLI -> whether it has subcommands of its own."""
    from dialscore.cli import build_parser

    tree: dict[tuple[str, ...], bool] = {}

    def walk(parser: argparse.ArgumentParser, prefix: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                if prefix:
                    tree[prefix] = True
                for name, sub in action.choices.items():
                    tree.setdefault(prefix + (name,), False)
                    walk(sub, prefix + (name,))

    walk(build_parser(), ())
    return tree


def command_paths(code: str) -> set[tuple[str, ...]]:
    """The ``dialscore`` command paths written in `code` (alternatives ``a|b`` expanded), as far
    as they name commands: a second word counts only where the first takes subcommands."""
    tree = command_tree()
    found: set[tuple[str, ...]] = set()
    for line in code.splitlines():
        if re.match(r"\s*(from|import)\s", line):
            continue
        for first, second in _COMMAND.findall(line):
            for a in first.split("|"):
                if not tree.get((a,)) or not second:
                    found.add((a,))
                    continue
                found.update((a, b) for b in second.split("|"))
    return found


def stale_references() -> list[str]:
    stale = []
    for where, text, code in sources():
        for ref in sorted(set(_PATH.findall(_OUTPUT.sub("", _WRAPPED.sub("/", text))))):
            if not path_exists(ref):
                stale.append(f"{where}: path {ref}")
        for name in sorted(set(_MODULE.findall(text))):
            if not module_exists(name):
                stale.append(f"{where}: module {name}")
        for cmd in sorted(command_paths(code)):
            if cmd not in command_tree():
                stale.append(f"{where}: command dialscore {' '.join(cmd)}")
    return stale


def test_every_documented_path_module_and_command_exists() -> None:
    stale = stale_references()
    assert stale == [], f"{len(stale)} stale reference(s):\n" + "\n".join(stale)


def test_every_documented_command_answers_help() -> None:
    """Each command path the documentation names runs: ``dialscore <path> --help`` exits 0."""
    named: set[tuple[str, ...]] = set()
    for _, _, code in sources():
        named |= command_paths(code)
    named &= set(command_tree())
    assert named, "no dialscore command found in the documentation"
    for cmd in sorted(named):
        proc = subprocess.run([sys.executable, "-m", "dialscore.cli", *cmd, "--help"],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert proc.returncode == 0, f"dialscore {' '.join(cmd)} --help: {proc.stderr[-2000:]}"


if __name__ == "__main__":  # list the stale references: python tests/test_doc_references.py
    found = stale_references()
    print("\n".join(found))
    print(f"{len(found)} stale reference(s)")
    sys.exit(1 if found else 0)

