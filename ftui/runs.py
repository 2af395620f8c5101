"""Run directories: create them, list them, and tell each run's status from its files.

The run directory is the whole contract between the runner and the dashboard (DESIGN.md):
``config.yaml``, ``launch.json``, ``events.jsonl``, ``train.log``, ``checkpoints/``,
``final/``. Everything the dashboard shows is rebuilt from these files, so a run can be
re-attached after the app, the SSH session or the machine's login shell is gone.
No torch here.
"""

from __future__ import annotations

import json
import os
from array import array
from bisect import bisect_right
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ftui.events import EVENTS_FILE, EventReader, read_complete_lines

CONFIG_FILE = "config.yaml"
LAUNCH_FILE = "launch.json"
LOG_FILE = "train.log"
CHECKPOINTS_DIR = "checkpoints"
FINAL_DIR = "final"
HEARTBEAT_DIR = "heartbeat"  # one file per rank, touched as it makes progress
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
    raise FileExistsError(f"could not find a free run directory name under {root_path}")


def write_launch_info(run_dir: Path, info: dict[str, Any]) -> None:
    tmp = run_dir / (LAUNCH_FILE + ".tmp")
    tmp.write_text(json.dumps(info, indent=1))
    tmp.replace(run_dir / LAUNCH_FILE)


def read_launch_info(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((Path(run_dir) / LAUNCH_FILE).read_text())
    except (OSError, ValueError):
        return {}


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


DIED_REASON = "the launcher exited without writing run_end"


def launcher_gone(launch: dict[str, Any], missing_means_gone: bool = False) -> bool:
    """Whether this host's launcher of a run has exited. A run started on another host cannot
    be checked from here and counts as alive. Readers that see this must read the events once
    more before calling the run `died`: the launcher may have written run_end just before."""
    pid = launch.get("pid")
    if not pid:
        return missing_means_gone
    return launch.get("host") in (None, socket.gethostname()) and not pid_alive(pid)


@dataclass
class RunSummary:
    """What the runs list shows, folded from one run's events and launch info."""

    run_id: str
    path: Path
    status: str = "starting"  # starting, running, completed, stopped, failed, died
    model: str | None = None
    method: str | None = None
    engine: str | None = None
    precision: str | None = None
    world_size: int | None = None
    step: int = 0
    max_steps: int | None = None
    last_loss: float | None = None
    started: float | None = None
    ended: float | None = None
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
        if self.started is None:
            return None
        end = self.ended if self.ended is not None else time.time()
        return max(0.0, end - self.started)

    @property
    def live(self) -> bool:
        return self.status in ("starting", "running")

    def mark_died(self) -> None:
        self.status, self.reason = "died", DIED_REASON

    def truncate_after(self, step: int) -> None:
        keep = bisect_right(self.loss_steps, step)
        del self.loss_steps[keep:]
        del self.loss_values[keep:]
        self.step = step
        self.last_loss = self.loss_values[-1] if self.loss_values else None

    def apply(self, event: dict[str, Any]) -> None:
        """Folds one event into the summary (events arrive in file order)."""
        kind = event["event"]
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
            self.started = self.started or event.get("t")
        elif kind == "step":
            self.step = event.get("step", self.step)
            if event.get("loss") is not None:
                self.last_loss = event["loss"]
                self.loss_steps.append(self.step)
                self.loss_values.append(event["loss"])
        elif kind == "run_end":
            self.status = event.get("status", "failed")
            self.ended = event.get("t")
            self.reason = event.get("reason")
            self.hint = event.get("hint")
            if event.get("error_type"):
                self.error = f"{event['error_type']}: {event.get('error_message', '')}"


def summarize_run(run_dir: str | os.PathLike[str]) -> RunSummary:
    """Reads a run directory once and says what state the run is in.

    A run without ``run_end`` whose launcher process is gone has ``died`` (killed with
    -9, machine rebooted): the events cannot say so themselves.
    """
    path = Path(run_dir)
    summary = RunSummary(run_id=path.name, path=path)
    launch = read_launch_info(path)
    summary.started = launch.get("start_time")
    summary.host = launch.get("host")
    summary.launcher_pid = launch.get("pid")
    for event in EventReader(path / EVENTS_FILE).read_new():
        summary.apply(event)
    if summary.live and launcher_gone(launch, missing_means_gone=True):
        summary.mark_died()
    if summary.model is None:
        summary.model = _config_value(path, "model_name_or_path")
    return summary


def _config_value(run_dir: Path, key: str) -> Any:
    try:
        import yaml

        return (yaml.safe_load((run_dir / CONFIG_FILE).read_text()) or {}).get(key)
    except Exception:
        return None


def list_runs(root: str | os.PathLike[str]) -> list[RunSummary]:
    """Every run directory under the root, newest first."""
    root_path = Path(root).expanduser()
    if not root_path.is_dir():
        return []
    dirs = [d for d in root_path.iterdir() if d.is_dir() and (d / CONFIG_FILE).exists()]
    runs = [summarize_run(d) for d in dirs]
    runs.sort(key=lambda r: (r.started or 0.0, r.run_id), reverse=True)
    return runs


def resolve_run(ref: str, root: str | os.PathLike[str]) -> Path:
    """A run given as a path or as a run id under the root (a unique prefix is enough)."""
    direct = Path(ref).expanduser()
    if (direct / CONFIG_FILE).exists():
        return direct
    root_path = Path(root).expanduser()
    if "/" not in ref and ref not in ("", ".", ".."):
        exact = root_path / ref
        if (exact / CONFIG_FILE).exists():
            return exact
        if root_path.is_dir():
            matches = sorted(d for d in root_path.iterdir() if d.name.startswith(ref) and (d / CONFIG_FILE).exists())
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                names = ", ".join(m.name for m in matches[:5])
                raise LookupError(f"{ref!r} matches {len(matches)} runs under {root_path}: {names}; give more of the name")
    raise LookupError(f"no run {ref!r} under {root_path} (ftui runs lists them)")


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


TRAINER_STATE = "trainer_state.json"  # inside a checkpoint; written last, before the rename


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from; the message says which and why."""


def checkpoint_damage(path: Path) -> str | None:
    """Why a complete checkpoint cannot be trusted (a file missing or of another size than
    when it was written), or None. Checkpoints from before the size list are trusted."""
    try:
        state = json.loads((path / TRAINER_STATE).read_text())
    except (OSError, ValueError) as err:
        return f"its {TRAINER_STATE} is unreadable ({err})"
    for rel, size in (state.get("files") or {}).items():
        f = path / rel
        try:
            actual = f.stat().st_size
        except OSError:
            return f"{rel} is missing"
        if actual != size:
            return f"{rel} is {actual} bytes, but {size} were written"
    return None


def resolve_checkpoint(run_dir: Path, which: str | None, skipped: list[str] | None = None) -> Path:
    """``which``: None (the newest sound checkpoint), a step number, or a directory.

    A damaged newest checkpoint is passed over for the one before it; each one passed over
    is described in ``skipped`` (for the caller to say so). A damaged checkpoint asked for by
    step raises, naming the newest sound one."""
    found = checkpoints(run_dir)
    if which is None or which == "latest":
        if not found:
            raise CheckpointError(f"{run_dir.name} has no complete checkpoint to resume from")
        for step, path in reversed(found):
            damage = checkpoint_damage(path)
            if damage is None:
                return path
            if skipped is not None:
                skipped.append(f"checkpoint step-{step} is damaged: {damage}")
        raise CheckpointError(f"every checkpoint of {run_dir.name} is damaged (newest: {checkpoint_damage(found[-1][1])}); start the run again")
    if which.isdigit():
        for step, path in found:
            if step == int(which):
                damage = checkpoint_damage(path)
                if damage is not None:
                    sound = [s for s, p in found if checkpoint_damage(p) is None]
                    alt = f"; the newest sound one is step {sound[-1]} (--checkpoint {sound[-1]})" if sound else ""
                    raise CheckpointError(f"checkpoint step-{step} is damaged: {damage}{alt}")
                return path
        steps = ", ".join(str(s) for s, _ in found) or "none"
        raise CheckpointError(f"{run_dir.name} has no checkpoint at step {which} (complete checkpoints: {steps})")
    path = Path(which).expanduser()
    if not (path / TRAINER_STATE).is_file():
        raise CheckpointError(f"{path} is not a complete ftui checkpoint (no {TRAINER_STATE})")
    return path.resolve()


class LogTailer:
    """Reads new complete lines of train.log by byte offset (never re-reads the file).

    Starts at most ``backlog`` bytes before the end, so attaching to a huge log is instant."""

    def __init__(self, path: str | os.PathLike[str], backlog: int = 64 * 1024):
        self.path = Path(path)
        self.offset: int | None = None
        self.backlog = backlog
        self._pending = b""

    def read_new(self, max_bytes: int = 1 << 20) -> list[str]:
        if self.offset is None:
            try:
                with open(self.path, "rb") as fh:
                    fh.seek(0, os.SEEK_END)
                    start = max(0, fh.tell() - self.backlog)
                    if start:
                        fh.seek(start)
                        start += len(fh.readline())  # skip the partial first line
            except FileNotFoundError:
                return []
            self.offset = start
        complete, self.offset, self._pending = read_complete_lines(self.path, self.offset, self._pending, max_bytes)
        if complete is None:
            return []
        # Progress bars rewrite one line with \r: keep what the terminal would show last.
        return [line.rsplit(b"\r", 1)[-1].decode("utf-8", "replace") for line in complete.split(b"\n")]


def hostname() -> str:
    return socket.gethostname()
