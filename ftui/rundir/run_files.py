"""Reading a run's files as untrusted input: regular files only, bounded reads, by byte offset.

A run directory may hold anything (another user's files, a FIFO planted as events.jsonl, a
device): every reader of a run's files (the event reader, the log tailer, launch.json,
job.json, the run index) reads through here, so none can hang on a FIFO or read without
bound. No torch here.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ftui.i18n import _
from ftui.rundir.paths import CONFIG_FILE


MAX_READ = 64 << 20  # bytes one read takes at most: a reader never holds more of a file at once
MAX_LINE = 64 << 20  # a torn line longer than this is dropped (no writer makes one; /dev/zero would)


class UnreadableFile(Exception):
    """A run file that is there but cannot be read as one (permissions, a FIFO, a directory,
    a device): the message says which and why, for the run to be listed as unreadable."""


def open_regular(path: Path) -> int | None:
    """A read-only descriptor of ``path`` if it is a regular file; None if there is none.

    O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever, and a FIFO,
    /dev/zero or a directory (behind a symlink or not) is refused before anything is read."""
    name = Path(path).name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise UnreadableFile(f"{name}: {err.strerror or err}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as err:
        os.close(fd)
        raise UnreadableFile(f"{name}: {err.strerror or err}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise UnreadableFile(_("{name} is a directory, not a regular file").format(name=name))
        if stat.S_ISFIFO(mode):
            raise UnreadableFile(_("{name} is a FIFO, not a regular file").format(name=name))
        raise UnreadableFile(_("{name} is a device or socket, not a regular file").format(name=name))
    return fd


def read_at(path: Path, offset: int, size: int) -> bytes | None:
    """Up to ``size`` bytes (never more than MAX_READ) of a regular file from ``offset``;
    None when the file does not exist. Every read of a run's events goes through here."""
    fd = open_regular(path)
    if fd is None:
        return None
    try:
        return os.pread(fd, min(size, MAX_READ), offset)
    except OSError as err:
        raise UnreadableFile(f"{Path(path).name}: {err.strerror or err}") from None
    finally:
        os.close(fd)


def file_size(path: Path) -> int:
    """The size of a regular file (0 when it does not exist; UnreadableFile when not regular)."""
    fd = open_regular(path)
    if fd is None:
        return 0
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def line_start_after(path: Path, offset: int) -> int:
    """The offset of the first line that starts at or after ``offset``."""
    if offset <= 0:
        return 0
    pos = offset - 1
    while True:
        chunk = read_at(path, pos, 4096)
        if not chunk:
            return pos
        nl = chunk.find(b"\n")
        if nl >= 0:
            return pos + nl + 1
        pos += len(chunk)


def read_complete_lines(path: Path, offset: int, pending: bytes, max_bytes: int | None = None) -> tuple[bytes | None, int, bytes]:
    """Reads what a growing file gained since ``offset`` and returns (the complete lines, or
    None; the new offset; the torn last line to keep for next time). Shared by the event
    reader and the log tailer: both must never re-read a file and never split a line.
    Reads at most MAX_READ bytes per call; raises UnreadableFile for a file that is not a
    regular one."""
    data = read_at(path, offset, MAX_READ if max_bytes is None else max_bytes)
    if not data:
        return None, offset, pending
    complete, sep, rest = (pending + data).rpartition(b"\n")
    if len(rest) > MAX_LINE:
        rest = b""  # not a line any writer makes: drop it rather than grow without bound
    return (complete if sep else None), offset + len(data), rest


# A step line as EventWriter writes it (compact separators, schema key order). Pulling
# (t, step, loss, lr) out of a run of such lines with one `findall` costs a small fraction of


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a run (its config.yaml); LookupError when it cannot be looked
    into (another user's run)."""
    try:
        os.stat(path / CONFIG_FILE)
        return True
    except OSError as err:
        if isinstance(err, PermissionError):
            raise LookupError(_("{path} cannot be read: {reason} (another user's run?)").format(path=path, reason=err.strerror)) from None
        return False
