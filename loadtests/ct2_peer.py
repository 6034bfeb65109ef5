"""CTranslate2 as a peer scorer for the benchmarks (bench environment only, never a service dependency).

CTranslate2's ``Generator.score_batch`` returns the log-probability of every token of each
sequence given the tokens before it. Differences from the engine that the wrapper handles:

* it never scores the first token (no distribution precedes it): an item is scored as the
  sequence ``source + target`` and only the last ``len(target)`` log-probabilities are kept
  (every benchmark item has a non-empty source);
* it truncates from the right at ``max_input_length`` (1,024 by default) unless that is 0: set
  to 0, so nothing is cut (items here fit the window);
* it takes token *strings*: the engine's token ids are mapped with
  ``tokenizer.convert_ids_to_tokens``, so both score the same ids;
* batches: ``max_batch_size`` in tokens (``batch_type="tokens"``), set to the engine's token
  budget; CTranslate2 sorts the examples by length within the call itself.

Install (pinned, bench only; see loadtests/requirements-bench.txt)::

    pip install ctranslate2==4.8.5

The checkpoint is converted once with ``ctranslate2.converters.TransformersConverter`` (float32
weights); int8 is CTranslate2's load-time quantization (``compute_type="int8"``: int8 weights and
activations in the linear layers, its headline CPU mode).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def available() -> str | None:
    """None when ctranslate2 imports, else why not."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError as e:
        return (f"ctranslate2 not installed ({e}): pip install -r loadtests/requirements-bench.txt "
                "into the bench environment")
    return None


def convert(source: Path, out: Path) -> Path:
    """`source` (a transformers GPT-2 checkpoint) converted to a CTranslate2 model in `out` (once).

    The DialoGPT-medium-shaped stand-in keeps GPT-2's 50,257-row embedding but its tokenizer has
    far fewer tokens; CTranslate2 requires one vocabulary string per row. The converter therefore
    reads a staged copy of the checkpoint (its files linked, not copied) whose tokenizer has
    unused placeholder tokens appended up to the embedding's rows (ids the benchmark's tokenizer
    never produces); `source` itself is left as it is.
    """
    import tempfile

    from ctranslate2.converters import TransformersConverter
    from transformers import AutoConfig, AutoTokenizer

    if (out / "model.bin").is_file():
        return out
    rows = AutoConfig.from_pretrained(source).vocab_size
    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.add_tokens([f"<ct2_unused_{k}>" for k in range(rows - len(tokenizer))])
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp)
        tokenizer.save_pretrained(staged)
        for f in source.iterdir():
            if f.is_file() and not (staged / f.name).exists():
                (staged / f.name).symlink_to(f.resolve())
        TransformersConverter(str(staged)).convert(str(out), force=True)
    return out


class Ct2Scorer:
    """Mean target NLLs of encoded items with one CTranslate2 Generator.

    Args:
        path: the converted model. compute_type: ``float32`` or ``int8``.
        threads: CTranslate2's ``intra_threads`` (one replica: ``inter_threads=1``).
        batch_tokens: ``max_batch_size`` in tokens.
        tokenizer: the engine's tokenizer (ids → token strings).
    """

    def __init__(self, path: Path, compute_type: str, threads: int, batch_tokens: int, tokenizer: Any):
        import ctranslate2

        self.generator = ctranslate2.Generator(str(path), device="cpu", compute_type=compute_type,
                                               intra_threads=threads, inter_threads=1)
        self.batch_tokens = batch_tokens
        self.tokenizer = tokenizer
        self.compute_type = compute_type

    def strings(self, encoded: Sequence[Any]) -> list[list[str]]:
        """Each item's ``source + target`` ids as token strings (prepare once, outside timings)."""
        conv = self.tokenizer.convert_ids_to_tokens
        return [conv(list(e.source_ids + e.target_ids)) for e in encoded]

    def nlls(self, tokens: list[list[str]], target_lengths: Sequence[int]) -> list[float]:
        """Each item's mean NLL over its last `target_lengths` tokens (its target), in order."""
        results = self.generator.score_batch(tokens, max_batch_size=self.batch_tokens,
                                             batch_type="tokens", max_input_length=0)
        out = []
        for r, m in zip(results, target_lengths):
            lp = r.log_probs[-m:]
            out.append(-sum(lp) / m)
        return out
