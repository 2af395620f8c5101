"""A run directory's job lock (job.lock): one job per run directory, held by its supervisor for
the job's whole life. Taken by whatever starts a job (ftui.jobs.launch) and by a job that
writes into another run's events (the eval job's point on its run's dashboard). No torch here.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from ftui.i18n import _
from ftui.rundir.paths import LOCK_FILE, STOP_FILE


class RunBusy(RuntimeError):
    """Another job holds the run directory's lock; the message says what to do."""


def lock_run_dir(run_dir: Path, wait_s: float = 2.0, clear_stop: bool = True) -> int:
    """Takes the run directory's job lock and returns its descriptor (RunBusy if a job holds it).

    One job per run directory: two jobs would interleave steps and write every checkpoint
    and final/ twice. The lock is an flock on ``job.lock``: start_run hands the descriptor
    to the supervisor, which holds it for the job's whole life, so it is released however
    the job ends (a crash or kill -9 included) and never goes stale. Readers probe it for an
    instant with a shared lock, hence the short wait. Taking it clears the previous job's
    Stop request (``clear_stop`` False: a resume that may yet be refused leaves it, and
    clears it once accepted)."""
    path = Path(run_dir) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            os.close(fd)
            name = Path(run_dir).name
            raise RunBusy(_("{run} already has a job running (it holds {lock}); follow it with ftui attach {run}, "
                            "or stop it before starting another").format(run=name, lock=LOCK_FILE)) from None
    if clear_stop:
        (Path(run_dir) / STOP_FILE).unlink(missing_ok=True)
    return fd
