"""Following a run: the one reader of a run's events that decides its end, and the one-shot
summary of a run (the runs list, ``ftui attach``, a resume's record of the time so far).

Every follower (``ftui train``'s display, ``ftui watch``, the dashboard, the job screens,
the runs list) reads through :class:`RunFollower`, so they can never disagree about a run.
No torch here.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Callable

from ftui.rundir.event_reader import EventReader
from ftui.rundir.events import START_EVENTS, TRAIN_JOB
from ftui.rundir.launch_record import plausible_time, read_launch_info
from ftui.rundir.liveness import job_lock_held, launcher_gone
from ftui.rundir.paths import CONFIG_FILE, EVENTS_FILE
from ftui.rundir.run_files import UnreadableFile, file_size, line_start_after, read_at
from ftui.rundir.slurm_state import slurm_scheduler
from ftui.rundir.slurm_verdict import (Asked, end_without_run_end, kept_end, needs_verdict, QUEUED_STATES, refine_end, requeued,
                                      show_live)
from ftui.rundir.summary import RunSummary


class RunFollower:
    """The one follower of a run directory: every reader (``ftui train``'s display, ``ftui
    attach``/``watch``, the dashboard, the runs list) reads events and decides a run's end
    through it, so they can never disagree about a run.

    It reads new events by byte offset (never the whole file again) and hands each batch to
    ``fold`` (the caller's display or state; by default ``summary.apply``), which must keep
    ``summary`` up to date. :meth:`settle` is the end rule: a run_end ends the run; a file that
    cannot be read makes it ``unreadable``; a launcher that is gone gets one more read (it
    may have written run_end just before exiting), and a run still without run_end has died.
    """

    def __init__(self, run_dir: str | os.PathLike[str], summary: RunSummary,
                 fold: Callable[[list[Any]], None] | None = None, *, offset: int = 0, chunk: int | None = None,
                 compact: bool = False, launch: dict[str, Any] | None = None):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / EVENTS_FILE
        self.summary = summary
        self.fold = fold or self._apply
        self.reader = EventReader(self.path, offset)
        self.chunk = chunk  # bytes per read (None: all there is), so a long backlog is folded in parts
        self.compact = compact  # runs of steps as StepColumns: ``fold`` must take them
        self.launch = launch  # None: launch.json is read at each check (it may appear late)
        self.catching_up = False  # the last read stopped before the end of the file

    def _apply(self, events: list[Any]) -> None:
        for event in events:
            self.summary.apply(event)

    @property
    def ended(self) -> bool:
        return self.summary.has_ended

    def start_at_tail(self, head_bytes: int, tail_bytes: int, above: int | None = None,
                      head_kinds: tuple[str, ...] | None = START_EVENTS) -> tuple[int, int] | None:
        """A long run is not replayed: for a file over ``above`` bytes (head + tail by default)
        fold the events of ``head_kinds`` (None: all) from its first ``head_bytes`` (the start
        event is there) and move to the first line of its last ``tail_bytes``. Returns the byte span
        passed over, for a caller that reads it later or says so; None for a shorter file."""
        try:
            size = file_size(self.path)
            if size <= (head_bytes + tail_bytes if above is None else above):
                return None
            head = EventReader(self.path, self.reader.offset).read_new(head_bytes, compact=self.compact)
            tail_start = line_start_after(self.path, size - tail_bytes)
        except UnreadableFile as err:
            self.reader.problem = str(err)
            return None
        self.fold([e for e in head if isinstance(e, dict) and (head_kinds is None or e["event"] in head_kinds)])
        span = (self.reader.offset, tail_start)
        self.reader.offset = tail_start
        return span

    def read(self, max_bytes: int | None = None) -> list[Any]:
        """Reads and folds what the file gained (at most ``max_bytes``, else ``chunk``)."""
        batch = self.reader.read_new(self.chunk if max_bytes is None else max_bytes, compact=self.compact)
        if batch:
            self.fold(batch)
        self.catching_up = bool(batch) and self._behind()
        return batch

    def _behind(self) -> bool:
        try:
            return self.reader.offset < file_size(self.path)
        except UnreadableFile:
            return False

    def settle(self) -> bool:
        """Decides whether the run has ended, after a read (see the class); True when it has."""
        launch = self.launch if self.launch is not None else read_launch_info(self.run_dir)
        sched = slurm_scheduler(launch)
        if sched is not None:
            return self._settle_slurm(launch, Asked(sched["job_id"]))
        if self.ended:
            again = self._started_again(launch)
            if again is None:
                return True
            self.summary.start_again(again)  # a resume whose run_start is not written yet
            return False
        if self.reader.problem is not None:
            self.summary.mark_unreadable(self.reader.problem)
            return True
        if launcher_gone(self.run_dir, launch):
            self.fold(self.reader.read_new(compact=self.compact))  # all of the rest: it may end with run_end
            if self.reader.problem is not None:
                self.summary.mark_unreadable(self.reader.problem)
            elif self.summary.live:
                self.summary.mark_died()
            return True
        return False

    def _settle_slurm(self, launch: dict[str, Any], asked: Asked) -> bool:
        """settle for a run Slurm runs (ftui.rundir.slurm_verdict): at most one question to
        Slurm (cached), none for a run whose end is settled in its files."""
        summary = self.summary
        if self.ended:
            again = self._started_again(launch)
            if again is not None:  # a requeued life (or a resume) started: node 0 rewrote launch.json
                summary.start_again(again)
                return False
            if needs_verdict(summary, self.run_dir) and not kept_end(self.run_dir, asked.job_id):
                if asked.live and (requeued(self.run_dir) or asked.job.state in QUEUED_STATES):
                    summary.start_again(launch)  # stopped for a requeue (or a preemption that requeued
                    show_live(summary, asked.job)  # it): the job waits for its next life
                    return False
                refine_end(summary, self.run_dir, asked)
            elif needs_verdict(summary, self.run_dir):
                refine_end(summary, self.run_dir, asked)  # from the kept verdict: nothing asked
            return True
        if self.reader.problem is not None:
            summary.mark_unreadable(self.reader.problem)
            return True
        here = launch.get("host") in (None, socket.gethostname())
        if kept_end(self.run_dir, asked.job_id) and not (here and job_lock_held(self.run_dir)):
            pass  # Slurm's verdict is in the run: ended, nothing to ask (the runs list reads it every 2 s)
        elif asked.unavailable:
            return False  # not on the cluster: alive, as a run on another host
        elif asked.live:
            if plausible_time(launch.get("start_time")) and launch["start_time"] != summary.started:
                summary.take_launch(launch)  # a new life's launch.json
            restarts = launch.get("restarts")
            show_live(summary, asked.job, restarts if type(restarts) is int else 0)
            return False
        elif here and job_lock_held(self.run_dir):
            return False  # node 0 here still holds the job's lock: its ranks may yet write run_end
        self.fold(self.reader.read_new(compact=self.compact))  # all of the rest: it may end with run_end
        if self.reader.problem is not None:
            summary.mark_unreadable(self.reader.problem)
        elif summary.live:
            end_without_run_end(summary, self.run_dir, asked)
        elif needs_verdict(summary, self.run_dir):
            refine_end(summary, self.run_dir, asked)
        return True

    def _started_again(self, launch: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The resume's launch record when an ended run's job started again: launch.json was
        written after the last run_end and its job lives (else None). Until the resumed job
        writes its run_start (seconds: it loads the model first) the events still end with
        the previous run_end."""
        if launch is None:
            launch = self.launch if self.launch is not None else read_launch_info(self.run_dir)
        start, end = launch.get("start_time"), self.summary.ended
        if not isinstance(start, (int, float)) or not isinstance(end, (int, float)) or start <= end:
            return None
        return None if launcher_gone(self.run_dir, launch) else launch

    def poll(self) -> list[Any]:
        """One round of following: read, fold and, unless more is waiting, settle."""
        batch = self.read()
        if not self.catching_up:
            self.settle()
        return batch


SUMMARY_HEAD = 256 << 10  # bytes of events.jsonl a summary reads from its start (run_start) ...
SUMMARY_TAIL = 1 << 20  # ... and from its end (the last steps, the last run_start / run_end)


def summarize_run(run_dir: str | os.PathLike[str], full: bool = False) -> RunSummary:
    """Reads a run directory and says what state the run is in.

    A run without ``run_end`` whose launcher is gone has ``died`` (killed with -9, machine
    rebooted): the events cannot say so themselves. A long run is summarised from the
    head and the tail of its events (a bounded read, however many steps it has: the runs
    list refreshes every few seconds); ``full`` reads all of it (the whole loss curve).
    A run whose files cannot be read is ``unreadable``, with the reason."""
    path = Path(run_dir)
    summary = RunSummary(run_id=path.name, path=path)
    launch = read_launch_info(path)
    summary.take_launch(launch)
    follower = RunFollower(path, summary, launch=launch)
    skipped = None if full else follower.start_at_tail(SUMMARY_HEAD, SUMMARY_TAIL, head_kinds=None)
    follower.read(None if skipped is None else SUMMARY_TAIL + MAX_TAIL_LINE)
    follower.settle()
    if summary.status != "unreadable" and summary.job == TRAIN_JOB and (summary.model is None or summary.method is None):
        config = _config_scalars(path)  # read once: the runs list summarises every run every 2 s
        if summary.model is None:
            summary.model = config.get("model_name_or_path")
        if summary.method is None:
            # No run_start (it failed while loading): what the config asked for, as RunConfig.method
            # and .engine_name name it.
            kind = config.get("finetuning_type")
            summary.method = "qlora" if kind == "lora" and config.get("quantization_bit") else kind
            deepspeed = config.get("deepspeed")
            summary.engine = f"deepspeed:{Path(str(deepspeed)).name}" if deepspeed else config.get("engine")
    return summary


def earlier_segments(run_dir: Path) -> dict[str, float]:
    """What a resume's launch.json carries over from the run so far: when it was first
    started and the seconds its segments ran (each from its launch to its run_end, or to its
    last event when it died), so the runs list shows the run's whole time, not the last
    segment's or the days it sat stopped. Read before the resume's launch.json replaces the
    previous one."""
    before = summarize_run(run_dir)
    ran = before.duration_at(None)  # the previous job is gone: it ran to its end or its last event
    return {} if ran is None else {"first_start_time": before.first_start, "earlier_s": ran}


MAX_TAIL_LINE = 64 << 10  # slack for the line that straddles the tail's end while the run writes


def _config_scalars(run_dir: Path) -> dict[Any, str | int | float]:
    """config.yaml's settings that are plain text or numbers ({} when it cannot be read or
    is not a mapping: a run directory is untrusted)."""
    try:
        from ftui.safety.bounded_input import load_yaml

        data = load_yaml(read_at(run_dir / CONFIG_FILE, 0, 1 << 20) or b"") or {}
        return {k: v for k, v in data.items() if isinstance(v, (str, int, float))}
    except Exception:
        return {}
