"""The rollouts file of a grpo or ppo run: every completion the policy generated, its prompt,
reference, per-function rewards and advantage, one JSON line each (``rollouts.jsonl``), so
that reward hacking can be read as it happens (``ftui rollouts RUN``, the rollout browser).

Bounded on both sides. The writer (the runner's rank 0, once per generation: one open file, a
line per row, a flush) cuts each text at TEXT_CAP characters (the row says ``cut``) and, past
``cap_bytes``, turns the file into OLDER_FILE (replacing the one before) and starts a new one:
at most about twice the cap on disk, the oldest rollouts dropped. The reader takes the file as
untrusted (a torn last line, a hand-edited or hostile one): it reads at most READ_CAP bytes of
each file (the newest), skips a line that is not a row of the right types, and returns at most
MAX_ROWS rows (the newest). No torch here: the app reads it too.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ftui.rundir.paths import CONFIG_FILE, ROLLOUTS_FILE, ROLLOUTS_OLDER_FILE as OLDER_FILE
from ftui.rundir.run_files import UnreadableFile, open_regular
from ftui.safety.bounded_input import load_yaml

__all__ = ["ROLLOUTS_FILE", "OLDER_FILE", "RolloutWriter", "RolloutTail", "read_rollouts", "valid_row", "writes_rollouts"]
TEXT_FIELDS = ("prompt", "completion", "reference")
TEXT_CAP = 200_000  # characters of each text a row keeps (a model that never stops writes more)
READ_CAP = 64 << 20  # bytes read of each file: a file ftui wrote is at most cap_bytes (32 MB)
LINE_CAP = 8 << 20  # a longer line is not one the writer wrote: skipped
MAX_ROWS = 50_000  # rows a reader keeps, the newest
MAX_REWARDS = 32  # reward functions per row ...
MAX_REWARD_NAME = 40  # ... and a name's length: a hostile row must not fill the screen
ROLLOUT_STAGES = ("grpo", "ppo")  # the stages that write rollouts
_INT_FIELDS = ("step", "generation", "group", "sample", "length")
_BIG = 1 << 53


def _finite(value: Any) -> float | None:
    """A number read from the file: a finite JSON number as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _writable(value: Any) -> float | None:
    """A figure the runner hands over (a Python, NumPy or 0-d tensor number) as the file stores it."""
    if value is None or isinstance(value, (bool, str)):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def storable(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` as one line stores it: each text cut at TEXT_CAP (``cut`` says so), NaN rewards
    as null (JSON has no NaN), the counts as ints and ``truncated`` as a bool (NumPy's or
    torch's scalars are not JSON)."""
    out = dict(row)
    for name in _INT_FIELDS:
        if name in out:
            out[name] = int(out[name])
    out["truncated"] = bool(out.get("truncated", False))
    for name in TEXT_FIELDS:
        text = out.get(name)
        if isinstance(text, str) and len(text) > TEXT_CAP:
            out[name] = text[:TEXT_CAP]
            out["cut"] = True
    out["rewards"] = {str(k): _writable(v) for k, v in dict(out.get("rewards") or {}).items()}
    out["reward"] = _writable(out.get("reward"))
    out["advantage"] = _writable(out.get("advantage")) or 0.0
    return out


class RolloutWriter:
    """Appends rows to ``run_dir/rollouts.jsonl`` (a resumed run goes on in the same file)."""

    def __init__(self, run_dir: Path, cap_bytes: int = 32 << 20):
        self.path = Path(run_dir) / ROLLOUTS_FILE
        self.older = Path(run_dir) / OLDER_FILE
        self.cap_bytes = cap_bytes
        self._fh: BinaryIO | None = open(self.path, "ab")
        self._size = self._fh.tell()

    def write(self, rows: list[dict]) -> None:
        """One JSON line per row, flushed once; past cap_bytes the file rotates first."""
        if self._fh is None:
            raise ValueError(f"{self.path}: the rollout writer is closed")
        for row in rows:
            line = (json.dumps(storable(row), ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "backslashreplace")
            if self._size and self._size + len(line) > self.cap_bytes:
                self._rotate()
            self._fh.write(line)
            self._size += len(line)
        self._fh.flush()

    def _rotate(self) -> None:
        assert self._fh is not None
        self._fh.close()
        os.replace(self.path, self.older)  # the older file before it is dropped
        self._fh = open(self.path, "ab")
        self._size = 0

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> "RolloutWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def valid_row(data: Any) -> dict[str, Any] | None:
    """A parsed line as a row of the right types (ints as ints, rewards as floats or None, texts
    as strings), or None when it is not one."""
    if not isinstance(data, dict):
        return None
    row: dict[str, Any] = {}
    for name in _INT_FIELDS:
        v = data.get(name)
        if type(v) is not int or not 0 <= v < _BIG:
            return None
        row[name] = v
    for name in ("prompt", "completion"):
        if not isinstance(data.get(name), str):
            return None
        row[name] = data[name][:TEXT_CAP]
    reference = data.get("reference")
    if reference is not None and not isinstance(reference, str):
        return None
    row["reference"] = None if reference is None else reference[:TEXT_CAP]
    rewards = data.get("rewards")
    if not isinstance(rewards, dict) or len(rewards) > MAX_REWARDS:
        return None
    row["rewards"] = {}
    for name, value in rewards.items():
        if not 0 < len(name) <= MAX_REWARD_NAME or not name.isprintable():
            return None
        if value is not None and _finite(value) is None:
            return None
        row["rewards"][name] = _finite(value)
    for name, optional in (("reward", True), ("advantage", False)):
        value = data.get(name)
        if (value is not None or not optional) and _finite(value) is None:
            return None
        row[name] = _finite(value)
    if type(data.get("truncated")) is not bool or type(data.get("cut", False)) is not bool:
        return None
    row["truncated"] = data["truncated"]
    row["cut"] = data.get("cut", False) or any(len(data.get(k) or "") > TEXT_CAP for k in TEXT_FIELDS)
    return row


@dataclass
class RolloutTail:
    """Follows a run's rollouts as they are written: :meth:`poll` returns the rows added since
    the last call; after a rotation it reads both files again (``reset`` True). The browser
    polls it in a worker, as the dashboard tails events.jsonl."""

    run_dir: Path
    skipped: int = 0  # lines that were not rows
    problem: str | None = None  # why a file could not be read (a FIFO, a device, permissions)
    _ident: tuple[int, int] | None | bool = False  # the current file's (device, inode); False: never polled
    _offset: int = 0

    def poll(self) -> tuple[list[dict], bool]:
        path = Path(self.run_dir) / ROLLOUTS_FILE
        try:
            st = path.stat()
        except OSError:
            st = None
        ident = None if st is None else (st.st_dev, st.st_ino)
        reset = ident != self._ident or (st is not None and st.st_size < self._offset)
        rows: list[dict] = []
        if reset:
            self._ident, self._offset, self.skipped = ident, 0, 0
            rows = self._read(Path(self.run_dir) / OLDER_FILE, complete_only=False)
        if st is not None:
            rows += self._read(path, complete_only=True)
        return rows[-MAX_ROWS:], reset

    def _read(self, path: Path, complete_only: bool) -> list[dict]:
        """The rows of ``path`` from the offset (the current file) or whole (the older one);
        ``complete_only``: a last line without its newline is left for the next poll."""
        rows: list[dict] = []
        try:
            fd = open_regular(path)  # a FIFO or /dev/zero planted as the file is refused, never read
            if fd is None:
                return []
            with os.fdopen(fd, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                start = self._offset if complete_only else 0
                if size - start > READ_CAP:  # only the newest READ_CAP bytes, from a line's start
                    fh.seek(size - READ_CAP)
                    fh.readline()
                else:
                    fh.seek(start)
                while fh.tell() < size:  # what is there now: a file that keeps growing is read on at the next poll
                    at = fh.tell()
                    line = fh.readline(LINE_CAP + 1)
                    if not line:
                        break
                    if not line.endswith(b"\n"):
                        if len(line) > LINE_CAP:  # too long: skip to its end
                            while line and not line.endswith(b"\n"):
                                line = fh.readline(LINE_CAP)
                            self.skipped += 1
                            continue
                        if complete_only:  # torn: the writer is still writing it
                            fh.seek(at)
                            break
                    row = _parse(line)
                    if row is None:
                        self.skipped += line.strip() != b""
                    else:
                        rows.append(row)
                        if len(rows) > 2 * MAX_ROWS:
                            del rows[:MAX_ROWS]
                if complete_only:
                    self._offset = fh.tell()
        except UnreadableFile as err:
            self.problem = str(err)
            return []
        except OSError as err:
            self.problem = f"{path.name}: {err.strerror or err}"
            return []
        return rows


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        return valid_row(json.loads(line.decode("utf-8", "replace")))
    except (ValueError, RecursionError):
        return None


def read_rollouts(run_dir: Path) -> list[dict]:
    """The run's rollouts: OLDER then current, each row validated, at most MAX_ROWS (the newest),
    each once (a resumed run's regenerated rollouts replace those of before the stop)."""
    from ftui.rundir.rollout_query import latest

    rows, _reset = RolloutTail(Path(run_dir)).poll()
    return latest(rows)


def writes_rollouts(run_dir: Path) -> bool:
    """Whether the run has rollouts to browse: a rollouts file, or a stage that writes them (its
    config.yaml, read bounded)."""
    run_dir = Path(run_dir)
    if (run_dir / ROLLOUTS_FILE).is_file() or (run_dir / OLDER_FILE).is_file():
        return True
    try:
        fd = open_regular(run_dir / CONFIG_FILE)
        if fd is None:
            return False
        with os.fdopen(fd, "rb") as fh:
            config = load_yaml(fh.read(1 << 20))
    except Exception:  # noqa: BLE001 - unreadable or not YAML: "no", never a crash
        return False
    return isinstance(config, dict) and config.get("stage") in ROLLOUT_STAGES
