"""Following a started job in the terminal until it ends: Ctrl-C stops it, a second Ctrl-C
kills it (``ftui train``, ``ftui predict`` / ``eval``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ftui.i18n import N_, _

# How long a followed job's processes may take to exit once its events have ended (rank 0's
# teardown, then the launcher and the supervisor): the command returns after them.
EXIT_WAIT_S = 60.0
# What Ctrl-C says while a training run / an offline job is followed: (first, second)
TRAIN_INTERRUPTS = (N_("stopping: the ranks finish the current step (Ctrl-C again to kill)"), N_("killing the run"))
JOB_INTERRUPTS = (N_("stopping: what is done is kept"), N_("killing the job"))


def follow_job(job_dir: Path, out: Console, offset: int = 0, says: tuple[str, str] = TRAIN_INTERRUPTS) -> tuple[Any, bool]:
    """Follows a started job until it ends (Ctrl-C stops it, a second Ctrl-C kills it, each
    saying ``says``); returns its summary and whether the user interrupted it."""
    from ftui.cli.follow import follow_run
    from ftui.ops.control import stop
    from ftui.ops.errors import StopFailed

    interrupts = []

    def stop_run(job_dir: Path, force: bool = False) -> str:
        try:
            return stop(job_dir, force=force)
        except StopFailed as e:  # a Slurm run whose scancel failed: said, and the following goes on
            out.print("[red]" + escape(str(e)) + "[/]")
            return str(e)

    def interrupted(count: int) -> None:
        interrupts.append(count)
        if count == 1:
            out.print("[yellow]" + _(says[0]) + "[/]")
            stop_run(job_dir)
            return
        said = stop_run(job_dir, force=True)  # said before: it may have ended gracefully meanwhile
        out.print("[red]" + _(says[1]) + "[/]" if said == _("killed") else "[dim]" + escape(said) + "[/]")

    summary = follow_run(job_dir, out, on_interrupt=interrupted, start_offset=offset)
    wait_for_exit(job_dir, out)
    return summary, bool(interrupts)


def wait_for_exit(job_dir: Path, out: Console, timeout_s: float = EXIT_WAIT_S) -> None:
    """Returns once the job's processes have exited (its supervisor's lock is free), not as
    soon as its events end: they still write in the job directory after run_end
    (ftui.rundir.liveness.wait_until_gone), and what runs after the command (a script that
    copies, archives or deletes the run) must find it finished. Said when they take longer
    than ``timeout_s``; Ctrl-C stops the wait."""
    from ftui.rundir.liveness import wait_until_gone

    try:
        if not wait_until_gone(job_dir, timeout_s):
            out.print("[yellow]" + escape(_("the job's events have ended but its processes still run after {seconds} s; "
                                             "ftui runs shows when they are gone").format(seconds=f"{timeout_s:.0f}")) + "[/]")
    except KeyboardInterrupt:
        pass

