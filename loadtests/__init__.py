"""Benchmarks and load tests of dialscore (never collected by pytest).

Every script runs from the repository root as ``python -m loadtests.<name>``; the helpers they
share are in :mod:`loadtests.common`. Importing the package sets ``HF_HUB_OFFLINE=1`` and
``TOKENIZERS_PARALLELISM=false`` unless they are already set: the stand-in checkpoints are local,
and a missing one must fail at once instead of retrying against the hub.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
