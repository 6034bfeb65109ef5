"""The client with httpx and pydantic only: `import dialscore`, the clients and every command's
--help work with the heavy and optional packages unimportable, and a run that needs a missing
extra degrades or stops before any request, naming the pip command."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from dialscore.cli import main
from dialscore.client import AsyncDialscoreClient, DialscoreClient
from dialscore.extras import MissingExtra
from contract_fake import ContractFake

#: The server's stack and both extras: none may be needed for --help.
BLOCKED = ("torch", "transformers", "ray", "numpy", "matplotlib", "tqdm", "textblob", "wn",
           "lemminflect")

BLOCKER = f'''
import sys

BLOCKED = {BLOCKED!r}


class Refuse:
    """Make the BLOCKED packages unimportable, as if they were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is blocked in this test")
        return None


sys.meta_path.insert(0, Refuse())
'''

EVERY_HELP = textwrap.dedent('''
    import contextlib, io, sys

    import dialscore, dialscore.client, dialscore.cli
    from dialscore.cli import build_parser, main

    def subcommands(parser):
        for action in parser._actions:
            if action.__class__.__name__ == "_SubParsersAction":
                return action.choices
        return {}

    helped = []
    for name, sub in subcommands(build_parser()).items():
        for argv in [[name], *([name, inner] for inner in subcommands(sub))]:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                try:
                    main([*argv, "--help"])
                except SystemExit as exc:
                    assert exc.code == 0, (argv, exc.code)
            assert "usage:" in out.getvalue(), argv
            helped.append(" ".join(argv))
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED_NAMES)
    assert not loaded, loaded
    print("\\n".join(helped))
''').replace("BLOCKED_NAMES", repr(BLOCKED))


@pytest.fixture(scope="module")
def lean_env(tmp_path_factory) -> dict[str, str]:
    """An environment whose interpreter cannot import BLOCKED (a sitecustomize on PYTHONPATH)."""
    folder = tmp_path_factory.mktemp("lean")
    (folder / "sitecustomize.py").write_text(BLOCKER)
    import os

    return {**os.environ, "PYTHONPATH": str(folder)}


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_blocker_blocks(lean_env):
    done = _run(lean_env, "-c", "import numpy")
    assert done.returncode != 0 and "blocked in this test" in done.stderr


@pytest.mark.parametrize("argv", [["--help"], ["probe", "--help"]])
def test_help_without_the_heavy_or_optional_packages(lean_env, argv):
    done = _run(lean_env, "-m", "dialscore.cli", *argv)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: dialscore")
    assert "Traceback" not in done.stderr


def test_every_command_help_and_the_clients_import_without_them(lean_env):
    done = _run(lean_env, "-c", EVERY_HELP)
    assert done.returncode == 0, done.stderr
    helped = done.stdout.split("\n")
    assert {"probe", "models", "eval", "eval mutual", "eval decode", "eval robustness"} <= set(helped)
    # The server distribution's commands register through the entry points when it is installed
    # (the full environment); a client-only install (make test's .venv-client) lists none.
    server_commands = {"serve", "demo", "stand-ins", "score"}
    if entry_points(group="dialscore.commands"):
        assert server_commands <= set(helped)
    else:
        assert not server_commands & set(helped)


# --- runs without an extra -----------------------------------------------------------------------

#: Nothing listens there: a run that sent a request would fail with a connection error instead.
NOWHERE = "http://127.0.0.1:9"


def test_probe_command_without_the_reports_extra_stops_before_any_request(lean_env, tmp_path):
    done = _run(lean_env, "-m", "dialscore.cli", "probe", "--url", NOWHERE, "--retries", "0",
                "--out", str(tmp_path / "out"))
    assert done.returncode == 1, done.stderr
    assert "pip install 'dialscore[reports]'" in done.stderr
    assert "Traceback" not in done.stderr and "Connect" not in done.stderr


def test_robustness_command_without_the_evals_extra_stops_before_any_request(lean_env, tmp_path):
    done = _run(lean_env, "-m", "dialscore.cli", "eval", "robustness", "--url", NOWHERE,
                "--retries", "0", "--data", str(_mutual(tmp_path)), "--model", "fake-gpt",
                "--kinds", "reversed,synonyms", "--out", str(tmp_path / "out"))
    assert done.returncode == 1, done.stderr
    assert "pip install 'dialscore[evals]'" in done.stderr
    assert "Traceback" not in done.stderr and "Connect" not in done.stderr



@pytest.fixture
def missing(monkeypatch):
    """Make these packages missing for the test: `import` fails and `importlib.util.find_spec`
    (what `dialscore.extras.available` asks) finds nothing."""
    real = importlib.util.find_spec

    def hide(*modules: str) -> None:
        def find_spec(name, *args, **kwargs):
            if name.split(".")[0] in modules:
                return None
            return real(name, *args, **kwargs)

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)
        for name in modules:
            monkeypatch.setitem(sys.modules, name, None)  # None: `import name` raises ImportError

    return hide


def test_probe_without_numpy_stops_before_any_request(missing, tmp_path, monkeypatch, capsys):
    from dialscore.commands import service_args
    from dialscore.probes.run import run_probes

    missing("numpy")
    api = ContractFake()
    with DialscoreClient("http://fake", transport=api.transport()) as client:
        with pytest.raises(MissingExtra, match=r"pip install 'dialscore\[reports\]'"):
            run_probes(client, tmp_path / "absent.jsonl", out_dir=tmp_path / "out")
    assert api.paths == []
    monkeypatch.setattr(service_args, "client_from_args",
                        lambda args: DialscoreClient("http://fake", transport=api.transport()))
    assert main(["probe", "--out", str(tmp_path / "out"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "numpy (the `reports` extra)" in err and "pip install 'dialscore[reports]'" in err
    assert "Traceback" not in err and api.paths == []


MUTUAL = [{"id": "d_1", "answers": "A", "article": "m : where is paris ? f : in france .",
           "options": ["m : i went to paris in june .", "m : x", "m : y", "m : z"]},
          {"id": "d_2", "answers": "B", "article": "f : hello . m : hi .",
           "options": ["f : a", "f : how are you today ?", "f : b", "f : c"]}]


def _mutual(tmp_path: Path) -> Path:
    path = tmp_path / "mutual.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MUTUAL))
    return path


def test_robustness_without_the_reports_extra_degrades(missing, tmp_path, capfd):
    from dialscore.evals.runners.robustness import arun_robustness

    missing("tqdm", "matplotlib", "numpy")
    printed: list[str] = []

    async def go():
        async with AsyncDialscoreClient("http://fake", transport=ContractFake().transport()) as client:
            return await arun_robustness(client, _mutual(tmp_path), "nll", "fake-gpt",
                                         out_dir=tmp_path / "out", kinds=["reversed", "jumbled"],
                                         progress=True, echo=printed.append)

    run = asyncio.run(go())
    assert run.stats["reversed"].n == 2
    assert "plot" not in run.files and not list((tmp_path / "out").glob("*.png"))
    assert any("no PNG" in line and "pip install 'dialscore[reports]'" in line for line in printed)
    assert "robustness nll" not in capfd.readouterr().err  # no progress bar


@pytest.mark.parametrize("package", ["textblob", "lemminflect"])
def test_robustness_without_the_evals_extra_stops_before_any_request(missing, tmp_path, capsys,
                                                                     monkeypatch, package):
    from dialscore.commands import service_args
    from dialscore.evals.linguistic import default_backend

    missing(package)
    default_backend.cache_clear()
    api = ContractFake()
    monkeypatch.setattr(service_args, "async_client_from_args",
                        lambda args: AsyncDialscoreClient("http://fake", transport=api.transport()))
    try:
        code = main(["eval", "robustness", "--data", str(_mutual(tmp_path)), "--model", "fake-gpt",
                     "--kinds", "reversed,nouns_only", "--out", str(tmp_path / "out"),
                     "--no-progress"])
    finally:
        default_backend.cache_clear()
    assert code == 1
    err = capsys.readouterr().err
    assert "pip install 'dialscore[evals]'" in err and "Traceback" not in err
    assert api.paths == []
