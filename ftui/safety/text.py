"""The one rule for showing untrusted text: text from models, datasets, logs, failure reasons,
event fields and file names is shown *literally*, with every character that a terminal would
act on made visible as an escape (``\\x1b``, ``\\r``, ``\\u202e``), never interpreted.

Why each class of character is escaped:

- C0 controls (except newline and tab where several lines are shown), DEL and C1 (U+0080 to
  U+009F, which holds the 8-bit CSI 0x9b and OSC 0x9d): ESC and the 8-bit introducers start
  escape sequences that set the clipboard (OSC 52), the window title, clear the screen or move
  the cursor; ``\\r`` and backspace overwrite what was printed; BEL rings.
- U+2028 / U+2029, the line and paragraph separators: a line break a terminal shows but a
  reader splitting on ``\\n`` does not see.
- The bidi embedding, override and isolate controls (U+202A to U+202E, U+2066 to U+2069): they
  reorder what is *shown* without changing what is there ("Trojan Source"), so a file name or
  a command could read as something it is not. Right-to-left text needs none of them (the
  terminal's bidi algorithm orders Arabic or Hebrew letters by itself), so escaping them costs
  real text nothing. The implicit marks (LRM, RLM) only place neutral characters and are kept.
- Lone surrogates (a JSON ``"\\ud800"``): they cannot be encoded, and writing one would end the
  command with UnicodeEncodeError.

Escaping is per character, so it holds across chunk boundaries: a model's answer streamed token
by token, with an escape sequence split between two tokens, shows each half escaped.

Rich markup is a separate matter: :func:`visible` leaves ``[`` alone, and callers show its result
through ``rich.text.Text`` (or ``rich.markup.escape`` it into a markup string), never as markup.
:class:`SafeConsole` applies the rule to everything a Rich console prints, whether stdout is a
terminal or a pipe (Rich passes control characters through to both), and
:class:`VisibleWriter` to a plain text stream (``ftui watch``, the chat REPL's tokens).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, TextIO

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

# Hand-written: no stdlib or Rich function escapes a terminal's control characters visibly
# (rich.control.strip_control_codes drops only five of them, and keeps ESC).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_CONTROL_OR_BREAK = re.compile(_CONTROL.pattern[:-1] + r"\n\t]")
_ONE_LINE = {"\n": "⏎", "\t": "→"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _ONE_LINE.get(char) or char.encode("unicode_escape", "backslashreplace").decode("ascii")


def visible(text: Any, one_line: bool = False) -> str:
    """``text`` (any value: ``str()`` of it) with its control characters as escapes (``\\x1b``,
    ``\\r``, ``\\x9b``, ``\\u202e``); newlines and tabs kept, or with ``one_line`` shown as ``⏎``
    and ``→`` (a table cell, a one-line preview). Idempotent: its result has nothing left to
    escape. Show the result through rich ``Text`` or escape it before markup."""
    text = text if isinstance(text, str) else str(text)
    return (_CONTROL_OR_BREAK if one_line else _CONTROL).sub(_escape, text)


def has_control(text: str) -> bool:
    """Whether :func:`visible` would change ``text`` (newlines and tabs allowed)."""
    return _CONTROL.search(text) is not None


class SafeConsole(Console):
    """A Rich console that applies :func:`visible` to every string it is given (before markup is
    read: a control character is shown, not dropped as Rich drops ``\\r`` and BEL) and to every
    segment it renders (whatever a caller built: a Text, a table cell, a progress bar's label).
    Rich's own control segments (a live display's cursor moves) and styles are left alone."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(visible(text), **kwargs)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control or not has_control(segment.text):
                yield segment
            else:
                yield Segment(visible(segment.text), segment.style)


class VisibleWriter:
    """A text stream that writes :func:`visible` of what it is given to ``stream`` (newlines and
    tabs kept): for plain output that carries untrusted text (``ftui watch``, the chat REPL's
    tokens). Per character, so an escape sequence split between two writes is still escaped."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(visible(text))

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()
