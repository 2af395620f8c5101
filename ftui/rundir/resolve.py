"""A run named on the command line (a path, a run id, a unique prefix, RUN_ID/predict/ID) as
its directory. No torch here.
"""

from __future__ import annotations

import os
from pathlib import Path

from ftui.i18n import _
from ftui.rundir.index import indexed_run_exists
from ftui.rundir.listing import RunsRootError, extra_run_dirs, run_dirs
from ftui.rundir.run_files import is_run_dir


def resolve_run(ref: str, root: str | os.PathLike[str]) -> Path:
    """A run given as a path or as a run id under the root (a unique prefix is enough); under
    the default root, the runs the index names elsewhere count too.

    A bare name is a run id first: a directory of the same name in the current directory is
    taken only when no run under the root has that name (``./NAME`` names it directly), so
    ``ftui delete NAME`` never deletes a look-alike directory here instead of the run."""
    if not ref.strip():
        raise LookupError(_("an empty run name: give a run id (ftui runs lists them) or a run directory"))
    direct = Path(ref).expanduser()
    root_path = Path(root).expanduser()
    if "/" in ref or ref in (".", ".."):
        if is_run_dir(direct):
            return direct
        within = _job_of_run(ref, root_path) if not direct.is_absolute() else None
        if within is not None:
            return within
        if not os.path.exists(direct):
            raise LookupError(_("{ref}: no such directory (a path under a run may start with the run's id, "
                                "RUN_ID/predict/ID; ftui runs lists the ids)").format(ref=repr(ref)))
        raise LookupError(_("{ref} is not a run directory (it has no config.yaml)").format(ref=repr(ref)))
    if is_run_dir(direct):
        try:
            return _run_under_root(ref, root_path)
        except LookupError:
            return direct  # no run of that name under the root: the directory here
    return _run_under_root(ref, root_path)


def _job_of_run(ref: str, root_path: Path) -> Path | None:
    """``RUN_ID/predict/ID`` (the README's spelling, and what ``ftui predict`` prints) where
    RUN_ID is a run under the root rather than a directory here: the job directory it names,
    or None."""
    head, _sep, rest = ref.partition("/")
    if not head or head in (".", "..") or not rest.strip("/"):
        return None
    try:
        run = _run_under_root(head, root_path)
    except LookupError:
        return None
    return run / rest if is_run_dir(run / rest) else None


def _run_under_root(ref: str, root_path: Path) -> Path:
    """The run ``ref`` names under the root (exactly, else by a unique prefix), or LookupError."""
    exact = root_path / ref
    if is_run_dir(exact):
        return exact
    try:
        dirs = run_dirs(root_path)
    except RunsRootError as err:
        raise LookupError(str(err)) from None
    indexed = [d for d in extra_run_dirs(root_path, dirs) if d.name.startswith(ref) and indexed_run_exists(d)]
    exact_indexed = [d for d in indexed if d.name == ref]
    if len(exact_indexed) == 1:
        return exact_indexed[0]
    matches = sorted(d for d in dirs if d.name.startswith(ref) and is_run_dir(d)) + indexed
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        names = ", ".join(m.name for m in sorted(matches, key=lambda m: m.name, reverse=True)[:5])  # the newest first
        raise LookupError(_("{ref} matches {count} runs under {root}: {names}; give more of the name").format(
            ref=repr(ref), count=len(matches), root=root_path, names=names))
    raise LookupError(_("no run {ref} under {root} (ftui runs lists them)").format(ref=repr(ref), root=root_path))
