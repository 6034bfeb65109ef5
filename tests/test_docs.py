"""The documentation site builds with ``mkdocs build --strict``: a broken link or anchor, a page
missing from the nav or a nav entry without its page fails the suite (mkdocs.yml, docs/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_site_builds_strictly(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "benchmarks" / "served-path" / "index.html").exists()
