"""What a user types at ``ftui chat``'s prompt, for the tests that drive the REPL: each call of
``input()`` takes the next line, then EOF (Ctrl-D) ends the conversation."""

from __future__ import annotations

import builtins


def type_lines(monkeypatch, lines: list[str]) -> None:
    """``input()`` answers ``lines`` in order, then raises EOFError as a terminal would."""
    pending = iter(lines)

    def typed(prompt=""):
        try:
            return next(pending)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr(builtins, "input", typed)
