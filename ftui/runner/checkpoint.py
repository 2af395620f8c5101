"""Resumable checkpoints: ``checkpoints/step-N/``, complete or absent.

A checkpoint is written into ``checkpoints/.step-N.tmp/`` by every rank (the engine's state:
model or adapter and optimizer, sharded as the engine holds it; each rank's RNG states),
then rank 0 adds ``trainer_state.json`` (step, data position, scheduler, loss scaler, token
count) and renames the directory to ``step-N``. A crash or kill at any point before the
rename leaves only a ``.tmp`` directory, which listings ignore and the next save removes:
the previous checkpoint is never touched. Older checkpoints beyond ``save_total_limit`` are
deleted after the new one is complete.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ftui.i18n import _
from ftui.rundir.paths import CHECKPOINTS_DIR, TRAINER_STATE, rng_file
from ftui.rundir.resume_checks import checkpoint_mismatch
from ftui.rundir.checkpoints import CheckpointError, CheckpointMismatch, checkpoints

FORMAT = 1


def _barrier(world_size: int) -> None:
    if world_size > 1:
        dist.barrier()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def storage_error(exc: BaseException, where: Path) -> BaseException:
    """A failed write as the OSError it really was when the disk is (nearly) full or a
    file-size limit is set: torch's zip writer reports a short write only as "unexpected
    pos", and DCP wraps it again, so the cause is looked for on the filesystem instead."""
    import errno
    import resource

    try:
        free = shutil.disk_usage(where.parent).free
    except OSError:
        free = None
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if (free is not None and free < 256 * 2**20) or limit != resource.RLIM_INFINITY:
        room = f"{free / 2**20:.0f} MiB free" if free is not None else "free space unknown"
        cap = "" if limit == resource.RLIM_INFINITY else f", file-size limit {limit / 2**20:.0f} MiB"
        return OSError(errno.ENOSPC, f"No space left on device while writing a checkpoint into {where} ({room}{cap}): {str(exc).splitlines()[0][:200]}")
    return exc


def save_checkpoint(engine: Any, run_dir: Path, step: int, trainer_state: dict[str, Any],
                    save_total_limit: int | None = None) -> Path:
    """Writes checkpoints/step-N/ (collective: every rank calls it); returns its path."""
    info = engine.info
    root = run_dir / CHECKPOINTS_DIR
    final = root / f"step-{step}"
    tmp = root / f".step-{step}.tmp"
    if info.is_main:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    _barrier(info.world_size)
    try:
        engine.save_state(tmp)
        torch.save(rng_state(), tmp / rng_file(info.rank))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # DCP's CheckpointException is a BaseException
        err = storage_error(exc, tmp)
        if err is exc:
            raise  # as it was: `raise exc from exc` would make it its own cause
        raise err from exc
    _barrier(info.world_size)
    if info.is_main:
        # Sizes of every file, so a later resume can tell a damaged checkpoint (a truncated
        # copy, a disk error) from a sound one without reading gigabytes of hashes.
        files = {str(f.relative_to(tmp)): f.stat().st_size for f in sorted(tmp.rglob("*")) if f.is_file()}
        state = dict(trainer_state, format=FORMAT, step=step, world_size=info.world_size, engine=engine.name, files=files)
        with open(tmp / TRAINER_STATE, "w", encoding="utf-8") as fh:
            json.dump(state, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(tmp)
        if final.exists():  # re-saving a step (after a resume): swap, never leave neither
            old = root / f".step-{step}.old"
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)
        _fsync_dir(root)
        for stale in root.glob(".step-*.tmp"):
            shutil.rmtree(stale, ignore_errors=True)
        if save_total_limit:
            for _step, old_ckpt in checkpoints(run_dir)[:-save_total_limit]:
                shutil.rmtree(old_ckpt, ignore_errors=True)
    _barrier(info.world_size)
    return final


def read_trainer_state(ckpt: Path) -> dict[str, Any]:
    try:
        with open(ckpt / TRAINER_STATE, encoding="utf-8") as fh:
            state = json.load(fh)
    except FileNotFoundError:
        raise CheckpointError(_("{path} has no {file}: it is not a complete ftui checkpoint").format(path=ckpt, file=TRAINER_STATE)) from None
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(_("{path} cannot be read ({error}); resume from an earlier checkpoint").format(
            path=f"{ckpt}/{TRAINER_STATE}", error=err)) from None
    if state.get("format") != FORMAT:
        raise CheckpointError(_("{path} was written by another checkpoint format ({format})").format(path=ckpt, format=state.get("format")))
    return state


def load_checkpoint(engine: Any, ckpt: Path) -> dict[str, Any]:
    """Restores engine state and this rank's RNG from ``ckpt``; returns its trainer state."""
    state = read_trainer_state(ckpt)
    mismatch = checkpoint_mismatch(ckpt.name, state, engine.cfg, engine.info.world_size)  # the CLI checked it before saving
    if mismatch:
        raise CheckpointMismatch(mismatch)
    engine.load_state(ckpt)
    rng = ckpt / rng_file(engine.info.rank)
    if rng.exists():
        set_rng_state(torch.load(rng, weights_only=True))
    return state
