"""Listing runs: every run under a runs root (and, for the default root, those the run index
names elsewhere), each summarised, and how a run reads as a row of ``ftui runs`` and the runs
screen. No torch here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ftui.i18n import N_, _
from ftui.rundir.job_kinds import SERVING, job_kind
from ftui.rundir.follower import summarize_run
from ftui.rundir.formats import fmt_duration
from ftui.rundir.index import indexed_run_dirs, indexed_run_exists, is_default_root
from ftui.rundir.paths import CONFIG_FILE
from ftui.rundir.summary import RunSummary, reason_text


LIST_COLUMNS = ("run", "status", "model", "method", "engine", "step", "loss", "started", "duration")
# the columns' headings, translated where shown (the keys above are list_row's, for code)
LIST_HEADINGS = {"run": N_("run"), "status": N_("status"), "model": N_("model"), "method": N_("method"), "engine": N_("engine"),
                 "step": N_("step"), "loss": N_("loss"), "started": N_("started"), "duration": N_("duration")}


def list_row(r: RunSummary) -> dict[str, str]:
    """A run as ``ftui runs`` and the runs screen show it: every LIST_COLUMNS cell as text (a
    job directory's method cell is what its kind says: ``JobKind.method_cell``)."""
    return {
        "run": r.run_id, "status": r.status,
        "model": reason_text(r.reason) if r.status == "unreadable" else str(r.model or "-"),
        "method": job_kind(r.job).method_cell(r), "engine": r.engine or "-",
        "step": f"{r.step}/{r.max_steps or '?'}" if job_kind(r.job).counts != SERVING else "-",  # a server counts no steps
        "loss": f"{r.last_loss:.4f}" if r.last_loss is not None else "-",
        "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(r.first_start)) if r.first_start else "-",
        "duration": fmt_duration(r.duration),
    }


class RunsRootError(OSError):
    """The runs root exists but cannot be listed (permissions): the message says so."""


def run_dirs(root_path: Path) -> list[Path]:
    try:
        with os.scandir(root_path) as it:
            entries = list(it)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as err:
        raise RunsRootError(_("cannot list the runs root {path}: {reason}").format(path=root_path, reason=err.strerror or err)) from None
    out = []
    for entry in entries:
        if entry.name.startswith("."):  # never a run's name (slug): a run being deleted (delete_run)
            continue
        try:
            if entry.is_dir():
                out.append(Path(entry.path))
        except OSError:
            continue
    return out


def _unreadable(path: Path, reason: str) -> RunSummary:
    summary = RunSummary(run_id=path.name, path=path)
    summary.mark_unreadable(reason)
    return summary


def _summarize_listed(d: Path) -> RunSummary | None:
    """One entry of the runs list: None when ``d`` is not a run directory; a run that cannot
    be read is listed as ``unreadable`` with the reason, so it never hides the others."""
    try:
        os.stat(d / CONFIG_FILE)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        return _unreadable(d, _("{reason} (another user's run?)").format(reason=err.strerror or err))
    try:
        return summarize_run(d)
    except Exception as err:  # a run directory shaped in a way no reader foresaw: list it, keep going
        return _unreadable(d, f"{type(err).__name__}: {err}")


def _summarize_indexed(d: Path) -> RunSummary | None:
    """An index entry as a runs-list entry; None when its directory is gone, no longer a run
    or cannot be read (moved, deleted, another disk not mounted): the index is only a hint."""
    return _summarize_listed(d) if indexed_run_exists(d) else None


def extra_run_dirs(root_path: Path, listed: list[Path]) -> list[Path]:
    """The indexed runs to list beside the root's own: only for the default root, and not
    those already under it."""
    if not is_default_root(root_path):
        return []
    seen = {os.path.realpath(d) for d in listed}
    return [d for d in indexed_run_dirs() if os.path.realpath(d) not in seen]


def list_runs(root: str | os.PathLike[str]) -> list[RunSummary]:
    """Every run directory under the root, newest first (RunsRootError if it cannot be listed);
    for the default root, also every run the index names elsewhere (a config's output_dir)."""
    root_path = Path(root).expanduser()
    dirs = run_dirs(root_path)
    runs = [r for d in dirs if (r := _summarize_listed(d)) is not None]
    runs += [r for d in extra_run_dirs(root_path, dirs) if (r := _summarize_indexed(d)) is not None]
    runs.sort(key=lambda r: (r.first_start or 0.0, r.run_id), reverse=True)
    return runs
