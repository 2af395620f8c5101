"""What Slurm says of a run's job: its state, why it waits, when it may start, how it ended.

Every reader of a Slurm run (the runs list, the followers, Stop, the batch step) asks here, so
they agree. It reads ``scontrol -o show job ID`` (one line of key=value): Slurm 22.05 has no
``--json`` for scontrol, and ``squeue --json`` ignores ``-j``. The line is untrusted text (a
job's name, its paths): only the fields below are kept, each checked. Answers are cached a
short while per job id: the runs list summarises every run every 2 s. No torch here.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                         "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})
JOB_ID = re.compile(r"[0-9]{1,12}")
_KEY = re.compile(r"([A-Za-z][A-Za-z0-9_:/]*)=(.*)", re.S)
STATE = re.compile(r"[A-Z_]{2,32}")
_WORD = re.compile(r"[A-Za-z0-9_:.,()\[\]/+-]{1,200}")
_NOT_A_TIME = ("Unknown", "None", "N/A", "(null)", "")
_NO_VALUE = ("(null)", "None", "N/A", "")
QUERY_TIMEOUT = 5.0
# Slurm forgot the job (MinJobAge after its end; a job it never had): that will not change,
# so it is asked again only this often (readers summarise every run every 2 s).
FORGOTTEN_MAX_AGE = 60.0


class SlurmUnavailable(Exception):
    """Slurm cannot be asked from here: no scontrol, a timeout, or an error other than an
    unknown job (a laptop reading a run directory copied from a cluster)."""


@dataclass(frozen=True)
class SlurmJob:
    """One job as ``scontrol -o show job`` told it."""

    job_id: str
    state: str  # JobState: PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT, ...
    reason: str | None  # why it waits (Resources, Priority, BeginTime ...) or how it ended
    start: float | None  # the start, or backfill's estimated start while PENDING (None: Slurm gives none)
    end: float | None
    time_limit: str | None
    restarts: int
    exit_code: str | None
    nodelist: str | None

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


def scontrol_fields(line: str) -> dict[str, str]:
    """The key=value pairs of one ``scontrol -o show job`` line. A value may hold spaces (a
    path, a job's name): a word without ``Key=`` belongs to the value before it. Slurm
    prints JobName second and UserId right after it, so the fields are read from the first
    ``UserId=`` on: a name like ``x JobState=COMPLETED`` cannot pass for the job's state, and
    the first occurrence of each key wins over any look-alike in the paths printed last."""
    fields: dict[str, str] = {}
    key = None
    started = False
    for word in line.replace("\n", " ").split(" "):
        m = _KEY.fullmatch(word)
        name = m.group(1) if m is not None else None
        if name is not None and (started or name == "UserId" or (name == "JobId" and not fields)
                                 or (name == "JobName" and list(fields) == ["JobId"])):
            started = started or name == "UserId"
            key = name
            if key in fields:
                key = None  # a look-alike later in the line: its words are dropped
                continue
            fields[key] = m.group(2)
        elif key is not None:
            fields[key] += " " + word
    return fields


def slurm_time(value: str | None) -> float | None:
    """A local time as scontrol prints it (``2026-11-28T16:18:28``), None for Unknown/None."""
    if value is None or value.strip() in _NOT_A_TIME:
        return None
    try:
        return time.mktime(time.strptime(value.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _word(value: str | None) -> str | None:
    value = (value or "").strip()
    return value if value not in _NO_VALUE and _WORD.fullmatch(value) else None


def parse_job(line: str, job_id: str) -> SlurmJob | None:
    """The job ``job_id`` from one scontrol line; None when the line is not that job's or has
    no state that looks like one (an untrusted text)."""
    fields = scontrol_fields(line)
    state = (fields.get("JobState") or "").strip()
    if fields.get("JobId", "").strip() != job_id or not STATE.fullmatch(state):
        return None
    restarts = (fields.get("Restarts") or "").strip()
    return SlurmJob(job_id=job_id, state=state, reason=_word(fields.get("Reason")),
                    start=slurm_time(fields.get("StartTime")), end=slurm_time(fields.get("EndTime")),
                    time_limit=_word(fields.get("TimeLimit")),
                    restarts=int(restarts) if restarts.isdigit() and len(restarts) < 7 else 0,
                    exit_code=_word(fields.get("ExitCode")), nodelist=_word(fields.get("NodeList")))


_cache: dict[str, tuple[float, SlurmJob | None | SlurmUnavailable]] = {}
_cache_lock = threading.Lock()
_silent_until = [0.0]  # after a timeout, every job reads unavailable until then (monotonic)
SILENT_S = 10.0


def clear_cache() -> None:
    """Forgets every cached answer (after a Stop, so the next read sees its effect; tests)."""
    with _cache_lock:
        _cache.clear()
        _silent_until[0] = 0.0


def query_job(job_id: str, *, timeout: float = QUERY_TIMEOUT, max_age: float = 2.0) -> SlurmJob | None:
    """What Slurm says of job ``job_id`` now (an answer at most ``max_age`` seconds old); None
    when Slurm does not know it (never did, or forgot it MinJobAge after its end).
    SlurmUnavailable when Slurm cannot be asked; nothing else is raised."""
    if not JOB_ID.fullmatch(job_id or ""):
        return None
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(job_id)
    if hit is not None and now - hit[0] <= (max(max_age, FORGOTTEN_MAX_AGE) if hit[1] is None and max_age > 0 else max_age):
        answer = hit[1]
    elif now < _silent_until[0]:
        answer = SlurmUnavailable("Slurm did not answer a moment ago")  # a hung controller: not N timeouts per refresh
    else:
        answer = _ask(job_id, timeout)
        with _cache_lock:
            _cache[job_id] = (time.monotonic(), answer)
    if isinstance(answer, SlurmUnavailable):
        raise answer
    return answer


def _ask(job_id: str, timeout: float) -> SlurmJob | None | SlurmUnavailable:
    try:
        done = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return SlurmUnavailable("scontrol is not on the PATH")
    except subprocess.TimeoutExpired:
        _silent_until[0] = time.monotonic() + SILENT_S
        return SlurmUnavailable(f"scontrol did not answer in {timeout:g} s")
    except OSError as e:
        return SlurmUnavailable(f"scontrol could not be run: {e}")
    out = done.stdout[:1 << 20].decode("utf-8", "replace")
    err = done.stderr[:4096].decode("utf-8", "replace")
    if done.returncode != 0:
        if "Invalid job id" in err or "Invalid job id" in out:
            return None
        return SlurmUnavailable(" ".join(err.split())[:300] or f"scontrol exited with {done.returncode}")
    for line in out.splitlines():
        job = parse_job(line, job_id)
        if job is not None:
            return job
    return SlurmUnavailable("scontrol's answer names no state for job " + job_id)


def slurm_scheduler(launch: dict[str, Any]) -> dict[str, Any] | None:
    """launch.json's ``scheduler`` when it is a sound Slurm record (kind slurm, a job id of
    digits), else None: a run that is not Slurm's is read as today."""
    sched = launch.get("scheduler") if isinstance(launch, dict) else None
    if not isinstance(sched, dict) or sched.get("kind") != "slurm":
        return None
    job_id = sched.get("job_id")
    return sched if isinstance(job_id, str) and JOB_ID.fullmatch(job_id) else None
