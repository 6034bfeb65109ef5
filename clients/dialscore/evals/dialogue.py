"""The turn type shared by the MuTual and DECODE readers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Turn:
    """One utterance. `id` identifies the turn inside its dialogue (never rely on its parity)."""

    id: int
    speaker: str
    text: str

    def to_wire(self) -> dict[str, object]:
        """The service's turn object: `{"id", "speaker", "text"}`."""
        return {"id": self.id, "speaker": self.speaker, "text": self.text}
