"""Finding the run an operation acts on, and the refusals every operation on a stopped run
shares (it must not be live)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftui.i18n import _
from ftui.ops.errors import RunIsLive, RunNotFound
from ftui.rundir.paths import default_runs_root


def find_run(ref: str, root: str | None = None) -> Path:
    """A run given as a path or as a run id (a unique prefix) under ``root`` (default: the
    default runs root); RunNotFound says why none matched."""
    from ftui.rundir.resolve import resolve_run

    try:
        return resolve_run(ref, root or default_runs_root())
    except LookupError as e:
        raise RunNotFound(str(e)) from None


def refuse_live(run_dir: Path, summary: Any, then: str = "") -> None:
    """RunIsLive when a job runs in the run: it must be stopped first (``then``: what the
    refusal adds, e.g. that nothing was deleted)."""
    if summary.live and getattr(summary, "slurm_job", None):
        raise RunIsLive(_("{run} is {status} (Slurm job {job}): stop it first (ftui stop {run}, or Stop in ftui attach {run})").format(
            run=run_dir.name, status=summary.status, job=summary.slurm_job) + then)
    if summary.live:
        raise RunIsLive(_("{run} is {status}: stop it first (ftui attach {run}, then s)").format(
            run=run_dir.name, status=summary.status) + then)
