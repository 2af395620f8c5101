"""Deleting a run: what goes (a run that is a link loses only the link), refused while a job
runs it or one of its jobs, and a delete killed midway finished by the next. No torch here.
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ftui.i18n import _
from ftui.rundir.job_kinds import job_dirs
from ftui.rundir.follower import summarize_run
from ftui.rundir.index import forget_run
from ftui.rundir.liveness import job_lock_held
from ftui.rundir.paths import CONFIG_FILE, EVENTS_FILE, LAUNCH_FILE, LOCK_FILE, LOG_FILE
from ftui.safety.text import visible


class RunDeleteError(RuntimeError):
    """A run that must not or cannot be deleted; the message says why and what to do."""


RUN_MARKERS = (LAUNCH_FILE, EVENTS_FILE, LOG_FILE, LOCK_FILE)  # beside config.yaml, one of these: a run ftui started
DELETE_KIND = "delete"  # ftui.safety.owned_dirs' marker kind of a run being deleted
DELETING_NAME = re.compile(r"\..+\.deleting")  # .RUN.RANDOM.deleting: a run being deleted (no listing shows dot-names)


@dataclass(frozen=True)
class DeletePlan:
    """What deleting a run removes, decided before the question is asked, so the question says
    exactly what goes. A run directory that is a symbolic link is never followed to delete:
    only the link and the run's index entry go, and the directory it points to is kept."""

    run: Path  # the run's directory as given (its parents resolved, the last name not)
    link_target: Path | None = None  # the run is a symbolic link to this directory, which is kept

    def question(self) -> str:
        if self.link_target is not None:
            return _("Remove the link {path} (to {target}) and its run index entry? The directory it points to is kept: "
                     "ftui does not follow a link to delete.").format(path=visible(self.run), target=visible(self.link_target))
        return _("Delete run {run}'s directory {path}? Its checkpoints and final/ go too; this cannot be undone.").format(
            run=visible(self.run.name), path=visible(self.run))


@dataclass(frozen=True)
class Deleted:
    """What delete_run did: the path removed, the directory kept (a link's target) and one line
    about leftovers of interrupted deletes it removed beside it (or None)."""

    path: Path
    kept: Path | None = None
    leftovers: str | None = None

    def message(self) -> str:
        if self.kept is not None:
            return _("removed the link {path}; the directory it pointed to, {target}, is kept (delete it with ftui delete {target})").format(
                path=visible(self.path), target=visible(self.kept))
        return _("deleted {path}").format(path=visible(self.path))


def delete_plan(run_dir: str | os.PathLike[str]) -> DeletePlan:
    given = Path(run_dir).expanduser()
    here = Path(os.path.realpath(given.parent)) / given.name  # a link in the parents leads to the run itself: fine
    if os.path.islink(here):
        return DeletePlan(here, Path(os.path.realpath(here)))
    return DeletePlan(Path(os.path.realpath(here)))


def _check_deletable(path: Path) -> None:
    if not (path / CONFIG_FILE).is_file() or not any(os.path.lexists(path / m) for m in RUN_MARKERS):
        raise RunDeleteError(_("{path} does not look like an ftui run directory (no {config} with a {launch} or {events}); "
                               "nothing deleted").format(path=path, config=CONFIG_FILE, launch=LAUNCH_FILE, events=EVENTS_FILE))
    summary = summarize_run(path)
    if summary.live:
        raise RunDeleteError(_("{run} is {status}: stop it first (ftui attach {run}, then s), then delete it").format(
            run=path.name, status=summary.status))
    busy = live_job_dirs(path)
    if busy:
        raise RunDeleteError(_("{run} has a {job} job running ({path}): stop it first (ftui attach {path}, then s), "
                               "then delete the run; nothing deleted").format(run=path.name, job=busy[0].parent.name, path=busy[0]))


def delete_run(run_dir: str | os.PathLike[str], asked: DeletePlan | None = None) -> Deleted:
    """Deletes a run directory that no job runs, and its run index entry (``delete_plan``: a
    run that is a symbolic link loses only the link and its entry). ``asked``: the plan the
    user answered yes to; when the run is no longer what it said (a link where a directory
    was, or the other way round), nothing is deleted.

    A live run is refused (stop it first). The job lock is held while the directory goes,
    so a ``--resume`` started meanwhile waits for it and then finds no run (it cannot train
    into a half-deleted directory). The directory is marked as being deleted
    (``ftui.safety.owned_dirs``: a marker this process keeps locked) and renamed to
    ``.RUN.RANDOM.deleting``, which no listing shows: the run leaves every list at once, however
    long the removal of its checkpoints takes. A delete killed midway leaves that directory,
    which the next delete in the same runs root and ``ftui runs`` recognise and remove."""
    from ftui.safety.owned_dirs import MARKER, claim, release, remove

    plan = delete_plan(run_dir)
    if asked is not None and plan != asked:
        now = (_("now a link to {target}").format(target=plan.link_target) if plan.link_target is not None
               else _("now the directory {path}").format(path=plan.run))
        raise RunDeleteError(_("{path} changed since the question ({now}); nothing deleted: ask again").format(
            path=visible(asked.run), now=visible(now)))
    if plan.link_target is not None:
        _check_deletable(plan.link_target)
        try:
            os.unlink(plan.run)
        except OSError as err:
            raise RunDeleteError(_("cannot remove the link {path}: {reason}").format(path=plan.run, reason=err.strerror or err)) from None
        forget_run(plan.link_target)
        return Deleted(plan.run, kept=plan.link_target, leftovers=sweep_deleting(plan.run.parent))
    path = plan.run
    _check_deletable(path)
    lock = _take_job_lock(path)
    marker = None
    try:
        try:
            marker = claim(path, DELETE_KIND, run=str(path))
            hidden = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".deleting", dir=path.parent))
        except BlockingIOError:
            raise RunDeleteError(_("{run} is being deleted by another ftui; nothing deleted").format(run=path.name)) from None
        except OSError as err:
            raise RunDeleteError(_("cannot delete {path}: {reason}").format(path=path, reason=err.strerror or err)) from None
        try:
            os.rename(path, hidden)  # onto the empty directory mkdtemp made: rename(2) replaces it
        except OSError as err:
            for undo in (lambda: os.rmdir(hidden), lambda: os.unlink(path / MARKER)):
                try:
                    undo()
                except OSError:
                    pass
            raise RunDeleteError(_("cannot delete {path}: {reason}").format(path=path, reason=err.strerror or err)) from None
        forget_run(path)
        failed = remove(hidden, marker)
        marker = None
        if failed:
            raise RunDeleteError(_("{run} is no longer listed, but {count} file(s) could not be removed "
                                   "(first: {first}); remove {path} yourself").format(
                run=path.name, count=len(failed), first=failed[0], path=hidden))
    finally:
        release(marker)
        if lock is not None:
            os.close(lock)
    return Deleted(path, leftovers=sweep_deleting(path.parent))


def sweep_deleting(root: Path) -> str | None:
    """Finishes the deletes that were killed midway in ``root`` (``.RUN.*.deleting`` directories
    marked by a delete whose process is gone); one line saying so, or None."""
    from ftui.safety.owned_dirs import sweep, sweep_line

    removed, failed = sweep(root, DELETING_NAME, (DELETE_KIND,))
    return sweep_line(removed, failed, "delete")


def live_job_dirs(run_dir: Path) -> list[Path]:
    """The run's jobs (every kind ftui.rundir.job_kinds lists) that are running (each holds its own
    lock in RUN/KIND/ID): deleting the run would pull the weights and files from under them."""
    return [job for job in job_dirs(run_dir) if job_lock_held(job)]


def _take_job_lock(run_dir: Path) -> int | None:
    """The run's job lock, exclusively (RunDeleteError if a job holds it); None for a run
    without a lock file (one from before ftui kept one: its summary said it is not live)."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise RunDeleteError(_("cannot lock {run}'s {lock}: {reason}; nothing deleted").format(
            run=run_dir.name, lock=LOCK_FILE, reason=err.strerror or err)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise RunDeleteError(_("{run} has a job running (it holds {lock}): stop it first; nothing deleted").format(
            run=run_dir.name, lock=LOCK_FILE)) from None
    return fd
