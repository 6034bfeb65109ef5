"""Fine-tune any sequence-classification checkpoint as a 2-way DECODE contradiction detector
with Hugging Face's Trainer (which runs on Accelerate).

The classification head is replaced by a 2-label one, ``id2label = {0: "non_contradiction",
1: "contradiction"}`` (the service finds the contradiction index from id2label, so the registry
serves the result as is), and the output folder gets the tokenizer, the weights and
:data:`TRAINING_MARKER`, a JSON note of what the detector was trained on (``"trained_on":
"decode-format"``, the setting, the data's checksum, the steps): reports use it to say whether a
detector is NLI-only or DECODE-trained. A stand-in's marker is carried over (the result is still
no real checkpoint).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dialscore_server.training.examples import Example

TRAINING_MARKER = "dialscore_training.json"
ID2LABEL = {0: "non_contradiction", 1: "contradiction"}


@dataclass(frozen=True)
class TrainResult:
    out: Path
    train_examples: int
    steps: int
    heldout_accuracy: float | None
    heldout_examples: int


class _Pairs:
    """A torch-style dataset of tokenized pairs (Trainer needs only __len__ / __getitem__)."""

    def __init__(self, tokenizer: Any, examples: Sequence[Example], max_length: int):
        self.enc = tokenizer([e.premise for e in examples], [e.hypothesis for e in examples],
                             truncation="only_first", max_length=max_length)
        self.labels = [int(e.contradiction) for e in examples]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**{k: v[i] for k, v in self.enc.items()}, "labels": self.labels[i]}


def accuracy(model: Any, tokenizer: Any, examples: Sequence[Example], max_length: int,
             batch_size: int = 64) -> float:
    """The share of `examples` whose argmax label is right (contradiction = label 1)."""
    import torch

    model.eval()
    right = 0
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            batch = examples[start:start + batch_size]
            enc = tokenizer([e.premise for e in batch], [e.hypothesis for e in batch],
                            truncation="only_first", max_length=max_length, padding=True,
                            return_tensors="pt")
            pred = model(**enc).logits.argmax(-1).tolist()
            right += sum(p == int(e.contradiction) for p, e in zip(pred, batch))
    return right / len(examples)


def _checksum(examples: Sequence[Example]) -> str:
    h = hashlib.sha256()
    for e in examples:
        h.update(json.dumps([e.premise, e.hypothesis, e.contradiction]).encode())
    return h.hexdigest()[:16]


def train_detector(checkpoint: str | Path, examples: Sequence[Example], out: str | Path, *,
                   setting: str, heldout: Sequence[Example] = (), epochs: float = 3.0,
                   max_steps: int = -1, learning_rate: float = 5e-5, batch_size: int = 16,
                   max_length: int = 256, seed: int = 0, source_note: str | None = None,
                   ) -> TrainResult:
    """Fine-tune `checkpoint` on `examples` and write the detector to `out` (see the module
    docstring). `max_steps` > 0 overrides `epochs`; `heldout` examples, when given, are scored
    after training. Raises ValueError without examples of both classes."""
    import torch
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer,
                              DataCollatorWithPadding, Trainer, TrainingArguments)
    from transformers.utils import logging as hf_logging

    from dialscore_server.checkpoints.standins import MARKER, is_stand_in

    if len({e.contradiction for e in examples}) < 2:
        raise ValueError("training needs examples of both classes (contradiction and not)")
    hf_logging.disable_progress_bar()
    random.seed(seed)
    torch.manual_seed(seed)
    out = Path(out)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(
        checkpoint, num_labels=2, id2label=ID2LABEL, label2id={v: k for k, v in ID2LABEL.items()},
        ignore_mismatched_sizes=True)
    length = min(max_length, getattr(tokenizer, "model_max_length", max_length) or max_length,
                 getattr(model.config, "max_position_embeddings", max_length + 2) - 2)
    args = TrainingArguments(
        output_dir=str(out / ".trainer"), num_train_epochs=epochs, max_steps=max_steps,
        learning_rate=learning_rate, per_device_train_batch_size=batch_size, seed=seed,
        save_strategy="no", report_to=[], logging_strategy="no", use_cpu=not torch.cuda.is_available(),
        disable_tqdm=True, weight_decay=0.01)
    trainer = Trainer(model=model, args=args, train_dataset=_Pairs(tokenizer, examples, length),
                      data_collator=DataCollatorWithPadding(tokenizer))
    state = trainer.train()
    model = trainer.model
    acc = accuracy(model, tokenizer, heldout, length) if heldout else None
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    shutil.rmtree(out / ".trainer", ignore_errors=True)
    if is_stand_in(checkpoint):
        shutil.copy(Path(checkpoint) / MARKER, out / MARKER)
    (out / TRAINING_MARKER).write_text(json.dumps({
        "trained_on": "decode-format", "setting": setting, "base": str(checkpoint),
        "data": source_note, "data_checksum": _checksum(examples), "examples": len(examples),
        "steps": state.global_step, "heldout_accuracy": acc, "heldout_examples": len(heldout),
    }, indent=2) + "\n")
    return TrainResult(out, len(examples), state.global_step, acc, len(heldout))
