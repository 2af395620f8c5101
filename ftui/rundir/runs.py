"""Run directories: create them, list them, and tell each run's status from its files.

The run directory is the whole contract between the runner and the dashboard (docs/architecture.md):
``config.yaml``, ``launch.json``, ``events.jsonl``, ``train.log``, ``checkpoints/``,
``final/``. Everything the dashboard shows is rebuilt from these files, so a run can be
re-attached after the app, the SSH session or the machine's login shell is gone.
No torch here.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from array import array
from bisect import bisect_right
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from ftui.rundir.paths import (CHECKPOINTS_DIR, CONFIG_FILE, EVENTS_FILE, FINAL_DIR, HEARTBEAT_DIR, LAUNCH_FILE, LOCK_FILE, LOG_FILE,  # noqa: F401 (re-exported)
                        RUN_INDEX_FILE, STOP_FILE, TRAINER_STATE, default_runs_root, ftui_home)
from ftui.safety.bounded_input import load_json  # json.loads with a too-deep document as a ValueError
from ftui.i18n import N_, _
from ftui.safety.text import visible
from ftui.rundir.events import RUN_END_STATUSES, EventReader, UnreadableFile, file_size, line_start_after, read_at, read_complete_lines

LIVE_STATUSES = ("starting", "running")
# A run_end says completed, stopped or failed; only a reader can conclude these two (the job is
# gone without a run_end; the files cannot be read). Every reader tells "ended" with END_STATUSES.
READER_END_STATUSES = ("died", "unreadable")
END_STATUSES = RUN_END_STATUSES + READER_END_STATUSES

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: str) -> str:
    """A run-name-safe version of any text (no path separators, no leading dot)."""
    s = _SAFE.sub("-", text).strip("-.")
    return s[:60] or "run"


def create_run_dir(root: str | os.PathLike[str], name: str) -> Path:
    """Makes ``root/<name>-<timestamp>`` (owner-only permissions); never reuses a directory."""
    root_path = Path(root).expanduser()
    root_path.mkdir(parents=True, exist_ok=True)
    base = f"{slug(name)}-{time.strftime('%Y%m%d-%H%M%S')}"
    for n in range(1, 1000):
        candidate = root_path / (base if n == 1 else f"{base}-{n}")
        try:
            candidate.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(_("could not find a free run directory name under {path}").format(path=root_path))


def write_launch_info(run_dir: Path, info: dict[str, Any]) -> None:
    tmp = run_dir / (LAUNCH_FILE + ".tmp")
    tmp.write_text(json.dumps(info, indent=1))
    tmp.replace(run_dir / LAUNCH_FILE)


LAUNCH_MAX = 1 << 20  # launch.json is a few KB; more is not one ftui wrote


def _a_time(v: Any) -> bool:
    """A plausible unix time (a NaN or a year-5000 float would break the runs list's dates)."""
    return type(v) in (int, float) and 0 < v < 1e11


def read_launch_record(run_dir: Path) -> tuple[dict[str, Any], str | None]:
    """launch.json's fields that have their types, and what is wrong with it (None when it is
    sound or absent). Only a dict with an int pid, a number start_time, a string host is
    trusted: a ``null``, a list or a string pid must not crash a reader or name a process."""
    name = LAUNCH_FILE
    try:
        raw = read_at(Path(run_dir) / LAUNCH_FILE, 0, LAUNCH_MAX + 1)
    except UnreadableFile as err:
        return {}, str(err)
    if raw is None:
        return {}, None
    if len(raw) > LAUNCH_MAX:
        return {}, _("{name} is larger than {size} bytes").format(name=name, size=LAUNCH_MAX)
    try:
        info = load_json(raw)
    except (ValueError, UnicodeDecodeError):
        return {}, _("{name} is not JSON").format(name=name)
    if not isinstance(info, dict):
        return {}, _("{name} holds {type}, not a launch record").format(name=name, type=type(info).__name__)
    checks = {"pid": lambda v: type(v) is int and 0 < v < 1 << 31, "pgid": lambda v: type(v) is int and 0 < v < 1 << 31,
              "start_time": _a_time, "create_time": _a_time, "first_start_time": _a_time,
              "earlier_s": lambda v: type(v) in (int, float) and 0 <= v < 1e10,
              "host": lambda v: isinstance(v, str)}
    bad = [k for k, ok in checks.items() if k in info and info[k] is not None and not ok(info[k])]
    for k in bad:
        del info[k]
    return info, (_("{name} has a malformed {fields}").format(name=name, fields=", ".join(bad)) if bad else None)


def read_launch_info(run_dir: Path) -> dict[str, Any]:
    """launch.json's trusted fields ({} when absent or unreadable)."""
    return read_launch_record(run_dir)[0]


def run_cuda_devices(run_dir: Path) -> str | None:
    """The CUDA_VISIBLE_DEVICES its processes got (launch.json's env: the config's ``gpus``, or
    the environment's), None when it was unset: the GPUs a dashboard of the run samples."""
    env = read_launch_info(run_dir).get("env")
    value = env.get("CUDA_VISIBLE_DEVICES") if isinstance(env, dict) else None
    return value if isinstance(value, str) and len(value) <= 4096 else None


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is not a live run.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


DIED_REASON = N_("the launcher exited without writing run_end")
STOPPED_EARLY_REASON = N_("stopped before the job could record its end (a Stop during start-up, or a second Stop that killed it)")


def reason_text(reason: str | None) -> str:
    """A run's end reason as shown: one ftui writes itself (marked with N_, stored in English
    in events.jsonl, which scripts read) in the interface's language, any other as written."""
    return _(reason) if reason else ""


def launcher_process(launch: dict[str, Any], run_dir: Path) -> psutil.Process | None:
    """The run's supervisor if it still runs on this host, else None.

    A pid alone is not enough: after the supervisor exits, the kernel may give its pid to any
    other process. It must also have the start time launch.json recorded (``create_time``),
    or, for runs recorded before that, the run directory on its command line."""
    pid = launch.get("pid")
    if not pid or launch.get("host") not in (None, socket.gethostname()):
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        recorded = launch.get("create_time")
        if recorded is not None:
            return proc if abs(proc.create_time() - recorded) < 1.0 else None
        resolved = str(Path(run_dir).resolve())
        return proc if any(resolved in arg for arg in proc.cmdline()) else None
    except psutil.Error:
        return None


def job_lock_held(run_dir: Path) -> bool | None:
    """Whether a job holds the run directory's lock; None when the run has no lock file
    (it was started before ftui kept one) or it cannot be tried. The probe takes a shared
    lock for an instant, so it never keeps a job from starting."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # releases the probe's shared lock
    return False


def launcher_gone(run_dir: Path, launch: dict[str, Any] | None = None) -> bool:
    """Whether nothing runs the run's job any more. Every reader (runs, attach, watch, the
    follower, --resume) decides with this one function, so they agree.

    A run started on another host cannot be checked from here and counts as alive. Else the
    job's lock decides (held for exactly the supervisor's life); runs from before the lock
    fall back to the recorded launcher process. No launch record and no lock: nothing runs it.
    Readers that see this must read the events once more before calling the run `died`:
    the launcher may have written run_end just before."""
    launch = read_launch_info(run_dir) if launch is None else launch
    if launch.get("host") not in (None, socket.gethostname()):
        return False
    held = job_lock_held(run_dir)
    if held is not None:
        return not held
    return launcher_process(launch, run_dir) is None


@dataclass
class RunSummary:
    """What the runs list shows, folded from one run's events and launch info."""

    run_id: str
    path: Path
    status: str = "starting"  # one of LIVE_STATUSES or END_STATUSES
    model: str | None = None
    method: str | None = None
    engine: str | None = None
    precision: str | None = None
    world_size: int | None = None
    step: int = 0
    max_steps: int | None = None
    last_loss: float | None = None
    started: float | None = None  # this segment's start (a resumed run: its last resume)
    ended: float | None = None
    first_started: float | None = None  # a resumed run: when it was first started
    earlier_s: float = 0.0  # a resumed run: the seconds its segments before this one ran
    last_t: float | None = None  # the newest event's time: where a run that died stopped
    reason: str | None = None
    hint: str | None = None
    error: str | None = None
    host: str | None = None
    launcher_pid: int | None = None
    # Loss curve as compact arrays: a run with a million steps stays a few MB.
    loss_steps: array = field(default_factory=lambda: array("l"), repr=False)
    loss_values: array = field(default_factory=lambda: array("d"), repr=False)

    @property
    def duration(self) -> float | None:
        return self.duration_at(time.time())

    def duration_at(self, now: float | None) -> float | None:
        """The seconds the run has run: every segment of a resumed run (not the time between
        them), up to ``now`` while it lives, to its last event when it died without run_end.
        ``now`` None: its job is known to be gone whatever the status says (a resume holds the
        run's lock, so a run that died reads as running to it)."""
        if self.started is None:
            return None
        if self.ended is not None:
            end = self.ended
        elif self.live and now is not None:
            end = now
        else:  # died or unreadable: it stopped writing at its last event (else it never started)
            end = self.last_t if self.last_t is not None else self.started
        return self.earlier_s + max(0.0, end - self.started)

    @property
    def first_start(self) -> float | None:
        """When the run was first started (what the runs list shows and sorts by)."""
        return self.first_started or self.started

    def take_launch(self, launch: dict[str, Any]) -> None:
        """What launch.json says of this segment and those before it (a resume's)."""
        self.started = launch.get("start_time")
        self.host = launch.get("host")
        self.launcher_pid = launch.get("pid")
        self.first_started = launch.get("first_start_time")  # read_launch_record checked both
        self.earlier_s = float(launch.get("earlier_s") or 0.0)

    @property
    def error_detail(self) -> str | None:
        """The error's text beyond what ``reason`` already says (a run_end's reason is the
        error's first line), so a follower prints no line twice."""
        if not self.error:
            return None
        first, _, rest = self.error.partition("\n")
        if first.strip() == (self.reason or "").strip():
            return rest.strip() or None
        return self.error

    @property
    def live(self) -> bool:
        return self.status in LIVE_STATUSES

    @property
    def has_ended(self) -> bool:
        """Whether the status is final (``ended`` is the time the run_end gives)."""
        return self.status in END_STATUSES

    def start_again(self, launch: dict[str, Any]) -> None:
        """The run was resumed (``launch``: the resume's launch.json): starting again, its
        previous end no longer its state."""
        self.status = "starting"
        self.ended = self.reason = self.hint = self.error = None
        self.take_launch(launch)

    def mark_died(self) -> None:
        """The job is gone without run_end: say why as well as the files can tell."""
        _launch, problem = read_launch_record(self.path)
        if problem is not None:
            self.mark_unreadable(_("{problem}: ftui cannot tell what became of its job").format(problem=problem))
        elif os.path.exists(self.path / STOP_FILE):
            self.status, self.reason = "stopped", STOPPED_EARLY_REASON
        else:
            self.status, self.reason = "died", DIED_REASON

    def mark_unreadable(self, reason: str) -> None:
        self.status, self.reason = "unreadable", reason

    def truncate_after(self, step: int) -> None:
        keep = bisect_right(self.loss_steps, step)
        del self.loss_steps[keep:]
        del self.loss_values[keep:]
        self.step = step
        self.last_loss = self.loss_values[-1] if self.loss_values else None

    def note_time(self, t: Any) -> float | None:
        """An event's time, or None when it is not a plausible one (an untrusted file: an
        infinite time would break the durations); the newest so far becomes ``last_t``."""
        t = t if _a_time(t) else None
        if t is not None and (self.last_t is None or t > self.last_t):
            self.last_t = t
        return t

    def apply(self, event: dict[str, Any]) -> None:
        """Folds one event into the summary (events arrive in file order)."""
        kind = event["event"]
        t = self.note_time(event.get("t"))
        if kind == "run_start":
            self.status = "running"
            self.ended = self.reason = self.hint = self.error = None
            resumed = event.get("resumed_from_step")
            if resumed is not None:  # a resumed run: steps after the checkpoint are redone
                self.truncate_after(int(resumed))
            self.model = event.get("model")
            self.method = event.get("method")
            self.engine = event.get("engine")
            self.precision = event.get("precision")
            self.world_size = event.get("world_size")
            self.max_steps = event.get("max_steps")
            self.started = self.started or t
        elif kind == "step":
            self.step = event.get("step", self.step)
            if event.get("loss") is not None:
                self.last_loss = event["loss"]
                self.loss_steps.append(self.step)
                self.loss_values.append(event["loss"])
        elif kind == "progress":  # a predict job: examples answered stand for steps
            done = event.get("done")
            if isinstance(done, int) and not isinstance(done, bool):
                self.step = done
        elif kind == "run_end":
            self.status = event.get("status", "failed")
            self.ended = t
            self.reason = event.get("reason")
            self.hint = event.get("hint")
            if event.get("error_type"):
                self.error = f"{event['error_type']}: {event.get('error_message', '')}"


class RunFollower:
    """The one follower of a run directory: every reader (``ftui train``'s display, ``ftui
    attach``/``watch``, the dashboard, the runs list) reads events and decides a run's end
    through it, so they can never disagree about a run.

    It reads new events by byte offset (never the whole file again) and hands each batch to
    ``fold`` (the caller's display or state; by default ``summary.apply``), which must keep
    ``summary`` up to date. :meth:`settle` is the end rule: a run_end ends the run; a file that
    cannot be read makes it ``unreadable``; a launcher that is gone gets one more read (it
    may have written run_end just before exiting), and a run still without run_end has died.
    """

    def __init__(self, run_dir: str | os.PathLike[str], summary: RunSummary,
                 fold: Callable[[list[Any]], None] | None = None, *, offset: int = 0, chunk: int | None = None,
                 compact: bool = False, launch: dict[str, Any] | None = None):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / EVENTS_FILE
        self.summary = summary
        self.fold = fold or self._apply
        self.reader = EventReader(self.path, offset)
        self.chunk = chunk  # bytes per read (None: all there is), so a long backlog is folded in parts
        self.compact = compact  # runs of steps as StepColumns: ``fold`` must take them
        self.launch = launch  # None: launch.json is read at each check (it may appear late)
        self.catching_up = False  # the last read stopped before the end of the file

    def _apply(self, events: list[Any]) -> None:
        for event in events:
            self.summary.apply(event)

    @property
    def ended(self) -> bool:
        return self.summary.has_ended

    def start_at_tail(self, head_bytes: int, tail_bytes: int, above: int | None = None,
                      head_kinds: tuple[str, ...] | None = ("run_start",)) -> tuple[int, int] | None:
        """A long run is not replayed: for a file over ``above`` bytes (head + tail by default)
        fold the events of ``head_kinds`` (None: all) from its first ``head_bytes`` (run_start
        is there) and move to the first line of its last ``tail_bytes``. Returns the byte span
        passed over, for a caller that reads it later or says so; None for a shorter file."""
        try:
            size = file_size(self.path)
            if size <= (head_bytes + tail_bytes if above is None else above):
                return None
            head = EventReader(self.path, self.reader.offset).read_new(head_bytes, compact=self.compact)
            tail_start = line_start_after(self.path, size - tail_bytes)
        except UnreadableFile as err:
            self.reader.problem = str(err)
            return None
        self.fold([e for e in head if isinstance(e, dict) and (head_kinds is None or e["event"] in head_kinds)])
        span = (self.reader.offset, tail_start)
        self.reader.offset = tail_start
        return span

    def read(self, max_bytes: int | None = None) -> list[Any]:
        """Reads and folds what the file gained (at most ``max_bytes``, else ``chunk``)."""
        batch = self.reader.read_new(self.chunk if max_bytes is None else max_bytes, compact=self.compact)
        if batch:
            self.fold(batch)
        self.catching_up = bool(batch) and self._behind()
        return batch

    def _behind(self) -> bool:
        try:
            return self.reader.offset < file_size(self.path)
        except UnreadableFile:
            return False

    def settle(self) -> bool:
        """Decides whether the run has ended, after a read (see the class); True when it has."""
        if self.ended:
            launch = self._started_again()
            if launch is None:
                return True
            self.summary.start_again(launch)  # a resume whose run_start is not written yet
            return False
        if self.reader.problem is not None:
            self.summary.mark_unreadable(self.reader.problem)
            return True
        if launcher_gone(self.run_dir, self.launch):
            self.fold(self.reader.read_new(compact=self.compact))  # all of the rest: it may end with run_end
            if self.reader.problem is not None:
                self.summary.mark_unreadable(self.reader.problem)
            elif self.summary.live:
                self.summary.mark_died()
            return True
        return False

    def _started_again(self) -> dict[str, Any] | None:
        """The resume's launch record when an ended run's job started again: launch.json was
        written after the last run_end and its job lives (else None). Until the resumed job
        writes its run_start (seconds: it loads the model first) the events still end with
        the previous run_end."""
        launch = self.launch if self.launch is not None else read_launch_info(self.run_dir)
        start, end = launch.get("start_time"), self.summary.ended
        if not isinstance(start, (int, float)) or not isinstance(end, (int, float)) or start <= end:
            return None
        return None if launcher_gone(self.run_dir, launch) else launch

    def poll(self) -> list[Any]:
        """One round of following: read, fold and, unless more is waiting, settle."""
        batch = self.read()
        if not self.catching_up:
            self.settle()
        return batch


SUMMARY_HEAD = 256 << 10  # bytes of events.jsonl a summary reads from its start (run_start) ...
SUMMARY_TAIL = 1 << 20  # ... and from its end (the last steps, the last run_start / run_end)


def summarize_run(run_dir: str | os.PathLike[str], full: bool = False) -> RunSummary:
    """Reads a run directory and says what state the run is in.

    A run without ``run_end`` whose launcher is gone has ``died`` (killed with -9, machine
    rebooted): the events cannot say so themselves. A long run is summarised from the
    head and the tail of its events (a bounded read, however many steps it has: the runs
    list refreshes every few seconds); ``full`` reads all of it (the whole loss curve).
    A run whose files cannot be read is ``unreadable``, with the reason."""
    path = Path(run_dir)
    summary = RunSummary(run_id=path.name, path=path)
    launch = read_launch_info(path)
    summary.take_launch(launch)
    follower = RunFollower(path, summary, launch=launch)
    skipped = None if full else follower.start_at_tail(SUMMARY_HEAD, SUMMARY_TAIL, head_kinds=None)
    follower.read(None if skipped is None else SUMMARY_TAIL + MAX_TAIL_LINE)
    follower.settle()
    if summary.status != "unreadable" and (summary.model is None or summary.method is None):
        config = _config_scalars(path)  # read once: the runs list summarises every run every 2 s
        if summary.model is None:
            summary.model = config.get("model_name_or_path")
        if summary.method is None:
            # No run_start (it failed while loading): what the config asked for, as RunConfig.method
            # and .engine_name name it.
            kind = config.get("finetuning_type")
            summary.method = "qlora" if kind == "lora" and config.get("quantization_bit") else kind
            deepspeed = config.get("deepspeed")
            summary.engine = f"deepspeed:{Path(str(deepspeed)).name}" if deepspeed else config.get("engine")
    return summary


def earlier_segments(run_dir: Path) -> dict[str, float]:
    """What a resume's launch.json carries over from the run so far: when it was first
    started and the seconds its segments ran (each from its launch to its run_end, or to its
    last event when it died), so the runs list shows the run's whole time, not the last
    segment's or the days it sat stopped. Read before the resume's launch.json replaces the
    previous one."""
    before = summarize_run(run_dir)
    ran = before.duration_at(None)  # the previous job is gone: it ran to its end or its last event
    return {} if ran is None else {"first_start_time": before.first_start, "earlier_s": ran}


MAX_TAIL_LINE = 64 << 10  # slack for the line that straddles the tail's end while the run writes


def _config_scalars(run_dir: Path) -> dict[Any, str | int | float]:
    """config.yaml's settings that are plain text or numbers ({} when it cannot be read or
    is not a mapping: a run directory is untrusted)."""
    try:
        from ftui.safety.bounded_input import load_yaml

        data = load_yaml(read_at(run_dir / CONFIG_FILE, 0, 1 << 20) or b"") or {}
        return {k: v for k, v in data.items() if isinstance(v, (str, int, float))}
    except Exception:
        return {}


LIST_COLUMNS = ("run", "status", "model", "method", "engine", "step", "loss", "started", "duration")
# the columns' headings, translated where shown (the keys above are list_row's, for code)
LIST_HEADINGS = {"run": N_("run"), "status": N_("status"), "model": N_("model"), "method": N_("method"), "engine": N_("engine"),
                 "step": N_("step"), "loss": N_("loss"), "started": N_("started"), "duration": N_("duration")}


def list_row(r: RunSummary) -> dict[str, str]:
    """A run as ``ftui runs`` and the runs screen show it: every LIST_COLUMNS cell as text."""
    from ftui.cli.follow import fmt_duration  # follow imports this module

    return {
        "run": r.run_id, "status": r.status,
        "model": reason_text(r.reason) if r.status == "unreadable" else str(r.model or "-"),
        "method": r.method or "-", "engine": r.engine or "-", "step": f"{r.step}/{r.max_steps or '?'}",
        "loss": f"{r.last_loss:.4f}" if r.last_loss is not None else "-",
        "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(r.first_start)) if r.first_start else "-",
        "duration": fmt_duration(r.duration),
    }


class RunsRootError(OSError):
    """The runs root exists but cannot be listed (permissions): the message says so."""


def _run_dirs(root_path: Path) -> list[Path]:
    try:
        with os.scandir(root_path) as it:
            entries = list(it)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as err:
        raise RunsRootError(_("cannot list the runs root {path}: {reason}").format(path=root_path, reason=err.strerror or err)) from None
    out = []
    for entry in entries:
        if entry.name.startswith("."):  # never a run's name (slug): a run being deleted (delete_run)
            continue
        try:
            if entry.is_dir():
                out.append(Path(entry.path))
        except OSError:
            continue
    return out


def _unreadable(path: Path, reason: str) -> RunSummary:
    summary = RunSummary(run_id=path.name, path=path)
    summary.mark_unreadable(reason)
    return summary


def _summarize_listed(d: Path) -> RunSummary | None:
    """One entry of the runs list: None when ``d`` is not a run directory; a run that cannot
    be read is listed as ``unreadable`` with the reason, so it never hides the others."""
    try:
        os.stat(d / CONFIG_FILE)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        return _unreadable(d, _("{reason} (another user's run?)").format(reason=err.strerror or err))
    try:
        return summarize_run(d)
    except Exception as err:  # a run directory shaped in a way no reader foresaw: list it, keep going
        return _unreadable(d, f"{type(err).__name__}: {err}")


# --- The run index: runs a config's output_dir put outside the default runs root
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


def _indexed_run_exists(d: Path) -> bool:
    try:
        os.stat(d / CONFIG_FILE)
        return True
    except (OSError, ValueError):
        return False


def _summarize_indexed(d: Path) -> RunSummary | None:
    """An index entry as a runs-list entry; None when its directory is gone, no longer a run
    or cannot be read (moved, deleted, another disk not mounted): the index is only a hint."""
    return _summarize_listed(d) if _indexed_run_exists(d) else None


def _extra_run_dirs(root_path: Path, listed: list[Path]) -> list[Path]:
    """The indexed runs to list beside the root's own: only for the default root, and not
    those already under it."""
    if not is_default_root(root_path):
        return []
    seen = {os.path.realpath(d) for d in listed}
    return [d for d in indexed_run_dirs() if os.path.realpath(d) not in seen]


def list_runs(root: str | os.PathLike[str]) -> list[RunSummary]:
    """Every run directory under the root, newest first (RunsRootError if it cannot be listed);
    for the default root, also every run the index names elsewhere (a config's output_dir)."""
    root_path = Path(root).expanduser()
    dirs = _run_dirs(root_path)
    runs = [r for d in dirs if (r := _summarize_listed(d)) is not None]
    runs += [r for d in _extra_run_dirs(root_path, dirs) if (r := _summarize_indexed(d)) is not None]
    runs.sort(key=lambda r: (r.first_start or 0.0, r.run_id), reverse=True)
    return runs


class RunDeleteError(RuntimeError):
    """A run that must not or cannot be deleted; the message says why and what to do."""


RUN_MARKERS = (LAUNCH_FILE, EVENTS_FILE, LOG_FILE, LOCK_FILE)  # beside config.yaml, one of these: a run ftui started
DELETE_KIND = "delete"  # ftui.safety.owned_dirs' marker kind of a run being deleted
DELETING_NAME = re.compile(r"\..+\.deleting")  # .RUN.RANDOM.deleting: a run being deleted (no listing shows dot-names)


@dataclass(frozen=True)
class DeletePlan:
    """What deleting a run removes, decided before the question is asked, so the question says
    exactly what goes. A run directory that is a symbolic link is never followed to delete:
    only the link and the run's index entry go, and the directory it points to is kept."""

    run: Path  # the run's directory as given (its parents resolved, the last name not)
    link_target: Path | None = None  # the run is a symbolic link to this directory, which is kept

    def question(self) -> str:
        if self.link_target is not None:
            return _("Remove the link {path} (to {target}) and its run index entry? The directory it points to is kept: "
                     "ftui does not follow a link to delete.").format(path=visible(self.run), target=visible(self.link_target))
        return _("Delete run {run}'s directory {path}? Its checkpoints and final/ go too; this cannot be undone.").format(
            run=visible(self.run.name), path=visible(self.run))


@dataclass(frozen=True)
class Deleted:
    """What delete_run did: the path removed, the directory kept (a link's target) and one line
    about leftovers of interrupted deletes it removed beside it (or None)."""

    path: Path
    kept: Path | None = None
    leftovers: str | None = None

    def message(self) -> str:
        if self.kept is not None:
            return _("removed the link {path}; the directory it pointed to, {target}, is kept (delete it with ftui delete {target})").format(
                path=visible(self.path), target=visible(self.kept))
        return _("deleted {path}").format(path=visible(self.path))


def delete_plan(run_dir: str | os.PathLike[str]) -> DeletePlan:
    given = Path(run_dir).expanduser()
    here = Path(os.path.realpath(given.parent)) / given.name  # a link in the parents leads to the run itself: fine
    if os.path.islink(here):
        return DeletePlan(here, Path(os.path.realpath(here)))
    return DeletePlan(Path(os.path.realpath(here)))


def _check_deletable(path: Path) -> None:
    if not (path / CONFIG_FILE).is_file() or not any(os.path.lexists(path / m) for m in RUN_MARKERS):
        raise RunDeleteError(_("{path} does not look like an ftui run directory (no {config} with a {launch} or {events}); "
                               "nothing deleted").format(path=path, config=CONFIG_FILE, launch=LAUNCH_FILE, events=EVENTS_FILE))
    summary = summarize_run(path)
    if summary.live:
        raise RunDeleteError(_("{run} is {status}: stop it first (ftui attach {run}, then s), then delete it").format(
            run=path.name, status=summary.status))
    busy = live_job_dirs(path)
    if busy:
        raise RunDeleteError(_("{run} has a {job} job running ({path}): stop it first (ftui attach {path}, then s), "
                               "then delete the run; nothing deleted").format(run=path.name, job=busy[0].parent.name, path=busy[0]))


def delete_run(run_dir: str | os.PathLike[str], asked: DeletePlan | None = None) -> Deleted:
    """Deletes a run directory that no job runs, and its run index entry (``delete_plan``: a
    run that is a symbolic link loses only the link and its entry). ``asked``: the plan the
    user answered yes to; when the run is no longer what it said (a link where a directory
    was, or the other way round), nothing is deleted.

    A live run is refused (stop it first). The job lock is held while the directory goes,
    so a ``--resume`` started meanwhile waits for it and then finds no run (it cannot train
    into a half-deleted directory). The directory is marked as being deleted
    (``ftui.safety.owned_dirs``: a marker this process keeps locked) and renamed to
    ``.RUN.RANDOM.deleting``, which no listing shows: the run leaves every list at once, however
    long the removal of its checkpoints takes. A delete killed midway leaves that directory,
    which the next delete in the same runs root and ``ftui runs`` recognise and remove."""
    from ftui.safety.owned_dirs import MARKER, claim, release, remove

    plan = delete_plan(run_dir)
    if asked is not None and plan != asked:
        now = (_("now a link to {target}").format(target=plan.link_target) if plan.link_target is not None
               else _("now the directory {path}").format(path=plan.run))
        raise RunDeleteError(_("{path} changed since the question ({now}); nothing deleted: ask again").format(
            path=visible(asked.run), now=visible(now)))
    if plan.link_target is not None:
        _check_deletable(plan.link_target)
        try:
            os.unlink(plan.run)
        except OSError as err:
            raise RunDeleteError(_("cannot remove the link {path}: {reason}").format(path=plan.run, reason=err.strerror or err)) from None
        forget_run(plan.link_target)
        return Deleted(plan.run, kept=plan.link_target, leftovers=sweep_deleting(plan.run.parent))
    path = plan.run
    _check_deletable(path)
    lock = _take_job_lock(path)
    marker = None
    try:
        try:
            marker = claim(path, DELETE_KIND, run=str(path))
            hidden = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".deleting", dir=path.parent))
        except BlockingIOError:
            raise RunDeleteError(_("{run} is being deleted by another ftui; nothing deleted").format(run=path.name)) from None
        except OSError as err:
            raise RunDeleteError(_("cannot delete {path}: {reason}").format(path=path, reason=err.strerror or err)) from None
        try:
            os.rename(path, hidden)  # onto the empty directory mkdtemp made: rename(2) replaces it
        except OSError as err:
            for undo in (lambda: os.rmdir(hidden), lambda: os.unlink(path / MARKER)):
                try:
                    undo()
                except OSError:
                    pass
            raise RunDeleteError(_("cannot delete {path}: {reason}").format(path=path, reason=err.strerror or err)) from None
        forget_run(path)
        failed = remove(hidden, marker)
        marker = None
        if failed:
            raise RunDeleteError(_("{run} is no longer listed, but {count} file(s) could not be removed "
                                   "(first: {first}); remove {path} yourself").format(
                run=path.name, count=len(failed), first=failed[0], path=hidden))
    finally:
        release(marker)
        if lock is not None:
            os.close(lock)
    return Deleted(path, leftovers=sweep_deleting(path.parent))


def sweep_deleting(root: Path) -> str | None:
    """Finishes the deletes that were killed midway in ``root`` (``.RUN.*.deleting`` directories
    marked by a delete whose process is gone); one line saying so, or None."""
    from ftui.safety.owned_dirs import sweep, sweep_line

    removed, failed = sweep(root, DELETING_NAME, (DELETE_KIND,))
    return sweep_line(removed, failed, "delete")


def live_job_dirs(run_dir: Path) -> list[Path]:
    """The run's predict, eval and export jobs that are running (each holds its own lock in
    RUN/KIND/ID): deleting the run would pull the weights and files from under them."""
    from ftui.rundir.paths import EVAL_DIR, EXPORT_DIR, PREDICT_DIR

    live = []
    for kind in (PREDICT_DIR, EVAL_DIR, EXPORT_DIR):
        try:
            jobs = sorted(p for p in (run_dir / kind).iterdir() if p.is_dir())
        except OSError:
            continue
        live += [job for job in jobs if job_lock_held(job)]
    return live


def _take_job_lock(run_dir: Path) -> int | None:
    """The run's job lock, exclusively (RunDeleteError if a job holds it); None for a run
    without a lock file (one from before ftui kept one: its summary said it is not live)."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise RunDeleteError(_("cannot lock {run}'s {lock}: {reason}; nothing deleted").format(
            run=run_dir.name, lock=LOCK_FILE, reason=err.strerror or err)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise RunDeleteError(_("{run} has a job running (it holds {lock}): stop it first; nothing deleted").format(
            run=run_dir.name, lock=LOCK_FILE)) from None
    return fd


def _is_run(path: Path) -> bool:
    try:
        os.stat(path / CONFIG_FILE)
        return True
    except OSError as err:
        if isinstance(err, PermissionError):
            raise LookupError(_("{path} cannot be read: {reason} (another user's run?)").format(path=path, reason=err.strerror)) from None
        return False


def resolve_run(ref: str, root: str | os.PathLike[str]) -> Path:
    """A run given as a path or as a run id under the root (a unique prefix is enough); under
    the default root, the runs the index names elsewhere count too.

    A bare name is a run id first: a directory of the same name in the current directory is
    taken only when no run under the root has that name (``./NAME`` names it directly), so
    ``ftui delete NAME`` never deletes a look-alike directory here instead of the run."""
    if not ref.strip():
        raise LookupError(_("an empty run name: give a run id (ftui runs lists them) or a run directory"))
    direct = Path(ref).expanduser()
    root_path = Path(root).expanduser()
    if "/" in ref or ref in (".", ".."):
        if _is_run(direct):
            return direct
        within = _job_of_run(ref, root_path) if not direct.is_absolute() else None
        if within is not None:
            return within
        if not os.path.exists(direct):
            raise LookupError(_("{ref}: no such directory (a path under a run may start with the run's id, "
                                "RUN_ID/predict/ID; ftui runs lists the ids)").format(ref=repr(ref)))
        raise LookupError(_("{ref} is not a run directory (it has no config.yaml)").format(ref=repr(ref)))
    if _is_run(direct):
        try:
            return _run_under_root(ref, root_path)
        except LookupError:
            return direct  # no run of that name under the root: the directory here
    return _run_under_root(ref, root_path)


def _job_of_run(ref: str, root_path: Path) -> Path | None:
    """``RUN_ID/predict/ID`` (the README's spelling, and what ``ftui predict`` prints) where
    RUN_ID is a run under the root rather than a directory here: the job directory it names,
    or None."""
    head, _sep, rest = ref.partition("/")
    if not head or head in (".", "..") or not rest.strip("/"):
        return None
    try:
        run = _run_under_root(head, root_path)
    except LookupError:
        return None
    return run / rest if _is_run(run / rest) else None


def _run_under_root(ref: str, root_path: Path) -> Path:
    """The run ``ref`` names under the root (exactly, else by a unique prefix), or LookupError."""
    exact = root_path / ref
    if _is_run(exact):
        return exact
    try:
        dirs = _run_dirs(root_path)
    except RunsRootError as err:
        raise LookupError(str(err)) from None
    indexed = [d for d in _extra_run_dirs(root_path, dirs) if d.name.startswith(ref) and _indexed_run_exists(d)]
    exact_indexed = [d for d in indexed if d.name == ref]
    if len(exact_indexed) == 1:
        return exact_indexed[0]
    matches = sorted(d for d in dirs if d.name.startswith(ref) and _is_run(d)) + indexed
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        names = ", ".join(m.name for m in sorted(matches, key=lambda m: m.name, reverse=True)[:5])  # the newest first
        raise LookupError(_("{ref} matches {count} runs under {root}: {names}; give more of the name").format(
            ref=repr(ref), count=len(matches), root=root_path, names=names))
    raise LookupError(_("no run {ref} under {root} (ftui runs lists them)").format(ref=repr(ref), root=root_path))


def checkpoints(run_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run as (step, path), oldest first."""
    ck = Path(run_dir) / CHECKPOINTS_DIR
    out = []
    if ck.is_dir():
        for d in ck.iterdir():
            m = re.fullmatch(r"step-(\d+)", d.name)
            if m and d.is_dir():
                out.append((int(m.group(1)), d))
    return sorted(out)


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from; the message says which and why."""


class CheckpointMismatch(CheckpointError):
    """A sound checkpoint saved with settings the config no longer has (engine, batch,
    accumulation, DeepSpeed's ranks): every checkpoint of the run refuses it alike, so the fix
    is the settings, not another checkpoint (ftui.rundir.resume_checks.checkpoint_mismatch)."""


def read_trainer_state(checkpoint: Path) -> Any:
    """A checkpoint's trainer_state.json, parsed; read as every run file is (a run directory is
    untrusted): a regular file only, so a FIFO cannot hang ``--resume``, at most 16 MiB, and
    nesting deeper than the stack refused. OSError, UnreadableFile or ValueError when it
    cannot be read."""
    raw = read_at(checkpoint / TRAINER_STATE, 0, 16 << 20)
    if raw is None:
        raise FileNotFoundError("missing")
    return load_json(raw)


def checkpoint_damage(path: Path) -> str | None:
    """Why a complete checkpoint cannot be trusted (a file missing or of another size than
    when it was written), or None. Checkpoints from before the size list are trusted."""
    try:
        state = read_trainer_state(path)
    except (OSError, ValueError, UnreadableFile) as err:
        return _("its {file} is unreadable ({reason})").format(file=TRAINER_STATE, reason=err)
    if not isinstance(state, dict):
        return _("its {file} is not a JSON object").format(file=TRAINER_STATE)
    files = state.get("files")
    if not isinstance(files, (dict, type(None))):
        return _("its {file} has no list of file sizes").format(file=TRAINER_STATE)
    for rel, size in (files or {}).items():
        f = path / rel
        try:
            actual = f.stat().st_size
        except OSError:
            return _("{file} is missing").format(file=rel)
        if actual != size:
            return _("{file} is {actual} bytes, but {size} were written").format(file=rel, actual=actual, size=size)
    return None


def resolve_checkpoint(run_dir: Path, which: str | None, skipped: list[str] | None = None) -> Path:
    """``which``: None (the newest sound checkpoint), a step number, or a directory.

    A damaged newest checkpoint is passed over for the one before it; each one passed over
    is described in ``skipped`` (for the caller to say so). A damaged checkpoint asked for by
    step raises, naming the newest sound one."""
    found = checkpoints(run_dir)
    if which is None or which == "latest":
        if not found:
            raise CheckpointError(_("{run} has no complete checkpoint to resume from").format(run=run_dir.name))
        for step, path in reversed(found):
            damage = checkpoint_damage(path)
            if damage is None:
                return path
            if skipped is not None:
                skipped.append(_("checkpoint step-{step} is damaged: {damage}").format(step=step, damage=damage))
        raise CheckpointError(_("every checkpoint of {run} is damaged (newest: {damage}); start the run again").format(
            run=run_dir.name, damage=checkpoint_damage(found[-1][1])))
    if which.isdigit():
        for step, path in found:
            if step == int(which):
                damage = checkpoint_damage(path)
                if damage is not None:
                    sound = [s for s, p in found if checkpoint_damage(p) is None]
                    alt = _("; the newest sound one is step {step} (--checkpoint {step})").format(step=sound[-1]) if sound else ""
                    raise CheckpointError(_("checkpoint step-{step} is damaged: {damage}").format(step=step, damage=damage) + alt)
                return path
        steps = ", ".join(str(s) for s, _path in found) or _("none")
        raise CheckpointError(_("{run} has no checkpoint at step {step} (complete checkpoints: {steps})").format(
            run=run_dir.name, step=which, steps=steps))
    path = Path(which).expanduser()
    if not (path / TRAINER_STATE).is_file():
        raise CheckpointError(_("{path} is not a complete ftui checkpoint (no {file})").format(path=path, file=TRAINER_STATE))
    return path.resolve()


def resume_target(path_text: str) -> tuple[Path, Path | None]:
    """``resume_from_checkpoint`` (LLaMA-Factory's key) as ftui's resume: (the run directory,
    the checkpoint, or None for its newest sound one). It names a run directory or one of its
    ``checkpoints/step-N``; anything else (a transformers / LLaMA-Factory ``checkpoint-N``)
    raises CheckpointError saying so."""
    path = Path(path_text).expanduser()
    if not path.exists():
        raise CheckpointError(_("{path} does not exist; give an ftui run directory or its checkpoints/step-N").format(path=path))
    if _is_run(path):
        return path.resolve(), None
    if path.parent.name == CHECKPOINTS_DIR and _is_run(path.parent.parent):
        if not (path / TRAINER_STATE).is_file():
            raise CheckpointError(_("{path} is not a complete ftui checkpoint (no {file}); give the run directory to take its newest one").format(
                path=path, file=TRAINER_STATE))
        return path.parent.parent.resolve(), path.resolve()
    raise CheckpointError(_("{path} is not an ftui run or checkpoint (a transformers / LLaMA-Factory checkpoint-N cannot be resumed "
                            "by ftui: its optimizer and data order are not ftui's); give an ftui run directory or RUN/checkpoints/step-N").format(
        path=path))


def resume_target_problem(path_text: str) -> str | None:
    try:
        resume_target(path_text)
    except CheckpointError as err:
        return str(err)
    return None


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


def hostname() -> str:
    return socket.gethostname()
