"""Stopping a run Slurm runs, from wherever the user is (the login node): through ``scancel``,
not a signal to a local process (its ranks are on compute nodes).

The first Stop leaves ``stop_requested`` in the run (the run then reads ``stopped`` whatever
Slurm ends the job as) and sends every step process SIGTERM (``scancel --signal=TERM``): the
ranks finish the step, save a checkpoint and write run_end; the batch step is not signalled
and ends the job after srun. A queued job never started: it is cancelled. A second Stop, or
a forced one, cancels the job (Slurm sends TERM, then KILL after KillWait). No torch here.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from ftui.i18n import _
from ftui.rundir.paths import STOP_FILE
from ftui.rundir.slurm_state import clear_cache, query_job, slurm_scheduler, SlurmUnavailable
from ftui.rundir.slurm_verdict import QUEUED_STATES

SCANCEL_TIMEOUT = 30.0


class SlurmControlError(Exception):
    """Slurm could not be asked to stop the job: what happened and what to do."""


def slurm_job_live(launch: dict[str, Any]) -> bool:
    """Whether Slurm has the run's job (queued or running): there is something to stop. Where
    Slurm cannot be asked it is taken as live, so that a Stop says why it cannot be done."""
    sched = slurm_scheduler(launch)
    if sched is None:
        return False
    try:
        job = query_job(sched["job_id"], max_age=0.0)
    except SlurmUnavailable:
        return True
    return job is not None and job.live


def stop_slurm_job(run_dir: Path, launch: dict[str, Any], force: bool = False) -> str:
    """Stops the run's Slurm job (see the module); returns what was done, in words;
    SlurmControlError when Slurm cannot be reached or refuses."""
    sched = slurm_scheduler(launch)
    if sched is None:
        return _("the run is not running")
    job_id = sched["job_id"]
    try:
        job = query_job(job_id, max_age=0.0)
    except SlurmUnavailable as e:
        raise SlurmControlError(_("cannot ask Slurm about job {job} ({error}); stop it where Slurm's commands "
                                  "work (the login node): ftui stop {run}, or scancel {job}").format(
                                      job=job_id, error=e, run=Path(run_dir).name)) from None
    if job is None or not job.live:
        return _("the run is not running")
    stop_file = Path(run_dir) / STOP_FILE
    second = stop_file.exists()
    if not second:
        try:
            stop_file.write_text(f"{time.time()}\n")
        except OSError:
            pass  # the job still stops; only its ending would then read as Slurm's cancel
    try:
        if job.state in QUEUED_STATES:
            _scancel([job_id])
            return _("cancelled Slurm job {job} (it was queued)").format(job=job_id)
        if force or second:
            _scancel([job_id])
            return _("cancelled Slurm job {job}").format(job=job_id)
        _scancel(["--signal=TERM", job_id])
        return _("asked Slurm job {job}'s ranks to stop: they finish the step and save a checkpoint").format(job=job_id)
    finally:
        clear_cache()  # the next read sees what the stop did


def _scancel(args: list[str]) -> None:
    try:
        done = subprocess.run(["scancel", *args], capture_output=True, timeout=SCANCEL_TIMEOUT, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SlurmControlError(_("scancel is not on the PATH: run ftui stop where Slurm's commands are "
                                  "(the login node), or cancel the job there with scancel")) from None
    except (subprocess.TimeoutExpired, OSError) as e:
        raise SlurmControlError(_("scancel did not work ({error}); try again, or cancel the job with scancel").format(
            error=e)) from None
    if done.returncode != 0:
        said = " ".join(done.stderr[:2000].decode("utf-8", "replace").split())[:300]
        raise SlurmControlError(_("scancel {args} failed (exit {code}): {said}").format(
            args=" ".join(args), code=done.returncode, said=said or "-"))
