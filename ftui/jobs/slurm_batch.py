"""``python -m ftui.jobs.slurm_batch RUN_DIR [--resume CHECKPOINT]``: the batch step of a Slurm run
(the last line of RUN/slurm.sh execs it, so it is the process Slurm's ``B:USR1`` warning reaches).

It runs one ftui.jobs.slurm_node per node under ``srun`` as a child (not exec: it must stay to
handle Slurm's signals) and waits for it:

- **USR1**, Slurm's warning before the time limit (``--signal=B:USR1@S``): with ``slurm_requeue``
  it leaves ``requeue_requested``, has every step process signalled (``scancel --signal=TERM``:
  the ranks save a checkpoint and write run_end stopped), waits for srun and then, unless the run
  completed or a Stop was asked for meanwhile, requeues the job (``scontrol requeue``: the same job
  id, a new life that resumes). Where requeue is not allowed (some clusters refuse it to users) it
  says so and how to resume by hand; the run reads stopped. Without ``slurm_requeue`` the warning
  is a Stop: a checkpoint, then the run ends.
- **TERM** (scancel, the time limit, a preemption, a node going away): Slurm ends the job. The
  ranks got TERM from slurmstepd and save what they can; this process keeps waiting for srun
  (Slurm SIGKILLs everything after KillWait) and records Slurm's verdict in the run
  (RUN/slurm_end.json) as soon as Slurm names a state that is not live, since Slurm forgets the
  job after MinJobAge.

A requeued life (SLURM_RESTART_COUNT > 0, or requeue_requested left by the previous one) resumes
from the run's newest complete checkpoint, the same one on every node (none yet: it starts over).
Exit code: 0 when requeued, completed or stopped; srun's otherwise (Slurm's FAILED then says so).
No torch here.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from ftui.i18n import _
from ftui.jobs.slurm_node import parse_args  # the batch step and srun's task take the same RUN_DIR [--resume CKPT]
from ftui.rundir.checkpoints import CheckpointError, resolve_checkpoint
from ftui.rundir.event_reader import LIFECYCLE_TAIL, EventReader
from ftui.rundir.events import START_EVENTS
from ftui.rundir.paths import CONFIG_FILE, EVENTS_FILE, REQUEUE_FILE, SLURM_OUTPUT_PATTERN, STOP_FILE
from ftui.rundir.run_files import UnreadableFile, file_size, line_start_after, read_at

POLL_S = 0.2
SLURM_CALL_TIMEOUT_S = 30.0
VERDICT_WAIT_S = 8.0  # after srun ended: how long to wait for Slurm to name the job's end state


def say(message: str) -> None:
    """A line of the job's output (RUN/slurm-ID.out)."""
    try:
        print("[ftui] " + message, flush=True)
    except OSError:
        pass


def slurm_call(args: list[str]) -> tuple[bool, str]:
    """Runs a Slurm command (scancel, scontrol): (whether it succeeded, its output or why not)."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=SLURM_CALL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, str(err)
    return proc.returncode == 0, (proc.stderr or proc.stdout).strip()[:500]


def job_ending(run_dir: Path) -> str | None:
    """The status of the run_end of the job that wrote the events last (completed, stopped,
    failed), or None when that job wrote no run_end (or no events at all)."""
    path = run_dir / EVENTS_FILE
    try:
        size = file_size(path)
        events = EventReader(path, offset=line_start_after(path, size - LIFECYCLE_TAIL)).read_new(LIFECYCLE_TAIL + (64 << 10))
    except (UnreadableFile, OSError):
        return None
    life = [e for e in events if e["event"] in (*START_EVENTS, "run_end")]
    status = life[-1].get("status") if life and life[-1]["event"] == "run_end" else None
    return status if isinstance(status, str) else None


def requeued_life(run_dir: Path, env: dict[str, str]) -> bool:
    """Whether this life follows another of the same job (a requeue, by ftui or by Slurm)."""
    restarts = env.get("SLURM_RESTART_COUNT", "").strip()
    return (restarts.isdigit() and int(restarts) > 0) or (run_dir / REQUEUE_FILE).exists()


def life_resume(run_dir: Path, given: Path | None, env: dict[str, str]) -> Path | None:
    """The checkpoint this life starts from: the one submitted with (first life), else, for a
    requeued life, the run's newest sound one (None: no checkpoint yet, the run starts over)."""
    if not requeued_life(run_dir, env):
        return given
    skipped: list[str] = []
    try:
        found = resolve_checkpoint(run_dir, None, skipped)
    except CheckpointError as err:
        say(_("requeued: {reason}; starting over").format(reason=err) if given is None
            else _("requeued: {reason}; starting from {checkpoint} again").format(reason=err, checkpoint=given))
        return given
    for line in skipped:
        say(line)
    say(_("requeued: resuming from {checkpoint}").format(checkpoint=found))
    return found


# slurmstepd's line in the job's output when Slurm ends the job: the state it means by its cause
# (Slurm 22.05's words; a requeue's "DUE TO JOB REQUEUE" is no ending)
ENDING_LINE = re.compile(r"\*\*\* JOB (\d+) ON \S+ CANCELLED AT \S+(?: DUE TO ([A-Z ]+?))?(?: \([^)]*\))? \*\*\*")
ENDING_CAUSES = {None: "CANCELLED", "TIME LIMIT": "TIMEOUT", "PREEMPTION": "PREEMPTED", "NODE FAILURE": "NODE_FAIL"}
OUTPUT_TAIL = 64 << 10


def output_verdict(run_dir: Path, job_id: str, restarts: int, since: int = 0) -> Any:
    """Slurm's ending of the job as slurmstepd wrote it into RUN/slurm-ID.out after byte ``since``
    (where this life's part starts: the file is appended to by every life), as a SlurmJob; None
    when it wrote none (yet) or named a requeue."""
    from ftui.rundir.slurm_state import SlurmJob

    try:
        raw = read_at(output_file(run_dir, job_id), max(since, output_size(run_dir, job_id) - OUTPUT_TAIL), OUTPUT_TAIL)
    except (UnreadableFile, OSError):
        return None
    found = [m for m in ENDING_LINE.finditer((raw or b"").decode("utf-8", "replace")) if m.group(1) == job_id]
    if not found or found[-1].group(2) not in ENDING_CAUSES:
        return None
    cause = found[-1].group(2)
    return SlurmJob(job_id=job_id, state=ENDING_CAUSES[cause], reason=cause.title().replace(" ", "") if cause else None,
                    start=None, end=time.time(), time_limit=None, restarts=restarts, exit_code=None, nodelist=None)


def output_file(run_dir: Path, job_id: str) -> Path:
    """The job's output (sbatch --output=RUN/slurm-%j.out, as ftui's batch script asks)."""
    return run_dir / SLURM_OUTPUT_PATTERN.replace("%j", job_id)


def output_size(run_dir: Path, job_id: str) -> int:
    try:
        return file_size(output_file(run_dir, job_id))
    except (UnreadableFile, OSError):
        return 0


def srun_command(run_dir: Path, resume: Path | None, python: str) -> list[str]:
    """One ftui.jobs.slurm_node per node; a node that fails ends the others (--kill-on-bad-exit)."""
    return ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1", python, "-m", "ftui.jobs.slurm_node", str(run_dir),
            *(["--resume", str(resume)] if resume is not None else [])]


def read_requeue_setting(run_dir: Path) -> bool:
    """The config's slurm_requeue (False when the config cannot be read: the node refuses it anyway)."""
    try:
        from ftui.config.load import read_run_config

        return read_run_config(run_dir / CONFIG_FILE).slurm_requeue
    except Exception:
        return False


class BatchStep:
    """The batch step's state: the signals Slurm sent, what was done about them."""

    def __init__(self, run_dir: Path, job_id: str, requeue_allowed: bool,
                 query: Callable[[str], Any] | None = None, restarts: int = 0) -> None:
        self.run_dir = run_dir
        self.restarts = restarts  # SLURM_RESTART_COUNT: the lives before this one
        self.output_from = output_size(run_dir, job_id)  # this life's part of the job's output starts here
        self.job_id = job_id
        self.requeue_allowed = requeue_allowed
        self.query = query
        self.warned = False  # USR1 received
        self.requeue = False  # ...and the job is to be requeued once srun ends
        self.terminated = False  # TERM received: Slurm is ending the job
        self.verdict: str | None = None  # the end state recorded in slurm_end.json

    def on_signal(self, signum: int, _frame: object) -> None:
        if signum == signal.SIGUSR1:
            self.warned = True
        else:
            self.terminated = True

    def handle_warning(self) -> None:
        """USR1, once: checkpoint every rank and stop them (to requeue, or not)."""
        if self.requeue_allowed:
            try:
                (self.run_dir / REQUEUE_FILE).write_text(f"{time.time()}\n")
            except OSError as err:
                say(_("could not write {file}: {reason}").format(file=REQUEUE_FILE, reason=err))
            self.requeue = True
            say(_("time-limit warning: saving a checkpoint, then requeueing job {job}").format(job=self.job_id))
        else:
            say(_("time-limit warning: saving a checkpoint and stopping (slurm_requeue is off; continue with "
                  "ftui train --resume {run})").format(run=self.run_dir))
        ok, out = slurm_call(["scancel", "--signal=TERM", self.job_id])
        if not ok:
            say(_("scancel --signal=TERM {job} failed: {reason}").format(job=self.job_id, reason=out))

    def try_verdict(self, ask_slurm: bool = True) -> bool:
        """Records Slurm's end state once it is known; True once recorded. While this batch step
        lives Slurm says COMPLETING (the job ends when it does), so the state comes from the line
        slurmstepd wrote into the job's output (``*** JOB N ON HOST CANCELLED AT T DUE TO TIME
        LIMIT ***``), or from Slurm where it already names an end state (``ask_slurm``)."""
        if self.verdict is not None:
            return True
        job = output_verdict(self.run_dir, self.job_id, self.restarts, self.output_from)
        if job is None and ask_slurm:
            job = self.slurm_verdict()
        if job is None:
            return False
        from ftui.rundir.slurm_end import record_slurm_end

        try:
            record_slurm_end(self.run_dir, job)
        except OSError as err:
            say(_("could not record Slurm's verdict ({state}): {reason}").format(state=job.state, reason=err))
        self.verdict = job.state
        say(_("Slurm ended job {job}: {state}").format(job=self.job_id, state=job.state))
        return True

    def slurm_verdict(self) -> Any:
        """The job as Slurm tells it, when that is an end state (else None)."""
        if self.query is None:
            return None
        try:
            job = self.query(self.job_id)
        except Exception as err:  # SlurmUnavailable, or anything a broken scontrol gives
            say(_("could not read job {job}'s state from Slurm: {reason}").format(job=self.job_id, reason=err))
            return None
        return None if job is None or job.live else job

    def wait(self, srun: subprocess.Popen) -> int:
        """Waits for srun, acting on the signals as they come; srun's exit code (128+N: signal N)."""
        handled_warning = False
        while True:
            if self.warned and not handled_warning:
                handled_warning = True
                self.handle_warning()
            if self.terminated and self.verdict is None:
                # Slurm is ending the job: its line is in the output at once, and Slurm SIGKILLs this
                # step KillWait seconds later, maybe before srun has ended (a loaded machine)
                self.try_verdict(ask_slurm=False)
            try:
                code = srun.wait(timeout=POLL_S)
                return code if code >= 0 else 128 - code
            except subprocess.TimeoutExpired:
                continue

    def finish(self, code: int) -> int:
        """After srun: requeue, record the verdict; the batch step's exit code."""
        ending = job_ending(self.run_dir)
        if self.requeue:
            return self.requeue_or_stop(ending)
        if self.terminated:
            deadline = time.monotonic() + VERDICT_WAIT_S
            while not self.try_verdict() and time.monotonic() < deadline:
                time.sleep(1.0)
        if ending is None and (self.run_dir / STOP_FILE).exists():
            # Stop's TERM reached a node before its ranks could handle it (while it started): a
            # stop, not a crash, as the supervisor says of a job stopped during its start-up
            from ftui.jobs.supervise import write_run_end
            from ftui.rundir.summary import STOPPED_EARLY_REASON

            write_run_end(self.run_dir, status="stopped", reason=STOPPED_EARLY_REASON, exit_code=code)
            ending = "stopped"
        return 0 if ending in ("completed", "stopped") else code

    def requeue_happened(self) -> bool:
        """Whether Slurm requeued the job although ``scontrol requeue`` did not say so: the
        requeue ends the job's processes at once, scontrol among them, before it can answer.
        Slurm's restart count tells (it rose past this life's)."""
        if self.query is None:
            return False
        try:
            job = self.query(self.job_id)
        except Exception:
            return False
        return job is not None and job.restarts > self.restarts

    def requeue_or_stop(self, ending: str | None) -> int:
        stopped = (self.run_dir / STOP_FILE).exists()
        if ending == "completed" or stopped:
            (self.run_dir / REQUEUE_FILE).unlink(missing_ok=True)
            say(_("not requeued: the run completed") if ending == "completed" else _("not requeued: a Stop was asked for"))
            return 0
        ok, out = slurm_call(["scontrol", "requeue", self.job_id])
        if ok or self.requeue_happened():
            say(_("requeued job {job}: its next life resumes from the newest checkpoint").format(job=self.job_id))
            return 0
        (self.run_dir / REQUEUE_FILE).unlink(missing_ok=True)
        say(_("scontrol requeue {job} failed ({reason}): the run stays stopped at its checkpoint; continue it with "
              "ftui train --resume {run}").format(job=self.job_id, reason=out, run=self.run_dir))
        return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args is None:
        print(_("usage: python -m ftui.jobs.slurm_batch RUN_DIR [--resume CHECKPOINT_DIR]"), file=sys.stderr)
        return 2
    run_dir, given = args[0].resolve(), args[1]
    env = dict(os.environ)
    job_id = env.get("SLURM_JOB_ID", "").strip()
    if not job_id.isdigit():
        print(_("SLURM_JOB_ID is not set: this command is the batch step of a Slurm job (RUN/slurm.sh runs it)"),
              file=sys.stderr)
        return 2
    from ftui.rundir.slurm_state import query_job

    restarts = env.get("SLURM_RESTART_COUNT", "0").strip()
    step = BatchStep(run_dir, job_id, read_requeue_setting(run_dir), query=query_job,
                     restarts=int(restarts) if restarts.isdigit() else 0)
    # Handlers before srun starts: a warning or a cancel that comes while it starts is not lost.
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, step.on_signal)
    resume = life_resume(run_dir, given, env)
    cmd = srun_command(run_dir, resume, sys.executable)
    say(_("job {job}, life {life}: {command}").format(job=job_id, life=step.restarts + 1, command=shlex.join(cmd)))
    try:
        srun = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    except OSError as err:
        say(_("srun could not be started: {reason}").format(reason=err))
        return 1
    return step.finish(step.wait(srun))


if __name__ == "__main__":
    sys.exit(main())
