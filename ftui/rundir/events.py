"""The event schema (version 1): the contract between the runner and everything that reads a run.

Rank 0 of a training job appends one JSON object per line to ``RUN_DIR/events.jsonl``; the
dashboard, ``ftui attach``, ``ftui watch`` and ``ftui train``'s follower read it. This module
must stay free of torch (docs/architecture.md): it is imported by the dashboard.

Every line is ``{"v": 1, "t": <unix seconds>, "event": <kind>, ...fields}``. Readers skip a
torn last line (the writer may be in the middle of it) and unknown kinds; writers flush
every line so that a reader in another process sees it at once.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple

from ftui.i18n import _
from ftui.rundir.paths import EVENTS_FILE, RESERVE_FILE  # noqa: F401 (re-exported)

SCHEMA_VERSION = 1
# Room kept beside events.jsonl for the final record (RESERVE_FILE): the supervisor fills it at
# start; a run_end that finds the disk full deletes it and writes into the space it held.
RESERVE_BYTES = 64 * 1024
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
# How those errors read in text (a log, or an exception that wraps the OSError in its message)
DISK_FULL_TEXT = ("No space left on device", "File too large", "Disk quota exceeded")

# Required fields per event kind. Fields may be ``None`` where the meaning says so
# (``mfu`` when the device's peak is unknown, ``loss_scale`` outside fp16, ``grad_norm``
# when the step was skipped); extra fields are allowed and ignored by old readers.
REQUIRED: dict[str, tuple[str, ...]] = {
    "run_start": (
        "run_id", "engine", "precision", "method", "world_size", "nodes", "model",
        "total_params", "trainable_params", "max_steps", "planned_tokens_per_step",
    ),
    "step": (
        "step", "epoch", "loss", "lr", "grad_norm", "tokens", "trainable_tokens",
        "tokens_per_s", "step_time_s", "mfu", "loss_scale", "mem",
    ),
    "eval": ("step", "eval_loss"),
    "checkpoint": ("step", "path"),
    "log": ("level", "message"),
    "prepare": ("done", "total"),
    "progress": ("done", "total"),  # a predict job's examples answered so far
    "predict": ("predict_samples",),  # a predict job's results (predict_results.json's fields)
    "export": ("out",),  # an export job's result: out, files, bytes, gguf, dtype, params, commands
    "run_end": ("status", "reason"),
}
NULLABLE = {"mfu", "loss_scale", "grad_norm", "max_steps", "reason", "loss", "eval_loss"}
RUN_END_STATUSES = ("completed", "stopped", "failed")
LOG_LEVELS = ("debug", "info", "warning", "error")
# Fields of step and eval events that readers show in their own places (or not at all). Any
# other number in them is a figure of a newer stage (DPO's "rewards/accuracies", ...): readers
# show it by its name (extra_figures), so a new stage needs no dashboard code.
KNOWN_FIELDS: dict[str, frozenset[str]] = {
    "step": frozenset(REQUIRED["step"]) | {"v", "t", "event", "skipped", "window_steps", "total_tokens", "data_wait_s", "ranks"},
    "eval": frozenset(REQUIRED["eval"]) | {"v", "t", "event", "eval_tokens"},
}
MAX_EXTRA_FIGURES = 8  # a run directory is untrusted: it must not fill the screen ...
MAX_FIGURE_NAME = 40  # ... nor push the figures out of their panel
MEM_FIELDS = ("rank", "allocated", "reserved", "peak")


def make_event(kind: str, t: float | None = None, **fields: Any) -> dict[str, Any]:
    """Builds one event dict, checked against the schema (raises ValueError if not valid)."""
    event = {"v": SCHEMA_VERSION, "t": time.time() if t is None else t, "event": kind, **fields}
    problems = validate_event(event)
    if problems:
        raise ValueError(f"invalid {kind!r} event: " + "; ".join(problems))
    return event


def validate_event(event: Any) -> list[str]:
    """Returns what is wrong with an event (an empty list when it follows schema v1)."""
    if not isinstance(event, dict):
        return ["an event is a JSON object"]
    problems = []
    if event.get("v") != SCHEMA_VERSION:
        problems.append(f"v must be {SCHEMA_VERSION}, got {event.get('v')!r}")
    if not isinstance(event.get("t"), (int, float)):
        problems.append("t must be unix seconds")
    kind = event.get("event")
    if kind not in REQUIRED:
        problems.append(f"unknown event kind {kind!r}")
        return problems
    for name in REQUIRED[kind]:
        if name not in event:
            problems.append(f"{kind} lacks field {name!r}")
        elif event[name] is None and name not in NULLABLE:
            problems.append(f"{kind} field {name!r} is null")
    if kind == "run_end" and event.get("status") not in RUN_END_STATUSES:
        problems.append(f"run_end status must be one of {RUN_END_STATUSES}")
    if kind == "log" and event.get("level") not in LOG_LEVELS:
        problems.append(f"log level must be one of {LOG_LEVELS}")
    if kind == "step" and isinstance(event.get("mem"), list):
        for entry in event["mem"]:
            if not isinstance(entry, dict) or any(k not in entry for k in MEM_FIELDS):
                problems.append(f"step mem entries need {MEM_FIELDS}")
                break
    return problems


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
# json.loads per line, which is what lets the dashboard attach to a run with a million step
# events in about a second. Lines of any other shape take the full parse.
_NUM = rb"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
_STEP_LINE = re.compile(rb'\{"v":1,"t":(' + _NUM + rb'),"event":"step","step":([0-9]{1,15}),"epoch":[^,\n]*,"loss":(null|' + _NUM + rb')(?:,"lr":(null|' + _NUM + rb'))?[,}]')
_OTHER_KIND = re.compile(rb',"event":"(?!step")')


class StepColumns(NamedTuple):
    """Consecutive step events reduced to what the loss and learning-rate curves need
    (``read_new(compact=True)``)."""

    t: array
    step: array
    loss: array  # NaN where the loss was null
    lr: array  # NaN where the learning rate was null or absent


@dataclass
class EventReader:
    """Reads new events from a growing events.jsonl by byte offset, never re-reading the file.

    A line without its newline yet is left for the next call (the writer may be halfway
    through it); a line that is not JSON, or of an unknown kind or version, is skipped.
    """

    path: Path
    offset: int = 0
    skipped: int = 0
    problem: str | None = None  # why the file cannot be read (then read_new returns nothing)
    _pending: bytes = field(default=b"", repr=False)
    _seen_step: bool = field(default=False, repr=False)
    # The first step event read carried extra figures (a preference stage's): StepColumns have
    # no room for them, so this file's step lines all take the full parse (their figures are plotted).
    _steps_have_figures: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)

    def read_new(self, max_bytes: int | None = None, compact: bool = False) -> list[Any]:
        """New complete events (all there are when ``max_bytes`` is None). With ``compact``,
        runs of step events come as :class:`StepColumns`; the first step event ever seen and
        the last one of the batch still come as full dicts (they carry the figures the
        dashboard shows), and so do all step events of a file whose first step event
        carries extra figures (events.extra_figures: a preference stage's rewards, plotted
        over the run). A file that cannot be read sets ``problem`` and gives nothing."""
        out: list[Any] = []
        while True:
            before = self.offset
            try:
                complete, self.offset, self._pending = read_complete_lines(self.path, self.offset, self._pending, max_bytes)
            except UnreadableFile as err:
                self.problem = str(err)
                return out
            self.problem = None
            if complete is not None:
                out.extend(self._parse_compact(complete) if compact else self._parse(complete.split(b"\n")))
            if max_bytes is not None or self.offset == before:
                return out

    def _parse_compact(self, chunk: bytes) -> list[Any]:
        out: list[Any] = []
        pos = 0
        n_steps = n_other = 0
        for m in _OTHER_KIND.finditer(chunk):
            start = chunk.rfind(b"\n", 0, m.start()) + 1
            if start < pos:
                continue  # a second match inside the same line
            end = chunk.find(b"\n", m.start())
            end = len(chunk) if end < 0 else end
            n_steps += self._step_segment(chunk[pos:start], out)
            out.extend(self._parse((chunk[start:end],)))
            n_other += 1
            pos = end + 1
        n_steps += self._step_segment(chunk[pos:], out)
        if n_steps + n_other != chunk.count(b"\n") + 1:
            # Some line is in neither shape (another writer, another key order): take the
            # exact, slow path for this batch.
            self._seen_step = any(isinstance(e, dict) and e["event"] == "step" for e in out) or self._seen_step
            return list(self._parse(chunk.split(b"\n")))
        return out

    def _step_segment(self, seg: bytes, out: list[Any]) -> int:
        """Appends one segment of step lines: StepColumns, with the first-ever and the last
        step as full events. Returns how many step lines it held."""
        found = _STEP_LINE.findall(seg)
        count = len(found)
        if not found:
            return 0
        if not self._seen_step:
            first_end = seg.find(b"\n")
            first = list(self._parse((seg if first_end < 0 else seg[:first_end],)))
            out.extend(first)
            found = found[1:]
            self._steps_have_figures = any(e["event"] == "step" and extra_figures(e) for e in first)
            seg = b"" if first_end < 0 else seg[first_end + 1:]
        if self._steps_have_figures:
            out.extend(self._parse(seg.split(b"\n")))
            return count
        if len(found) > 1:
            ts, steps, losses, lrs = zip(*found[:-1])
            out.append(StepColumns(
                array("d", map(float, ts)), array("l", map(int, steps)), _floats(losses), _floats(lrs),
            ))
        if found:
            body = seg.rstrip(b"\n")
            out.extend(self._parse((body[body.rfind(b"\n") + 1 :],)))
        return count

    def _parse(self, lines: Iterable[bytes]) -> Iterable[dict[str, Any]]:
        for raw in lines:
            if not raw.strip():
                continue
            try:
                event = json.loads(raw)
            except (ValueError, UnicodeDecodeError, RecursionError):  # a line nested deeper than the stack is not an event either
                self.skipped += 1
                continue
            if not well_formed(event):
                self.skipped += 1
                continue
            if event["event"] == "step":
                self._seen_step = True
            yield event


def _floats(found: Iterable[bytes]) -> array:
    """Numbers pulled by _STEP_LINE as doubles: NaN for null or absent (an empty match)."""
    if b"null" not in found and b"" not in found:  # the usual case, at C speed
        return array("d", map(float, found))
    return array("d", (float(x) if x and x != b"null" else math.nan for x in found))


_INT_FIELDS = ("step", "max_steps", "world_size", "nodes", "tokens", "trainable_tokens", "total_tokens",
               "total_params", "trainable_params", "resumed_from_step", "exit_code", "planned_tokens_per_step")
_FLOAT_FIELDS = ("t", "epoch", "loss", "lr", "grad_norm", "tokens_per_s", "step_time_s", "mfu", "loss_scale", "eval_loss")
_TEXT_FIELDS = ("run_id", "engine", "precision", "method", "model", "status", "reason", "hint", "error_type",
                "error_message", "level", "message", "path")
_BIG = 1 << 62  # the loss curve keeps steps in C longs


def extra_figures(event: dict[str, Any]) -> tuple[tuple[str, int | float], ...]:
    """The numbers of a step or eval event beyond its KNOWN_FIELDS, as (name, value) in file
    order: finite ints and floats only (not bools), names of printable characters only (no
    escape sequences; they are still untrusted text, never markup), at most
    MAX_EXTRA_FIGURES of them."""
    known = KNOWN_FIELDS.get(event.get("event"), frozenset())
    out: list[tuple[str, int | float]] = []
    for name, value in event.items():
        if name in known or not 0 < len(name) <= MAX_FIGURE_NAME or not name.isprintable():
            continue
        if type(value) is int and -_BIG < value < _BIG or type(value) is float and math.isfinite(value):
            out.append((name, value))
            if len(out) == MAX_EXTRA_FIGURES:
                break
    return tuple(out)


def fmt_figure(value: int | float) -> str:
    return f"{value:,}" if type(value) is int else f"{value:.4g}"


def well_formed(event: Any) -> bool:
    """Whether a parsed line is an event readers can fold without checking each field again:
    a known kind of schema v1 whose fields, where present, have their types (a string
    ``"step"``, a ``"loss": "NaN"`` or an out-of-range number would crash them later)."""
    if not isinstance(event, dict) or event.get("v") != SCHEMA_VERSION or event.get("event") not in REQUIRED:
        return False
    for name in _INT_FIELDS:
        v = event.get(name)
        if v is not None and (type(v) is not int or not -_BIG < v < _BIG):
            return False
    for name in _FLOAT_FIELDS:
        v = event.get(name)
        if v is not None and (type(v) not in (int, float) or (type(v) is int and not -_BIG < v < _BIG)):
            return False
    if not isinstance(event.get("t"), (int, float)):
        return False
    for name in _TEXT_FIELDS:
        if event.get(name) is not None and not isinstance(event[name], str):
            return False
    kind = event["event"]
    if kind in ("step", "eval") and event.get("step") is None:
        return False
    if kind == "run_end" and event.get("status") not in RUN_END_STATUSES:
        return False
    mem = event.get("mem")
    if mem is not None and not (isinstance(mem, list) and all(
            isinstance(m, dict) and all(m.get(k) is None or (type(m[k]) is int and -_BIG < m[k] < _BIG) for k in MEM_FIELDS)
            for m in mem)):
        return False
    return True


LIFECYCLE_TAIL = 1 << 20


def last_lifecycle_event(path: Path) -> str | None:
    """The kind of the last run_start or run_end in the file's last LIFECYCLE_TAIL bytes (None
    if neither is there). run_end is always a job's last record, so this says whether the job
    that wrote the file last has ended, without reading a long run's whole history."""
    tail = LIFECYCLE_TAIL
    try:
        size = file_size(path)
        reader = EventReader(path, offset=line_start_after(path, size - tail))
        events = reader.read_new(tail + (64 << 10))
    except UnreadableFile:
        return None
    kinds = [e["event"] for e in events if e["event"] in ("run_start", "run_end")]
    return kinds[-1] if kinds else None


def read_all(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All complete, known events of a file (for tests and one-shot readers)."""
    return EventReader(Path(path)).read_new()
