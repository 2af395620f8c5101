"""A run's state as its events and launch record tell it: ``RunSummary``, the one fold of
events into a run's status, model, step and loss that every reader keeps.

A run's status is told by its files alone: a ``run_end`` says completed, stopped or failed;
only a reader can conclude ``died`` (no run_end, no live job) or ``unreadable``. No torch here.
"""

from __future__ import annotations

import os
import time
from array import array
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ftui.i18n import N_, _
from ftui.rundir.events import RUN_END_STATUSES, started_job, TRAIN_JOB
from ftui.rundir.launch_record import plausible_time, read_launch_record
from ftui.rundir.paths import STOP_FILE

LIVE_STATUSES = ("queued", "starting", "running")  # queued: a Slurm job Slurm has not started yet
# A run_end says completed, stopped or failed; only a reader can conclude these (the job is gone
# without a run_end; the files cannot be read; Slurm ended the job). Every reader tells "ended"
# with END_STATUSES.
READER_END_STATUSES = ("died", "unreadable", "cancelled")
END_STATUSES = RUN_END_STATUSES + READER_END_STATUSES


DIED_REASON = N_("the launcher exited without writing run_end")
STOPPED_EARLY_REASON = N_("stopped before the job could record its end (a Stop during start-up, or a second Stop that killed it)")


def reason_text(reason: str | None) -> str:
    """A run's end reason as shown: one ftui writes itself (marked with N_, stored in English
    in events.jsonl, which scripts read) in the interface's language, any other as written."""
    return _(reason) if reason else ""


@dataclass
class RunSummary:
    """What the runs list shows, folded from one run's events and launch info."""

    run_id: str
    path: Path
    status: str = "starting"  # one of LIVE_STATUSES or END_STATUSES
    job: str = TRAIN_JOB  # the job its start event names (ftui.rundir.job_kinds): train, predict, eval, export
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
    slurm_job: str | None = None  # a Slurm run's job id (launch.json's scheduler)
    slurm_state: str | None = None  # Slurm's state of the job as last read
    queue_reason: str | None = None  # squeue's reason while queued (Resources, BeginTime, ...)
    queue_start: float | None = None  # Slurm's estimated start while queued, None when it gives none
    nodes: list[str] = field(default_factory=list)  # where the ranks run (launch.json's nodes)
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
        nodes = launch.get("nodes")
        self.nodes = [n for n in nodes if isinstance(n, str)][:4096] if isinstance(nodes, list) else []
        scheduler = launch.get("scheduler")
        job_id = scheduler.get("job_id") if isinstance(scheduler, dict) else None
        self.slurm_job = job_id if isinstance(job_id, str) and job_id.isdigit() else None

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

    def take_slurm_job(self, job: Any) -> None:
        """What Slurm says of the run's job (a SlurmJob, None when Slurm no longer knows it):
        a job Slurm has not started reads ``queued``, with Slurm's reason and estimated start."""
        self.slurm_state = job.state if job is not None else None
        pending = job is not None and job.state == "PENDING"
        self.queue_reason = job.reason if pending else None
        self.queue_start = job.start if pending else None
        if pending and self.live and self.status != "queued":
            self.status, self._unqueued = "queued", self.status
        elif not pending and self.status == "queued":
            self.status = getattr(self, "_unqueued", "starting")

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
        t = t if plausible_time(t) else None
        if t is not None and (self.last_t is None or t > self.last_t):
            self.last_t = t
        return t

    def apply(self, event: dict[str, Any]) -> None:
        """Folds one event into the summary (events arrive in file order)."""
        kind = event["event"]
        t = self.note_time(event.get("t"))
        job = started_job(event)
        if job is not None and job != TRAIN_JOB:
            self.start_job(job, event, t)
        elif job is not None:
            self.status = "running"
            self.job = job
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
        elif kind == "progress":  # a predict or eval job: examples answered stand for steps
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

    def start_job(self, job: str, event: dict[str, Any], t: float | None) -> None:
        """A job's start (``job_start``, or an older job's run_start that carried ``job``): what
        it loads, in what precision, on how many processes; the examples it answers stand
        for its steps. It has no training method or engine."""
        self.status, self.job = "running", job
        self.ended = self.reason = self.hint = self.error = None
        source = event.get("source")
        self.model = event.get("model") or (source if isinstance(source, str) else None)
        self.method = self.engine = None
        self.precision = event.get("precision")
        self.world_size = event.get("world_size")
        examples = event.get("examples")
        self.max_steps = examples if type(examples) is int else None
        self.started = self.started or t
