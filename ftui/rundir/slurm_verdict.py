"""The end rule of a Slurm run, as every reader applies it (``RunFollower.settle``): Slurm
says whether the job waits, runs or has ended, wherever its processes are; the run's own
events say how it ended when its ranks could write it; Slurm's verdict (read live, or kept in
RUN/slurm_end.json) says it when they could not. A run on the cluster is never ``died`` while
Slurm runs it or cannot be asked. No torch here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ftui.i18n import N_, _
from ftui.rundir.paths import REQUEUE_FILE, SLURM_OUTPUT_PATTERN, STOP_FILE
from ftui.rundir.slurm_end import ending_text, read_slurm_end, record_slurm_end
from ftui.rundir.slurm_state import query_job, SlurmJob, SlurmUnavailable
from ftui.rundir.summary import RunSummary

QUEUED_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
# A run_end "stopped" that no Stop asked for: Slurm's TERM (a time limit, a preemption, a
# cancel from outside) reached the ranks, which saved a checkpoint. Slurm's state says why.
CANCELLED_STATES = frozenset({"CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})

FORGOTTEN_REASON = N_("Slurm no longer knows job {job} and the run recorded no end; see RUN/{output} and train.log")
NO_RUN_END_REASON = N_("Slurm job {job} ended ({state}) but its ranks recorded no end; see RUN/{output} and train.log")
CANCELLED_QUEUED_REASON = N_("stopped: Slurm job {job} was cancelled before it started")
STOPPED_REASON = N_("stopped: Slurm cancelled job {job} before its ranks could record their end")


class Asked:
    """Slurm's answer for one settle, asked once and only when needed: the job (None: Slurm
    forgot it), or ``unavailable``."""

    def __init__(self, job_id: str):
        self.job_id = job_id
        self._answer: tuple[SlurmJob | None, bool] | None = None

    def _ask(self) -> tuple[SlurmJob | None, bool]:
        if self._answer is None:
            try:
                self._answer = (query_job(self.job_id), False)
            except SlurmUnavailable:
                self._answer = (None, True)
        return self._answer

    @property
    def job(self) -> SlurmJob | None:
        return self._ask()[0]

    @property
    def unavailable(self) -> bool:
        return self._ask()[1]

    @property
    def live(self) -> bool:
        return self.job is not None and self.job.live


def show_live(summary: RunSummary, job: SlurmJob, life: int = 0) -> None:
    """Slurm has the job: queued while it waits (its reason, its estimated start), else what
    the events say (a life that has not written run_start yet is starting). ``life``: the
    restart count of the life launch.json records. A PENDING answer about that same life while
    its events say it runs is older than them (answers are cached for seconds): the run stays
    running; a requeued life's PENDING has a higher restart count."""
    take_state(summary, job)
    stale = summary.status == "running" and job.restarts <= life
    if job.state in QUEUED_STATES and not stale:
        summary.status = "queued"
        summary.queue_reason, summary.queue_start = job.reason, job.start
    elif summary.status == "queued":
        summary.status = "starting"


def take_state(summary: RunSummary, job: SlurmJob | None) -> None:
    summary.slurm_state = job.state if job is not None else None
    summary.queue_reason = summary.queue_start = None


def _output(job_id: str) -> str:
    return SLURM_OUTPUT_PATTERN.replace("%j", job_id)


def verdict(run_dir: Path, asked: Asked) -> dict[str, Any] | None:
    """Slurm's verdict on the ended job: read now (and kept in the run if not yet: Slurm
    forgets it), or the one kept before; None when neither says. A kept verdict of another
    job (a resubmitted run) or of an earlier life is not this one's."""
    kept = read_slurm_end(run_dir)
    if kept is not None and kept["job_id"] == asked.job_id and not requeued(run_dir):
        return kept  # kept by the batch step or a reader before: no need to ask
    job = asked.job
    if job is not None and not job.live:
        if kept is None or (kept["job_id"], kept["state"], kept["restarts"]) != (job.job_id, job.state, job.restarts):
            record_slurm_end(run_dir, job)
        return {"job_id": job.job_id, "state": job.state, "t": job.end}
    if kept is not None and kept["job_id"] == asked.job_id:
        return kept
    return None


def end_without_run_end(summary: RunSummary, run_dir: Path, asked: Asked) -> None:
    """The job has ended (or Slurm forgot it) and the events end without run_end."""
    job_id = asked.job_id
    never_ran = summary.status == "queued"
    said = verdict(run_dir, asked)
    take_state(summary, None)
    if said is not None:
        summary.slurm_state = said["state"]
        summary.ended = said.get("t")
    state = said["state"] if said is not None else None
    if os.path.exists(run_dir / STOP_FILE):
        summary.status = "stopped"
        summary.reason = (_(CANCELLED_QUEUED_REASON) if never_ran else _(STOPPED_REASON)).format(job=job_id)
    elif state is None:
        summary.status = "died"
        summary.reason = _(FORGOTTEN_REASON).format(job=job_id, output=_output(job_id))
    elif state == "COMPLETED":
        summary.status = "died"
        summary.reason = _(NO_RUN_END_REASON).format(job=job_id, state=state, output=_output(job_id))
    else:
        summary.status = "failed" if state == "FAILED" else "cancelled"
        summary.reason, summary.hint = ending_text(state, job_id)


def kept_end(run_dir: Path, job_id: str) -> bool:
    """Whether the run holds Slurm's verdict on this life of job ``job_id`` (node 0 removes a
    previous life's at a life's start; a requeue pending is not an end)."""
    kept = read_slurm_end(run_dir)
    return kept is not None and kept["job_id"] == job_id and not requeued(run_dir)


def requeued(run_dir: Path) -> bool:
    return os.path.exists(run_dir / REQUEUE_FILE)


def needs_verdict(summary: RunSummary, run_dir: Path) -> bool:
    """Whether an ended run's run_end leaves Slurm something to say: the ranks stopped without a
    Stop asking (Slurm's TERM), or for a requeue (the job may wait for its next life)."""
    return summary.status == "stopped" and not os.path.exists(run_dir / STOP_FILE)


def refine_end(summary: RunSummary, run_dir: Path, asked: Asked) -> None:
    """A run_end ``stopped`` that no Stop asked for, in a job Slurm has ended: the ranks saved a
    checkpoint on Slurm's TERM; the ending is Slurm's (a time limit, a preemption ...)."""
    said = verdict(run_dir, asked)
    if said is None:
        return
    summary.slurm_state = said["state"]
    if said["state"] in CANCELLED_STATES:
        summary.status = "cancelled"
        summary.reason, summary.hint = ending_text(said["state"], asked.job_id)


def when_text(t: float, now: float | None = None) -> str:
    """A time as the lines show it: HH:MM today, the date too otherwise."""
    now = time.time() if now is None else now
    fmt = "%H:%M" if time.localtime(t)[:3] == time.localtime(now)[:3] else "%Y-%m-%d %H:%M"
    return time.strftime(fmt, time.localtime(t))


def slurm_line(summary: RunSummary) -> str | None:
    """What Slurm says of a live Slurm run, in one line for the followers and ``ftui runs``:
    ``queued (Resources), estimated start 16:18`` or ``running on n1,n2``; None for any other
    run. Slurm's words are untrusted text: the callers show them escaped."""
    if summary.slurm_job is None or not summary.live:
        return None
    if summary.status == "queued":
        line = _("queued")
        if summary.queue_reason:
            line += f" ({summary.queue_reason})"
        if summary.queue_start is not None:
            line += ", " + _("estimated start {when}").format(when=when_text(summary.queue_start))
        return line + " " + _("(Slurm job {job})").format(job=summary.slurm_job)
    if summary.nodes:
        return _("{status} on {nodes}").format(status=summary.status, nodes=",".join(summary.nodes[:16])) + \
            ("…" if len(summary.nodes) > 16 else "") + " " + _("(Slurm job {job})").format(job=summary.slurm_job)
    return None
