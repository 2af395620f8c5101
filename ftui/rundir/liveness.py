"""Whether a run's job still runs: its lock, its launcher process, its host.

Every reader (runs, attach, watch, the follower, --resume, delete) decides with
:func:`launcher_gone`, so they agree. No torch here.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path
from typing import Any

import psutil

from ftui.rundir.launch_record import read_launch_info
from ftui.rundir.paths import LOCK_FILE
from ftui.rundir.slurm_state import query_job, slurm_scheduler, SlurmUnavailable


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
    A Slurm run is Slurm's to tell (:func:`slurm_job_gone`), whatever host it names.
    Readers that see this must read the events once more before calling the run `died`:
    the launcher may have written run_end just before."""
    launch = read_launch_info(run_dir) if launch is None else launch
    sched = slurm_scheduler(launch)
    if sched is not None:
        return slurm_job_gone(run_dir, launch, sched["job_id"])
    if launch.get("host") not in (None, socket.gethostname()):
        return False
    held = job_lock_held(run_dir)
    if held is not None:
        return not held
    return launcher_process(launch, run_dir) is None


def slurm_job_gone(run_dir: Path, launch: dict[str, Any], job_id: str) -> bool:
    """Whether a Slurm run's job is over: the job's lock held on this host says it runs (node 0
    here); else Slurm decides: a live state is not gone, an ended or forgotten job is. Where
    Slurm cannot be asked (a laptop with a copy of the run) it counts as alive, as a run on
    another host does: never called died for want of a scheduler to ask."""
    if launch.get("host") in (None, socket.gethostname()) and job_lock_held(run_dir):
        return False
    try:
        job = query_job(job_id)
    except SlurmUnavailable:
        return False
    return job is None or not job.live


def wait_until_gone(run_dir: Path, timeout_s: float, poll_s: float = 0.05) -> bool:
    """Waits until nothing runs the job of ``run_dir`` (launcher_gone), at most ``timeout_s``;
    True when it is gone. Rank 0 writes run_end before its own process, the launcher and the
    supervisor have exited, and they still write in the run directory after it (the launcher
    removes its store file; the supervisor frees the run-end reserve, adds its last line to
    train.log, and writes a run_end of its own into an events.jsonl it no longer finds)."""
    deadline = time.monotonic() + timeout_s
    while not launcher_gone(run_dir):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True
