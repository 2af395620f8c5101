"""How a rank notices and reports trouble: stop requests, heartbeats, a dead launcher,
NaN losses, full disks, and the hint a failed run ends with.

Shared by every job (train now; evaluate, predict and export run the same way), so that a
job that fails says why in its run_end, and a Stop or a hang is handled the same everywhere.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import torch

from ftui.rundir.event_writer import DISK_FULL_ERRNOS, DISK_FULL_TEXT
from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.rundir.paths import CONFIG_FILE, HEARTBEAT_DIR
from ftui.rundir.rank_env import same_stop
from ftui.presets.engine_presets import NEEDS_SEVERAL, more_memory_saving
from ftui.data.records import DataFormatError
from ftui.runner.hub import HubProblem
from ftui.runner.rewards import RewardError
from ftui.rundir.checkpoints import CheckpointError, CheckpointMismatch


class NonFiniteLoss(RuntimeError):
    """The loss was NaN or inf for too many steps in a row, the first of them ``first_step``."""

    def __init__(self, message: str, first_step: int | None = None):
        super().__init__(message)
        self.first_step = first_step


def developer_note(text: str) -> None:
    """A line of the run's log for developers and the tests (some parse it): English whatever
    the interface's language, like the tracebacks beside it. Lines users act on are translated."""
    print(text, file=sys.stderr, flush=True)


class StopRequest:
    """Set by SIGTERM; a second signal ends the process at once, except under Slurm within
    SIGNAL_REPEAT_S of the first (ftui.rundir.rank_env.same_stop: slurmstepd and the launcher
    both deliver the one Stop), which is the same Stop and is ignored."""

    def __init__(self) -> None:
        self.requested = False
        self.at: float | None = None
        self._first: float | None = None  # time.monotonic() of the first signal

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        now = time.monotonic()
        if same_stop(self._first, now):
            return
        if self.requested:
            os._exit(128 + signum)
        self.requested = True
        self.at, self._first = time.time(), now
        try:
            print("[ftui] " + _("signal {signum}: finishing the current step, then stopping").format(signum=signum),
                  file=sys.stderr, flush=True)
        except OSError:
            pass  # train.log on a full disk: the stop goes on all the same


class Heartbeat:
    """A file per rank touched as the rank makes progress (every step, eval batch and
    checkpoint), so the supervisor can tell a hung rank (SIGSTOP, a stuck collective, a
    dead filesystem) and name it. Armed at the first step: loading a model may take long."""

    def __init__(self, run_dir: Path, rank: int):
        self.path = run_dir / HEARTBEAT_DIR / f"rank-{rank}"

    def beat(self) -> None:
        try:
            os.utime(self.path)  # one syscall per step once the file exists
        except FileNotFoundError:
            try:
                self.path.parent.mkdir(exist_ok=True)
                self.path.touch()
            except OSError:
                pass
        except OSError:
            pass  # a full disk is reported where it matters (events, checkpoints)


def die_with_parent() -> None:
    """Ask Linux to kill this rank when its launcher (ftui.jobs.spawn, or torchrun on several
    nodes) dies, even by kill -9, so a dead launcher never leaves ranks holding GPUs. No-op
    elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the launcher died before prctl took effect
            os._exit(1)
    except OSError:
        pass


def disk_full(exc: BaseException) -> bool:
    """A write failed for lack of room, also when wrapped (DCP re-raises the ranks' errors
    as a CheckpointException whose text carries the original)."""
    for link in exception_chain(exc):
        if isinstance(link, OSError) and link.errno in DISK_FULL_ERRNOS:
            return True
        if any(t in str(link) for t in DISK_FULL_TEXT):
            return True
    return False


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and its causes (or contexts), each once: ``raise err from err`` or a cycle
    of contexts makes the chain loop, and a walk that follows it would spin forever."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def hint_for(exc: BaseException, cfg: RunConfig, job: str = "train", run_dir: Path | None = None) -> str:
    """What to do about ``exc``, in the options of the command that started ``job``: an eval or
    predict job is not given training's batch or engine settings, but --batch-size, --cutoff-len.
    ``run_dir``: the run, whose checkpoints a NaN loss can resume from."""
    if job in ("eval", "predict") and isinstance(exc, (torch.OutOfMemoryError, DataFormatError)):
        return _job_hint(exc, cfg, job)
    if isinstance(exc, torch.OutOfMemoryError):
        bs, accum = cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps
        options = []
        if bs > 1:
            options.append(_("per_device_train_batch_size={bs} with gradient_accumulation_steps={accum} (same effective batch)")
                           .format(bs=bs // 2, accum=accum * 2))
        if not cfg.gradient_checkpointing:
            options.append("gradient_checkpointing: true")
        nxt = None if cfg.deepspeed else more_memory_saving(cfg.engine, cfg.pure_bf16)
        if nxt:
            needs_two = nxt in NEEDS_SEVERAL and cfg.world_size == 1
            options.append((_("engine {engine} (needs nproc_per_node >= 2)") if needs_two else _("engine {engine}")).format(engine=nxt))
        if cfg.finetuning_type == "full":
            options.append("finetuning_type lora")
        return _("out of GPU memory with engine {engine}, micro batch {bs}, cutoff_len {cutoff_len}: try {options}").format(
            engine=cfg.engine_name, bs=bs, cutoff_len=cfg.cutoff_len, options=_("; or ").join(options))
    if isinstance(exc, NonFiniteLoss):
        fixes = [_("lower learning_rate (e.g. by 10x)")]
        if cfg.fp16:
            fixes.append(_("use bf16 instead of fp16 (no overflow)"))
        if cfg.max_grad_norm == 0:
            fixes.append(_("turn clipping on (max_grad_norm: 1.0)"))
        before = _checkpoint_before(run_dir, exc.first_step)
        if before is not None:
            fixes.append(_("then resume from checkpoint {step}, saved before the NaNs (ftui train --resume {run} --checkpoint {step} "
                           "--set learning_rate=...)").format(step=before, run=run_dir.name))
        else:
            fixes.append(_("then start the run again (no checkpoint was saved before the NaNs)"))
        return _("; ").join(fixes)
    if isinstance(exc, CheckpointMismatch):
        return _("set those keys back to what the checkpoint was saved with: ftui train --resume {run} --set KEY=VALUE "
                 "(every checkpoint of the run was saved with them)").format(run=run_dir.name if run_dir else "RUN")
    if isinstance(exc, CheckpointError):
        return _("pick another checkpoint with --checkpoint N (ftui runs shows the run; its checkpoints/ holds step-N directories)")
    if isinstance(exc, DataFormatError):
        return _("fix the dataset (or its dataset_info.json entry) and start again")
    if isinstance(exc, HubProblem):
        return exc.hint
    if isinstance(exc, RewardError):  # its message names the reward function and the record
        return _("fix the reward function (reward_funcs) or the dataset it reads, then start the run again")
    if disk_full(exc):
        return disk_full_hint(cfg, job, run_dir)
    # The hub could not be reached (no network, a firewall, a wrong HF_ENDPOINT): transformers
    # wraps huggingface_hub's error, which wraps httpx's; say what to do instead of its text.
    unreachable = ("LocalEntryNotFoundError", "ConnectError", "ConnectTimeout", "ConnectionError", "OfflineModeIsEnabled")
    if any(type(link).__name__ in unreachable or "couldn't connect to" in str(link) for link in exception_chain(exc)):
        from ftui.plan.model_files import download_warning, hub_endpoint, shown_endpoint

        advice = download_warning(cfg.model_name_or_path, cfg.model_init == "random")
        return advice or _("the hub ({endpoint}) could not be reached for a dataset or a file the model needs: "
                           "with no network use local files, set HF_ENDPOINT to a mirror, or HF_HUB_OFFLINE=1 for what is "
                           "cached").format(endpoint=shown_endpoint(hub_endpoint()))
    if isinstance(exc, OSError) and ("model" in str(exc).lower() or "config" in str(exc).lower()):
        if job != "train":  # the job reads a run's final/ or checkpoint (or --model), not the config's model
            return _("check the weights this job reads (its job.json's source: the run's final/, a checkpoint, or "
                     "--model): a folder with config.json and weights that this user can read")
        return _("check model_name_or_path: a local directory with config.json, or a hub name this machine can reach")
    return _("the traceback is at the end of train.log")


def _checkpoint_before(run_dir: Path | None, step: int | None) -> int | None:
    """The newest complete checkpoint's step below ``step`` (the first NaN), or None."""
    if run_dir is None or step is None:
        return None
    from ftui.rundir.checkpoints import checkpoints

    try:
        steps = [s for s, _path in checkpoints(run_dir) if s < step]
    except OSError:
        return None
    return steps[-1] if steps else None


def _job_hint(exc: BaseException, cfg: RunConfig, job: str) -> str:
    if isinstance(exc, DataFormatError):
        return _("fix the dataset (or its dataset_info.json entry), or give another with --dataset; --cutoff-len N "
                 "replaces the run's cutoff_len ({cutoff_len})").format(cutoff_len=cfg.cutoff_len)
    if job == "predict":
        return _("out of GPU memory while generating: lower --batch-size, --max-new-tokens or --cutoff-len "
                 "(now {cutoff_len})").format(cutoff_len=cfg.cutoff_len)
    return _("out of GPU memory while scoring: lower --batch-size (now {bs}) or --cutoff-len (now {cutoff_len})").format(
        bs=cfg.per_device_eval_batch_size, cutoff_len=cfg.cutoff_len)


def disk_full_hint(cfg: RunConfig, job: str, run_dir: Path | None, events_cut: bool = False) -> str:
    """What to do on a full disk. Resuming is offered only where a checkpoint is there to resume
    from: a run that had saved none yet (save_strategy no, or fewer steps than save_steps) starts
    again, and an eval, predict or export job runs again. ``events_cut``: the events themselves
    could not be written (the run's end took the room kept for it)."""
    if job != "train":
        hint = _("the disk is full (or a quota or file-size limit was hit) where the job's directory is: free space, "
                 "then run the job again")
    elif run_dir is not None and _checkpoint_before(run_dir, sys.maxsize) is not None:  # any complete checkpoint
        if events_cut:
            return _("the disk is full (or a quota or file-size limit was hit) where the run directory is: free space, then "
                     "ftui train --resume RUN continues from the newest checkpoint; train.log may be cut short for the same reason")
        return _("the disk is full (or a quota or file-size limit was hit) while writing: free space where the run "
                 "directory is, or lower save_total_limit; checkpoints written before are intact, so resume with "
                 "ftui train --resume RUN once there is room")
    else:
        hint = _("the disk is full (or a quota or file-size limit was hit) where the run directory is, and the run had "
                 "saved no checkpoint to resume from (save_strategy {strategy}, save_steps {save_steps}): free space, then "
                 "start it again with ftui train {config}").format(
                     strategy=cfg.save_strategy, save_steps=cfg.save_steps,
                     config=(run_dir / CONFIG_FILE) if run_dir is not None else "CONFIG.yaml")
    return _("; ").join([hint, _("train.log may be cut short for the same reason")]) if events_cut else hint
