"""Directories ftui makes beside the user's own to fill or empty later (an export's temporary
directory, the old export a ``--force`` export moves aside, a run being deleted), marked so
that a later ftui can tell them from anything else and clean up after a job that was killed.

Each holds a marker file, ``.ftui-temp.json`` (created with ``O_EXCL | O_NOFOLLOW``), naming
what made it; the process that works in the directory holds an exclusive ``flock`` on the
marker for as long as it works there. A directory is a leftover only when its name has the
pattern its maker gives it, it is a real directory of this user's (not a link), its marker is
a regular file whose JSON names one of the expected kinds, and the marker's lock can be
taken: the process that held it is gone (``kill -9`` and the OOM killer release flocks too),
so nothing will finish it. The finder keeps that lock while it removes the directory, and the
marker goes last, so an interrupted removal is still recognised the next time. An empty
directory with the pattern's name (a removal killed between its last two steps) loses nothing
when it goes; a job whose new directory a sweep removed before its marker was in makes another
(``make_temp_dir``).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftui.safety.bounded_input import load_json
from ftui.i18n import _, ngettext

MARKER = ".ftui-temp.json"
MARKER_MAX = 64 << 10  # a marker is a few hundred bytes; a larger file is not one ftui wrote


def claim(directory: Path, kind: str, **info: Any) -> int:
    """Marks ``directory`` (one this process just made, or a run it is about to delete) as
    ftui's ``kind`` and locks the marker; returns the lock's descriptor (close it when the
    work is done or handed on). BlockingIOError when another live process holds the marker."""
    fd = os.open(directory / MARKER, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(_("{path} is not a regular file").format(path=directory / MARKER))
        record = {"ftui_temp": kind, "pid": os.getpid(), "host": socket.gethostname(), "created": time.time(), **info}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(record).encode("utf-8"))
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_temp_dir(parent: Path, prefix: str, suffix: str, kind: str, **info: Any) -> tuple[Path, int]:
    """A new directory in ``parent`` with an unpredictable name (``tempfile.mkdtemp``: created
    with O_EXCL semantics, mode 0700, so no other user can plant or enter it), marked and
    locked as ``kind``. OSError when it cannot be made."""
    for attempt in range(3):
        path = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=parent))
        try:
            return path, claim(path, kind, **info)
        except FileNotFoundError:  # a sweep (ftui runs, another export) took it for an empty leftover before the marker was in
            if attempt == 2:
                raise
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
    raise AssertionError("unreachable")


def open_marker(path: Path, limit: int) -> tuple[int, Any]:
    """Opens and reads a marker ftui wrote (this module's, or an export's ``.ftui-export.json``)
    without following a link or blocking on a FIFO: returns its descriptor (the caller closes
    it, after taking its lock where it needs one) and its JSON. OSError when it cannot be
    opened, ValueError (the descriptor closed) when it is not a regular file of at most
    ``limit`` bytes holding JSON ftui can read (bounded_input.load_json: a document nested
    deeper than the stack is a ValueError too, not a RecursionError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise ValueError(path)
        return fd, load_json(os.read(fd, limit + 1).decode("utf-8"))
    except BaseException:
        os.close(fd)
        raise


def release(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


@dataclass
class Leftover:
    """A directory found to be ftui's and abandoned; ``fd`` holds its marker's lock (None for
    an empty one)."""

    path: Path
    kind: str | None
    fd: int | None
    info: dict[str, Any] | None = None  # the marker's record (what claim was given), None for an empty one


def inspect(path: Path, kinds: tuple[str, ...]) -> Leftover | None:
    """``path`` as a Leftover when it is certainly ftui's and no live process works in it (the
    module docstring's rule), else None. The caller checks the name's pattern."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return None
    try:
        fd, record = open_marker(path / MARKER, MARKER_MAX)
    except FileNotFoundError:
        try:
            empty = not any(os.scandir(path))
        except OSError:
            return None
        return Leftover(path, None, None) if empty else None
    except (OSError, ValueError):
        return None
    try:
        if not isinstance(record, dict) or record.get("ftui_temp") not in kinds:
            raise ValueError
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: its process still works there
    except (OSError, ValueError):
        os.close(fd)
        return None
    return Leftover(path, record["ftui_temp"], fd, record)


def remove(path: Path, fd: int | None = None) -> list[str]:
    """Removes a marked directory: everything but the marker (``shutil.rmtree`` never follows a
    link: it removes the link), then the marker, then the directory; releases ``fd``. Returns
    what could not be removed (``path: reason``), empty when all went."""
    failed: list[str] = []

    def note(_func: Any, p: str, exc_info: Any) -> None:  # onerror's signature (onexc is 3.12+)
        exc = exc_info[1]
        failed.append(f"{p}: {getattr(exc, 'strerror', None) or exc}")

    try:
        try:
            entries = list(os.scandir(path))
        except FileNotFoundError:
            return []
        except OSError as err:
            return [f"{path}: {err.strerror or err}"]
        for entry in entries:
            if entry.name == MARKER:
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, onerror=note)
                else:
                    os.unlink(entry.path)
            except OSError as err:
                failed.append(f"{entry.path}: {err.strerror or err}")
        if failed:
            return failed
        try:
            rest = [e.name for e in os.scandir(path) if e.name != MARKER]
        except OSError as err:
            return [f"{path}: {err.strerror or err}"]
        if rest:  # written meanwhile, or a removal that did not remove: the marker stays, so it is found again
            return [_("{path}: still there").format(path=path / rest[0])]
        for step in (lambda: os.unlink(path / MARKER), lambda: os.rmdir(path)):
            try:
                step()
            except FileNotFoundError:
                pass
            except OSError as err:
                return [f"{path}: {err.strerror or err}"]
        return []
    finally:
        release(fd)


def sweep(parent: Path, pattern: re.Pattern[str], kinds: tuple[str, ...]) -> tuple[list[Path], list[str]]:
    """Removes the leftovers in ``parent`` whose names match ``pattern``; returns those removed
    and what could not be removed. A parent that cannot be listed has none to offer."""
    removed: list[Path] = []
    failed: list[str] = []
    try:
        names = [e.name for e in os.scandir(parent) if pattern.fullmatch(e.name)]
    except OSError:
        return removed, failed
    for name in sorted(names):
        found = inspect(parent / name, kinds)
        if found is None:
            continue
        problems = remove(found.path, found.fd)
        if problems:
            failed.append(problems[0])
        else:
            removed.append(found.path)
    return removed, failed


def sweep_line(removed: list[Path], failed: list[str], what: str) -> str | None:
    """One line saying what a sweep did (None when it found nothing). ``what`` names the job:
    "export", "delete" (a word ftui's messages keep in English, like its commands)."""
    parts = []
    if removed:
        names = ", ".join(str(p) for p in removed[:3])
        if len(removed) > 3:
            names = _("{names} and {count} more").format(names=names, count=len(removed) - 3)
        parts.append(ngettext("removed {count} temporary directory left by an interrupted ftui {what}: {names}",
                              "removed {count} temporary directories left by interrupted ftui {what}: {names}",
                              len(removed)).format(count=len(removed), what=what, names=names))
    if failed:
        parts.append(_("could not remove what an interrupted ftui {what} left (first: {first}); remove it yourself").format(
            what=what, first=failed[0]))
    return "; ".join(parts) or None
