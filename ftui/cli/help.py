"""``ftui --help`` wrapped by terminal cells: argparse wraps with textwrap, which counts a
CJK character as one column (it takes two) and breaks only at spaces (Chinese has none), so a
Chinese help line would run past the terminal's edge. Text without wide characters is left
to argparse, so the English help is exactly what it was. And a mistyped command or choice
names the one meant (Python 3.14's argparse can, with suggest_on_error; 3.10-3.13 cannot)."""

from __future__ import annotations

import argparse
import difflib
import re

from rich.cells import cell_len

from ftui.i18n import _

# No line starts with closing punctuation (，。；：）、！？ and their ASCII forms) or ends with an opening one.
_NO_LINE_START = set("，。；：）】」』、！？,.;:)]!?%")
_NO_LINE_END = set("（【「『([")
# A token: a run of non-space narrow characters (a word, a path, an option), or one wide character
_TOKEN = re.compile(r"[\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6]|[^\s\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6]+|\s+")


def has_wide(text: str) -> bool:
    return cell_len(text) != len(text)


def wrap_cells(text: str, width: int) -> list[str]:
    """``text`` (whitespace collapsed, as argparse does) in lines of at most ``width`` cells,
    broken at spaces or between wide characters; a word longer than a line stays whole."""
    tokens = _TOKEN.findall(re.sub(r"\s+", " ", text).strip())
    lines: list[str] = []
    line: list[str] = []
    for token in tokens:
        if token == " ":
            if line:
                line.append(" ")
            continue
        if line and cell_len("".join(line) + token) > width:
            carried: list[str] = []
            # closing punctuation goes down with the character before it; an opening one with the next
            if token[0] in _NO_LINE_START and len(line) > 1 and line[-1] != " ":
                carried = [line.pop()]
            while len(line) > 1 and line[-1] != " " and line[-1][-1] in _NO_LINE_END:
                carried.insert(0, line.pop())
            lines.append("".join(line).rstrip())
            line = carried
        line.append(token)
    if line:
        lines.append("".join(line).rstrip())
    return [text for text in lines if text]


class CellWidthHelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, wrapping help and descriptions that hold wide characters by cells."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return wrap_cells(text, width) if has_wide(text) else super()._split_lines(text, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:  # laid out by hand (examples, a command to copy): kept as written
            return "\n".join(indent + line for line in text.splitlines())
        if not has_wide(text):
            return super()._fill_text(text, width, indent)
        return "\n".join(indent + line for line in wrap_cells(text, width - len(indent)))


def use_cell_width(parser: argparse.ArgumentParser) -> None:
    """The formatter for ``parser`` and every subcommand's parser (add_parser does not pass it on)."""
    parser.formatter_class = CellWidthHelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                use_cell_width(sub)


class SuggestingParser(argparse.ArgumentParser):
    """An ArgumentParser whose "invalid choice" names the closest choice (``ftui tarin``: did
    you mean train?); a subcommand's parser is one too (add_subparsers makes its own class)."""

    def _check_value(self, action: argparse.Action, value: object) -> None:
        choices = action.choices
        if choices is not None and value not in choices and isinstance(value, str):
            match = difflib.get_close_matches(value, [str(c) for c in choices], n=1, cutoff=0.6)
            if match:
                raise argparse.ArgumentError(action, _("invalid choice: {value}; did you mean {match}?").format(
                    value=repr(value), match=repr(match[0])))
        super()._check_value(action, value)
