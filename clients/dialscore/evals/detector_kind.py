"""Which kind of detector produced a DECODE report, and which paper row it is comparable to.

Off-the-shelf NLI checkpoints (roberta-large-mnli, the SNLI+MNLI+FEVER+ANLI RoBERTa) answer a
different question than a detector fine-tuned on DECODE (e.g. with `dialscore train detector`):
the spec requires every DECODE report to say which it used (methods.md section 3).
"""

from __future__ import annotations

DETECTOR_KINDS: tuple[str, ...] = ("nli", "decode-trained")


def comparable_row(kind: str, mode: str, analysis: str = "decode") -> str:
    """One line naming the detector kind and the paper row its figures compare with.
    `analysis` is "decode" (main test set and diagnostics) or "human-bot"."""
    if kind not in DETECTOR_KINDS:
        raise ValueError(f"detector kind must be one of {', '.join(DETECTOR_KINDS)}, got {kind!r}")
    if kind == "nli":
        return ("detector: NLI-only (not trained on DECODE): comparable to the paper's rows "
                "trained on other NLI data (Table 2: SNLI+MNLI, ANLI, All - DECODE), not to its "
                "DECODE row")
    if analysis == "human-bot":
        return ("detector: DECODE-trained, " + mode + ": comparable to Table 7 (utterance-based "
                "RoBERTa: best precision 23.94), Figure 3 (fires 5.5% on human utterances, 74.3% "
                "on @3) and Figure 4 (Pearson 0.81)" if mode == "structured" else
                "detector: DECODE-trained, unstructured: comparable to Table 7's unstructured rows")
    if mode == "structured":
        return ("detector: DECODE-trained, utterance-based: comparable to the paper's DECODE row "
                "(RoBERTa: 93.19 main test, 80.86 strict, 84.69 human-bot, 87.5 SE F1)")
    return ("detector: DECODE-trained, unstructured: comparable to the paper's unstructured "
            "DECODE row (96.85 in-domain, 70.03 human-bot, 34.4 RCT)")
