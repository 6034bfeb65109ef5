"""CEDAR probes over a running service: probe data, corruptions, resumable runs and reports.

:data:`SAMPLE_DATA` is the shipped sample (40 dialogues written for the project; schema in the
client's README), the default data of `dialscore probe` and `dialscore demo`.
"""

from importlib.resources import files
from pathlib import Path

#: The packaged probe sample (a real file: the package is installed as files, never zipped).
SAMPLE_DATA = Path(str(files(__name__) / "cedar_sample.jsonl"))
