"""Stopping a job and deleting a run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftui.i18n import _
from ftui.ops import errors
from ftui.ops.lookup import refuse_live


def stop(job_dir: Path, force: bool = False) -> str:
    """Asks a job to stop (it finishes the step and saves a checkpoint), or kills it
    (``force``); returns what was done, in words (ftui.jobs.launch.stop_run)."""
    from ftui.jobs import launch
    from ftui.jobs.slurm_control import SlurmControlError

    try:
        return launch.stop_run(job_dir, force=force)
    except SlurmControlError as e:
        raise errors.StopFailed(str(e)) from None


def is_running(job_dir: Path) -> bool:
    """Whether the run's (or job's) supervisor is alive on this machine, or Slurm has the run's
    job (queued or running, or Slurm cannot be asked: Stop then says so): there is something to stop."""
    from ftui.jobs import launch
    from ftui.jobs.slurm_control import slurm_job_live
    from ftui.rundir.launch_record import read_launch_info
    from ftui.rundir.slurm_state import slurm_scheduler

    info = read_launch_info(job_dir)
    if slurm_scheduler(info) is not None:
        return slurm_job_live(info)
    return launch.run_processes(job_dir)[0] is not None


def is_slurm_run(job_dir: Path) -> bool:
    """Whether Slurm runs the run's job (launch.json names a Slurm job)."""
    from ftui.rundir.launch_record import read_launch_info
    from ftui.rundir.slurm_state import slurm_scheduler

    return slurm_scheduler(read_launch_info(job_dir)) is not None


def live_jobs(run_dir: Path) -> list[Path]:
    """The run's jobs (predict, eval, export, serve: RUN/KIND/ID) that run now."""
    from ftui.rundir.delete import live_job_dirs

    return live_job_dirs(run_dir)


@dataclass(frozen=True)
class DeleteQuestion:
    """What a delete would remove, to ask about first: the plan (a run that is a link loses
    only the link) and the run's summary (its status and progress, said in the question)."""

    plan: Any
    summary: Any


def plan_delete(run_dir: Path) -> DeleteQuestion:
    """What deleting the run removes; RunIsLive when a job runs in it (refused before asking;
    delete checks again under the job lock)."""
    from ftui.rundir.delete import delete_plan
    from ftui.rundir.follower import summarize_run

    summary = summarize_run(run_dir)
    refuse_live(run_dir, summary, _("; nothing deleted"))
    return DeleteQuestion(delete_plan(run_dir), summary)


def delete(plan: Any) -> Any:
    """Deletes the run the user was asked about (``plan``: refused if the run changed since
    the question, or a job started in it); returns what was removed (ftui.rundir.delete.Deleted)."""
    from ftui.rundir.delete import delete_run, RunDeleteError

    try:
        return delete_run(plan.run, asked=plan)
    except RunDeleteError as e:
        raise errors.DeleteRefused(str(e)) from None
