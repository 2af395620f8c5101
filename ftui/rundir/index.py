"""The run index (FTUI_HOME/run-index): runs a config's ``output_dir`` put outside the default
runs root, one line each, so ``ftui runs``, the runs screen and ``ftui attach`` find them from
any directory. No torch here.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ftui.rundir.paths import CONFIG_FILE, RUN_INDEX_FILE, default_runs_root, ftui_home
from ftui.rundir.run_files import UnreadableFile, file_size, read_at

INDEX_READ_MAX = 256 << 10  # the index's newest bytes a reader reads (thousands of runs): listing stays bounded


def run_index_path() -> Path:
    return ftui_home() / RUN_INDEX_FILE


def is_default_root(root: str | os.PathLike[str]) -> bool:
    """Whether ``root`` is the user's default runs root: listing it lists every run the user
    started (the index's too); an explicit other ``--root`` lists only what is under it."""
    return os.path.realpath(Path(root).expanduser()) == os.path.realpath(Path(default_runs_root()).expanduser())


def record_run(run_dir: str | os.PathLike[str]) -> None:
    """Adds a run created outside the default runs root (a config's ``output_dir``) to the
    user's run index, so ``ftui runs``, the runs screen and ``ftui attach`` find it from any
    directory. One appended line per run (a small O_APPEND write: concurrent starts do not
    interleave). Best effort: a run is not refused because the index cannot be written."""
    path = os.path.realpath(Path(run_dir).expanduser())
    if is_default_root(os.path.dirname(path)) or "\n" in path:
        return
    try:
        ftui_home().mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(run_index_path(), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # forget_run rewrites the file in place under this lock
            os.write(fd, (path + "\n").encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)
    except OSError:
        pass


def forget_run(run_dir: str | os.PathLike[str]) -> None:
    """Removes a run's lines from the run index (a deleted run). Rewritten in place under the
    index's flock, which record_run takes too, so a run recorded meanwhile is not lost.
    Best effort, like record_run: an entry whose directory is gone is skipped by every reader."""
    path = os.path.realpath(Path(run_dir).expanduser()).encode("utf-8", "surrogateescape")
    try:
        fd = os.open(run_index_path(), os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(os.dup(fd), "r+b") as fh:
            lines = fh.read().split(b"\n")
            kept = [line for line in lines if line and line != path]
            if len(kept) != len([line for line in lines if line]):
                fh.seek(0)
                fh.write(b"".join(line + b"\n" for line in kept))
                fh.truncate()
    except OSError:
        pass
    finally:
        os.close(fd)


def indexed_run_dirs() -> list[Path]:
    """The run directories the index names, newest last, each once. Reads at most the
    index's last INDEX_READ_MAX bytes; a line that is not an absolute path is ignored.
    Whether each directory still exists is the caller's check (``_summarize_indexed``)."""
    index = run_index_path()
    try:
        start = max(0, file_size(index) - INDEX_READ_MAX)
        raw = read_at(index, start, INDEX_READ_MAX)
    except (UnreadableFile, OSError):
        return []
    if not raw:
        return []
    lines = raw.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the first line may be cut
    out: dict[str, Path] = {}
    for line in lines:
        text = line.decode("utf-8", "surrogateescape")
        if text.startswith("/") and "\0" not in text:
            out.pop(text, None)
            out[text] = Path(text)
    return list(out.values())


def indexed_run_exists(d: Path) -> bool:
    try:
        os.stat(d / CONFIG_FILE)
        return True
    except (OSError, ValueError):
        return False
