"""The CLI's consoles and exit codes: how every command prints (untrusted text shown safely,
errors, warnings and notes in one style) and what it exits with. An operation's notices and
refusals (ftui.ops) are rendered here, the same way by every command."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from rich.console import Console
from rich.markup import escape

from ftui.i18n import N_, _
from ftui.safety.text import SafeConsole

if TYPE_CHECKING:
    from ftui.ops.errors import OpError
    from ftui.ops.notices import Notice

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# Ctrl-C (128 + SIGINT, as a shell reports it): `ftui train` stopped the run (it resumes),
# `ftui watch` stopped watching (the run goes on).
EXIT_INTERRUPTED = 130
EXIT_CODES = N_("exit codes: 0 the run completed, 1 it failed or was stopped, 2 a usage or config error, "
                "130 Ctrl-C (train: the run was stopped and can be resumed; watch: the run goes on)")


def safe_console(stderr: bool = False) -> Console:
    """Every console here prints untrusted text (dataset records, run names, model output,
    failure reasons): a SafeConsole shows its control characters as escapes, to a terminal and a
    pipe alike (ftui.safety.text); callers escape markup, and emoji codes (``:x:``), which
    rich.markup.escape leaves alone, are never replaced. Lines are not broken at the console's
    width (80 columns when the output is not a terminal): a path or a command printed whole can
    be copied (the terminal wraps it)."""
    return SafeConsole(stderr=stderr, emoji=False, soft_wrap=True)


# Babel (on Python 3.11) cannot see a _() call inside an f-string: the labels are translated outside one.
def error_line(message: str) -> str:
    """``error: MESSAGE`` in red for a console (the message is escaped: it may quote a file)."""
    return "[red]{label}:[/] {message}".format(label=_("error"), message=escape(message))


def warning_line(message: str) -> str:
    return "[yellow]{label}:[/] {message}".format(label=_("warning"), message=escape(message))


def note_line(message: str) -> str:
    return "[yellow]{label}:[/] {message}".format(label=_("note"), message=escape(message))


def print_notices(err: Console, notices: Iterable[Notice]) -> None:
    """An operation's warnings and notes, in the order it said them."""
    for notice in notices:
        err.print(warning_line(notice.text) if notice.level == "warning" else note_line(notice.text))


def refusal(err: Console, error: OpError) -> int:
    """Prints an operation's refusal (after the notices said before it); returns the exit code:
    1 when the machine failed the request, 2 when the request was refused."""
    print_notices(err, error.notices)
    err.print(error_line(error.message))
    return EXIT_FAILED if error.failed else EXIT_USAGE
