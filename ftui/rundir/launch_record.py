"""A run directory's making and its launch record (launch.json): written at each start, read
by every reader that asks whether the run's job still runs and since when.

launch.json is untrusted when read (a run directory may come from anywhere): only fields of
their types are kept. No torch here.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

from ftui.i18n import _
from ftui.rundir.paths import LAUNCH_FILE
from ftui.rundir.run_files import UnreadableFile, read_at
from ftui.safety.bounded_input import load_json  # json.loads with a too-deep document as a ValueError

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


def plausible_time(v: Any) -> bool:
    """A plausible unix time (a NaN or a year-5000 float would break the runs list's dates)."""
    return type(v) in (int, float) and 0 < v < 1e11


def _short_text(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= 255 and v.isprintable()


def sound_scheduler(v: Any) -> bool:
    """A Slurm run's ``scheduler`` record: kind slurm, the job id as digits, the optional
    cluster, submit host and script as short text, the submit time plausible."""
    return (isinstance(v, dict) and v.get("kind") == "slurm" and isinstance(v.get("job_id"), str)
            and re.fullmatch(r"[0-9]{1,12}", v["job_id"]) is not None
            and all(v.get(k) is None or _short_text(v[k]) for k in ("cluster", "submit_host", "script"))
            and (v.get("submitted") is None or plausible_time(v["submitted"])))


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
              "start_time": plausible_time, "create_time": plausible_time, "first_start_time": plausible_time,
              "earlier_s": lambda v: type(v) in (int, float) and 0 <= v < 1e10,
              "host": lambda v: isinstance(v, str), "scheduler": sound_scheduler,
              "nodes": lambda v: isinstance(v, list) and len(v) <= 4096 and all(_short_text(n) for n in v),
              "restarts": lambda v: type(v) is int and 0 <= v < 1 << 20}
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


def hostname() -> str:
    return socket.gethostname()
