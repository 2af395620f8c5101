"""What Slurm says of a run's job (``scontrol -o show job ID``), for the readers of a Slurm run.

The smallest version of the agreed interface (issue 45, interface 2), written for the app's
side until the reading side's own module replaces it. No torch here.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any

LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                         "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    state: str
    reason: str | None
    start: float | None  # estimated start while PENDING
    end: float | None
    time_limit: str | None
    restarts: int
    exit_code: str | None
    nodelist: str | None

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


class SlurmUnavailable(Exception):
    """No scontrol, a timeout, or an error other than "Invalid job id"."""


_cache: dict[str, tuple[float, SlurmJob | None]] = {}


def _time(value: str | None) -> float | None:
    try:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S")) if value else None
    except ValueError:  # Unknown, N/A, None
        return None


def _text(value: str | None) -> str | None:
    return None if value in (None, "", "None", "(null)", "N/A", "Unknown") else value


def query_job(job_id: str, *, timeout: float = 5.0, max_age: float = 2.0) -> SlurmJob | None:
    """The job as Slurm knows it, None when it does not (any more); cached ``max_age`` seconds."""
    cached = _cache.get(job_id)
    if cached is not None and time.monotonic() - cached[0] < max_age:
        return cached[1]
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        raise SlurmUnavailable("scontrol is not on the PATH")
    try:
        done = subprocess.run([scontrol, "-o", "show", "job", job_id], capture_output=True, text=True, timeout=timeout,
                              errors="replace")
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SlurmUnavailable(str(err)) from None
    if done.returncode != 0:
        if "Invalid job id" not in done.stderr:
            raise SlurmUnavailable(done.stderr.strip()[:500])
        job = None
    else:
        fields = dict(part.partition("=")[::2] for part in done.stdout.split())
        restarts = fields.get("Restarts", "0")
        job = SlurmJob(job_id, fields.get("JobState", "UNKNOWN"), _text(fields.get("Reason")), _time(fields.get("StartTime")),
                       _time(fields.get("EndTime")), _text(fields.get("TimeLimit")), int(restarts) if restarts.isdigit() else 0,
                       _text(fields.get("ExitCode")), _text(fields.get("NodeList")))
    _cache[job_id] = (time.monotonic(), job)
    return job


def slurm_scheduler(launch: dict[str, Any]) -> dict[str, Any] | None:
    """launch.json's "scheduler" when it is a valid Slurm record."""
    scheduler = launch.get("scheduler")
    if isinstance(scheduler, dict) and scheduler.get("kind") == "slurm":
        job_id = scheduler.get("job_id")
        if isinstance(job_id, str) and job_id.isdigit():
            return scheduler
    return None
