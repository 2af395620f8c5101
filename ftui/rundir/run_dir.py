"""One run directory as one object: create it, save its config, add it to the run index,
take its job lock. The operations layer (ftui.ops) and the launcher (ftui.jobs.launch) go
through it, so a run directory is made, recorded and locked the same way whoever starts the
job (``ftui train``, the launch form, a resume from the app).

It sits under the config and the data modules (it imports neither): a new run's directory,
made from a RunConfig and its datasets' fingerprint, is ftui.jobs.launch.create_run. No torch here.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftui.i18n import _
from ftui.rundir.paths import CONFIG_FILE, EVENTS_FILE, LOCK_FILE, STOP_FILE
from ftui.rundir.runs import record_run


class RunBusy(RuntimeError):
    """Another job holds the run directory's lock; the message says what to do."""


@dataclass(frozen=True)
class RunDir:
    """A run directory ftui made (or one given by the user that ftui resolved)."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def events_path(self) -> Path:
        return self.path / EVENTS_FILE

    def events_size(self) -> int:
        """Where a follower of the next job starts reading (0 when there are no events yet)."""
        return self.events_path.stat().st_size if self.events_path.exists() else 0

    def save_config(self, cfg: Any) -> None:
        """The run's config.yaml: what every later reader (resume, chat, eval, export) reads."""
        cfg.save(self.config_path, include_unsupported=False)

    def index(self) -> None:
        """Adds the run to the user's run index (best effort; nothing for the default root)."""
        record_run(self.path)

    def clear_stop(self) -> None:
        """Forgets the previous job's Stop request (a new job of this run starts clean)."""
        (self.path / STOP_FILE).unlink(missing_ok=True)

    def lock(self, wait_s: float = 2.0, clear_stop: bool = True) -> int:
        """Takes the run directory's job lock and returns its descriptor (RunBusy if a job holds it).

        One job per run directory: two jobs would interleave steps and write every checkpoint
        and final/ twice. The lock is an flock on ``job.lock``: the launcher hands the
        descriptor to the supervisor, which holds it for the job's whole life, so it is
        released however the job ends (a crash or kill -9 included) and never goes stale.
        Readers probe it for an instant with a shared lock, hence the short wait. Taking it
        clears the previous job's Stop request (``clear_stop`` False: a resume that may yet be
        refused leaves it, and clears it once accepted)."""
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
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
                raise RunBusy(_("{run} already has a job running (it holds {lock}); follow it with ftui attach {run}, "
                                "or stop it before starting another").format(run=self.name, lock=LOCK_FILE)) from None
        if clear_stop:
            self.clear_stop()
        return fd
