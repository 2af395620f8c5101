"""A run's checkpoints (checkpoints/step-N/): which are complete and sound, which one a resume
or a job takes, and what ``resume_from_checkpoint`` names. Read by the app and the runner
alike (torch-free: the runner loads what these name). No torch here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ftui.i18n import _
from ftui.rundir.paths import CHECKPOINTS_DIR, TRAINER_STATE
from ftui.rundir.run_files import UnreadableFile, is_run_dir, read_at
from ftui.safety.bounded_input import load_json


def checkpoints(run_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run as (step, path), oldest first."""
    ck = Path(run_dir) / CHECKPOINTS_DIR
    out = []
    if ck.is_dir():
        for d in ck.iterdir():
            m = re.fullmatch(r"step-(\d+)", d.name)
            if m and d.is_dir():
                out.append((int(m.group(1)), d))
    return sorted(out)


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from; the message says which and why."""


class CheckpointMismatch(CheckpointError):
    """A sound checkpoint saved with settings the config no longer has (engine, batch,
    accumulation, DeepSpeed's ranks): every checkpoint of the run refuses it alike, so the fix
    is the settings, not another checkpoint (ftui.rundir.resume_checks.checkpoint_mismatch)."""


def read_trainer_state(checkpoint: Path) -> Any:
    """A checkpoint's trainer_state.json, parsed; read as every run file is (a run directory is
    untrusted): a regular file only, so a FIFO cannot hang ``--resume``, at most 16 MiB, and
    nesting deeper than the stack refused. OSError, UnreadableFile or ValueError when it
    cannot be read."""
    raw = read_at(checkpoint / TRAINER_STATE, 0, 16 << 20)
    if raw is None:
        raise FileNotFoundError("missing")
    return load_json(raw)


def checkpoint_damage(path: Path) -> str | None:
    """Why a complete checkpoint cannot be trusted (a file missing or of another size than
    when it was written), or None. Checkpoints from before the size list are trusted."""
    try:
        state = read_trainer_state(path)
    except (OSError, ValueError, UnreadableFile) as err:
        return _("its {file} is unreadable ({reason})").format(file=TRAINER_STATE, reason=err)
    if not isinstance(state, dict):
        return _("its {file} is not a JSON object").format(file=TRAINER_STATE)
    files = state.get("files")
    if not isinstance(files, (dict, type(None))):
        return _("its {file} has no list of file sizes").format(file=TRAINER_STATE)
    for rel, size in (files or {}).items():
        f = path / rel
        try:
            actual = f.stat().st_size
        except OSError:
            return _("{file} is missing").format(file=rel)
        if actual != size:
            return _("{file} is {actual} bytes, but {size} were written").format(file=rel, actual=actual, size=size)
    return None


def resolve_checkpoint(run_dir: Path, which: str | None, skipped: list[str] | None = None) -> Path:
    """``which``: None (the newest sound checkpoint), a step number, or a directory.

    A damaged newest checkpoint is passed over for the one before it; each one passed over
    is described in ``skipped`` (for the caller to say so). A damaged checkpoint asked for by
    step raises, naming the newest sound one."""
    found = checkpoints(run_dir)
    if which is None or which == "latest":
        if not found:
            raise CheckpointError(_("{run} has no complete checkpoint to resume from").format(run=run_dir.name))
        for step, path in reversed(found):
            damage = checkpoint_damage(path)
            if damage is None:
                return path
            if skipped is not None:
                skipped.append(_("checkpoint step-{step} is damaged: {damage}").format(step=step, damage=damage))
        raise CheckpointError(_("every checkpoint of {run} is damaged (newest: {damage}); start the run again").format(
            run=run_dir.name, damage=checkpoint_damage(found[-1][1])))
    if which.isdigit():
        for step, path in found:
            if step == int(which):
                damage = checkpoint_damage(path)
                if damage is not None:
                    sound = [s for s, p in found if checkpoint_damage(p) is None]
                    alt = _("; the newest sound one is step {step} (--checkpoint {step})").format(step=sound[-1]) if sound else ""
                    raise CheckpointError(_("checkpoint step-{step} is damaged: {damage}").format(step=step, damage=damage) + alt)
                return path
        steps = ", ".join(str(s) for s, _path in found) or _("none")
        raise CheckpointError(_("{run} has no checkpoint at step {step} (complete checkpoints: {steps})").format(
            run=run_dir.name, step=which, steps=steps))
    path = Path(which).expanduser()
    if not (path / TRAINER_STATE).is_file():
        raise CheckpointError(_("{path} is not a complete ftui checkpoint (no {file})").format(path=path, file=TRAINER_STATE))
    return path.resolve()


def resume_target(path_text: str) -> tuple[Path, Path | None]:
    """``resume_from_checkpoint`` (LLaMA-Factory's key) as ftui's resume: (the run directory,
    the checkpoint, or None for its newest sound one). It names a run directory or one of its
    ``checkpoints/step-N``; anything else (a transformers / LLaMA-Factory ``checkpoint-N``)
    raises CheckpointError saying so."""
    path = Path(path_text).expanduser()
    if not path.exists():
        raise CheckpointError(_("{path} does not exist; give an ftui run directory or its checkpoints/step-N").format(path=path))
    if is_run_dir(path):
        return path.resolve(), None
    if path.parent.name == CHECKPOINTS_DIR and is_run_dir(path.parent.parent):
        if not (path / TRAINER_STATE).is_file():
            raise CheckpointError(_("{path} is not a complete ftui checkpoint (no {file}); give the run directory to take its newest one").format(
                path=path, file=TRAINER_STATE))
        return path.parent.parent.resolve(), path.resolve()
    raise CheckpointError(_("{path} is not an ftui run or checkpoint (a transformers / LLaMA-Factory checkpoint-N cannot be resumed "
                            "by ftui: its optimizer and data order are not ftui's); give an ftui run directory or RUN/checkpoints/step-N").format(
        path=path))


def resume_target_problem(path_text: str) -> str | None:
    try:
        resume_target(path_text)
    except CheckpointError as err:
        return str(err)
    return None
