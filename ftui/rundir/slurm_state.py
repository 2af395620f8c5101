"""A Slurm job's state as Slurm tells it (``scontrol -o show job ID``), for the readers, Stop and
the batch step. Interface 2 of issue 45; this is the smallest version the batch step needs until
slurm-read's (the owner's) replaces it. No torch here.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                         "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    state: str
    reason: str | None
    start: float | None
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


def _fields(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


def _time(text: str | None) -> float | None:
    try:
        return time.mktime(time.strptime(text or "", "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def _none(text: str | None) -> str | None:
    return None if text in (None, "", "None", "(null)") else text


def query_job(job_id: str, *, timeout: float = 5.0, max_age: float = 2.0) -> SlurmJob | None:
    """The job as Slurm knows it now; None when it does not (any more)."""
    try:
        proc = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SlurmUnavailable(str(err)) from None
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr + proc.stdout:
            return None
        raise SlurmUnavailable((proc.stderr or proc.stdout).strip()[:500])
    f = _fields(proc.stdout.splitlines()[0] if proc.stdout.strip() else "")
    if "JobState" not in f:
        return None
    restarts = f.get("Restarts", "0")
    return SlurmJob(job_id=f.get("JobId", job_id), state=f["JobState"], reason=_none(f.get("Reason")),
                    start=_time(f.get("StartTime")), end=_time(f.get("EndTime")), time_limit=_none(f.get("TimeLimit")),
                    restarts=int(restarts) if restarts.isdigit() else 0, exit_code=_none(f.get("ExitCode")),
                    nodelist=_none(f.get("NodeList")))
