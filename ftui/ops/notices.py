"""What an operation has to tell the user besides its result: warnings (it goes on, but look)
and notes (what it changes or replaces). The front ends render them in order."""

from __future__ import annotations

from dataclasses import dataclass

WARNING, NOTE = "warning", "note"


@dataclass(frozen=True)
class Notice:
    level: str  # WARNING or NOTE
    text: str


def warning(text: str) -> Notice:
    return Notice(WARNING, text)


def note(text: str) -> Notice:
    return Notice(NOTE, text)
