"""Tailing a run's train.log by byte offset (never re-reading the file). No torch here."""

from __future__ import annotations

import os
from pathlib import Path

from ftui.rundir.run_files import UnreadableFile, file_size, line_start_after, read_complete_lines


class LogTailer:
    """Reads new complete lines of train.log by byte offset (never re-reads the file).

    Starts at most ``backlog`` bytes before the end, so attaching to a huge log is instant."""

    def __init__(self, path: str | os.PathLike[str], backlog: int = 64 * 1024):
        self.path = Path(path)
        self.offset: int | None = None
        self.backlog = backlog
        self._pending = b""

    def read_new(self, max_bytes: int = 1 << 20) -> list[str]:
        try:
            if self.offset is None:
                self.offset = line_start_after(self.path, max(0, file_size(self.path) - self.backlog))
            complete, self.offset, self._pending = read_complete_lines(self.path, self.offset, self._pending, max_bytes)
        except UnreadableFile:
            return []  # train.log as a FIFO or a device: show no log rather than hang
        if complete is None:
            return []
        # Progress bars rewrite one line with \r: keep what the terminal would show last.
        return [line.rsplit(b"\r", 1)[-1].decode("utf-8", "replace") for line in complete.split(b"\n")]
