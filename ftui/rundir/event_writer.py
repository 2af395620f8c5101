"""Writing a run's events: one flushed line each, and room kept for the last one on a full disk.

Rank 0 of a job appends to ``RUN_DIR/events.jsonl`` through :class:`EventWriter`; the
supervisor keeps :data:`RESERVE_FILE` beside it so that a ``run_end`` still fits when the
disk fills. The schema every line follows is ``ftui.rundir.events``. No torch here.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any, Callable

from ftui.rundir.events import make_event
from ftui.rundir.paths import RESERVE_FILE

# Room kept beside events.jsonl for the final record (RESERVE_FILE): the supervisor fills it at
# start; a run_end that finds the disk full deletes it and writes into the space it held.
RESERVE_BYTES = 64 * 1024
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
# How those errors read in text (a log, or an exception that wraps the OSError in its message)
DISK_FULL_TEXT = ("No space left on device", "File too large", "Disk quota exceeded")


class EventWriter:
    """Appends events to a run's events.jsonl, one flushed line each (rank 0 only).

    Written with os.write on an O_APPEND descriptor, so a failed write leaves no buffered
    half line behind to come out later. On a full disk a ``run_end`` may use the space of
    :data:`RESERVE_FILE`; other kinds raise the OSError (and the run then ends with it)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._torn = False  # a write stopped halfway: the next line starts on a fresh one
        self.disk_full = False  # a write failed for lack of room (ENOSPC, EFBIG, EDQUOT)
        # Called with each event once its line is written (report_to's TensorBoard and W&B);
        # events.jsonl stays the record, so a mirror must not raise (ftui.runner.report).
        self.mirrors: list[Callable[[dict[str, Any]], None]] = []

    def write(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = make_event(kind, **fields)
        # allow_nan=False: a NaN loss is written as null, never as the non-JSON token NaN.
        line = json.dumps(_finite(event), allow_nan=False, separators=(",", ":"))
        try:
            self._append(line)
        except OSError as err:
            if err.errno not in DISK_FULL_ERRNOS:
                raise
            self.disk_full = True
            if kind != "run_end" or not release_reserve(self.path.parent):
                raise
            self._append(line)
        for mirror in self.mirrors:
            mirror(event)
        return event

    def _append(self, line: str) -> None:
        if self._fd is None:
            raise ValueError("write to a closed EventWriter")
        data = (("\n" if self._torn else "") + line + "\n").encode("utf-8")
        view = memoryview(data)
        while view:
            try:
                n = os.write(self._fd, view)
            except OSError:
                self._torn = self._torn or len(view) < len(data)
                raise
            view = view[n:]
            self._torn = bool(view)
        self._torn = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "EventWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_reserve(run_dir: Path) -> None:
    """Fills :data:`RESERVE_FILE` with real blocks (not a sparse file, which a full disk
    could not back). Raises the OSError, leaving no file, when that fails."""
    path = Path(run_dir) / RESERVE_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(bytes(RESERVE_BYTES))
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        release_reserve(run_dir)
        raise


def release_reserve(run_dir: Path) -> bool:
    """Deletes the reserve (True when there was one to free)."""
    try:
        os.unlink(Path(run_dir) / RESERVE_FILE)
        return True
    except OSError:
        return False


def _finite(value: Any) -> Any:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
