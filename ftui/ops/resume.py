"""Resume: a stopped, failed or died run goes on from a checkpoint (``ftui train --resume``,
LLaMA-Factory's ``resume_from_checkpoint``, the app's resume key). One set of rules for all:
nothing is written to the run until every check passed, so a refused resume leaves its
config.yaml, events, Stop request and status as they were."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftui.i18n import _
from ftui.ops import errors
from ftui.ops.lookup import find_run, refuse_live
from ftui.ops.notices import Notice, note, warning
from ftui.safety.bounded_input import short_repr

if TYPE_CHECKING:
    from ftui.config.schema import RunConfig


def trust_remote_code_warning() -> str:
    """Said on every path that starts or resumes a run with trust_remote_code on."""
    return _("trust_remote_code is on: Python code from the model's repository will run in the training processes")


@dataclass
class ResumeRequest:
    """What to resume and how: ``run`` (an id, a prefix or a directory) under ``runs_root``,
    from ``checkpoint`` (a step number or a checkpoint directory; None: the newest complete
    one), with ``overrides`` applied to its config. ``allow_changed``: go on although the base
    model or the data differ from what the run started with. ``trust_warned``: the
    trust_remote_code warning was said already (a YAML's load said it)."""

    run: str
    runs_root: str | None = None
    checkpoint: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    allow_changed: bool = False
    trust_warned: bool = False


@dataclass
class PreparedResume:
    """An accepted resume, its lock held: what ``start`` continues."""

    run_dir: Path
    cfg: RunConfig
    checkpoint: Path
    lock: int
    notices: list[Notice] = field(default_factory=list)


def prepare_resume(request: ResumeRequest) -> PreparedResume:
    """The run directory, its config (with the overrides), the checkpoint to resume and the
    run directory's job lock (two resumes at once must not both start: the lock decides).
    Raises the refusal's own error (ftui.ops.errors), with the notices said before it."""
    from ftui.rundir.run_dir import RunBusy, RunDir
    from ftui.rundir.checkpoints import checkpoints
    from ftui.rundir.delete import live_job_dirs
    from ftui.rundir.follower import summarize_run
    from ftui.rundir.paths import FINAL_DIR
    from ftui.rundir.summary import reason_text

    run_dir = find_run(request.run, request.runs_root)
    summary = summarize_run(run_dir)
    refuse_live(run_dir, summary)
    if summary.status == "unreadable":
        raise errors.RunUnreadable(_("{run} is unreadable: {reason}").format(run=run_dir.name, reason=reason_text(summary.reason)))
    if summary.status == "completed" and not request.checkpoint:
        if not checkpoints(run_dir):  # save_strategy: no kept none: a raised max_steps would fail on it
            message = _("{run} has completed ({step} steps) and kept no checkpoint (save_strategy: no), so it cannot "
                        "be trained further; to fine-tune its result anew, start a run with model_name_or_path: {final}")
        elif not request.overrides:  # it would run no step and start the run's record again (its start, its duration)
            message = _("{run} has completed ({step} steps): there is nothing to resume. To train it further, raise "
                        "max_steps or num_train_epochs: ftui train --resume {run} --set max_steps=N; to fine-tune its "
                        "result anew, start a run with model_name_or_path: {final}")
        else:
            message = None
        if message is not None:
            raise errors.NothingToResume(message.format(run=run_dir.name, step=summary.step, final=run_dir / FINAL_DIR))
    try:
        lock = RunDir(run_dir).lock(clear_stop=False)
    except RunBusy as e:
        raise errors.RunLocked(str(e)) from None
    except OSError as e:
        raise errors.LockFailed(_("cannot lock {path}: {reason}").format(path=run_dir, reason=e.strerror or e)) from None
    try:
        busy = live_job_dirs(run_dir)  # a predict / eval / export job reads final/ or a checkpoint the resume replaces
        if busy:
            raise errors.WeightsInUse(_("{run} has a {job} job running ({path}) that reads its weights: stop it first (ftui attach {path}, "
                                        "then s), then resume; nothing changed").format(run=run_dir.name, job=busy[0].parent.name, path=busy[0]))
        notices: list[Notice] = []
        cfg, ckpt = _resume_config(request, run_dir, notices)
    except BaseException:
        os.close(lock)
        raise
    return PreparedResume(run_dir, cfg, ckpt, lock, notices)


def _resume_config(request: ResumeRequest, run_dir: Path, notices: list[Notice]) -> tuple[RunConfig, Path]:
    """With the run's lock held: its config with the overrides and the checkpoint, checked
    (resume_checks) before the config, the fingerprint or the Stop request are written."""
    from ftui.config.problems import ConfigError
    from ftui.config.load import load_config
    from ftui.data import fingerprint as data_fingerprint
    from ftui.rundir.run_dir import RunDir
    from ftui.rundir.checkpoints import CheckpointError, resolve_checkpoint
    from ftui.rundir.paths import CONFIG_FILE

    overrides = request.overrides
    try:
        saved, _warnings = load_config(run_dir / CONFIG_FILE)
    except ConfigError as e:
        raise errors.ConfigRefused(str(e), notices) from None
    try:
        cfg, _warnings = load_config(run_dir / CONFIG_FILE, overrides) if overrides else (saved, _warnings)
    except ConfigError as e:
        raise errors.ConfigRefused(str(e), notices) from None
    skipped: list[str] = []
    try:
        ckpt = resolve_checkpoint(run_dir, request.checkpoint, skipped)
    except CheckpointError as e:
        raise errors.CheckpointRefused(str(e), notices) from None
    for line in skipped:
        notices.append(warning(_("{problem}; resuming from {checkpoint} instead").format(problem=line, checkpoint=ckpt.name)))
    fingerprint = data_fingerprint.compute(cfg)
    _accept(request, run_dir, saved, cfg, ckpt, fingerprint, notices)
    run = RunDir(run_dir)
    try:
        if overrides:
            run.save_config(cfg)
        data_fingerprint.record(run_dir, fingerprint)  # what the resumed steps train on: the next resume compares with it
        run.clear_stop()
    except OSError as e:
        raise errors.WriteFailed(_("cannot write {path}: {reason}").format(path=e.filename or run_dir, reason=e.strerror or e),
                                 notices) from None
    return cfg, ckpt


def _accept(request: ResumeRequest, run_dir: Path, saved: RunConfig, cfg: RunConfig, ckpt: Path,
            fingerprint: dict[str, Any], notices: list[Notice]) -> None:
    """Notes what the resume changes and replaces; raises when it must not go on: the
    checkpoint cannot load with these settings, or the base model or the data differ and the
    user did not allow it (ChangesNeedConsent, naming the changes)."""
    from ftui.data import fingerprint as data_fingerprint
    from ftui.rundir.run_files import UnreadableFile
    from ftui.rundir.paths import FINAL_DIR, TRAINER_STATE
    from ftui.rundir.resume_checks import GUARDED_KEYS, checkpoint_mismatch, config_changes, fingerprint_changes, shown_path
    from ftui.rundir.checkpoints import checkpoints, read_trainer_state

    try:
        state = read_trainer_state(ckpt)
    except (OSError, ValueError, UnreadableFile) as e:
        raise errors.CheckpointUnreadable(_("{path} cannot be read ({error}); resume from an earlier checkpoint").format(
            path=ckpt / TRAINER_STATE, error=e), notices) from None
    mismatch = checkpoint_mismatch(ckpt.name, state if isinstance(state, dict) else {}, cfg)
    if mismatch:
        raise errors.CheckpointMismatch(mismatch + " " + _("(nothing in {run} was changed)").format(run=run_dir.name), notices)
    changes = config_changes(saved.to_dict(include_unsupported=False), cfg.to_dict(include_unsupported=False))
    guarded = [_("{key}: {old} -> {new}").format(key=k, old=shown_path(a), new=shown_path(b)) for k, a, b in changes if k in GUARDED_KEYS]
    for k, a, b in changes:
        if k not in GUARDED_KEYS:
            notices.append(note(_("this resume changes {key}: {old} -> {new}").format(key=k, old=short_repr(a), new=short_repr(b))))
    recorded = data_fingerprint.read(run_dir)
    if recorded is None:
        notices.append(note(_("{run} has no data fingerprint (it was started before ftui recorded one): its dataset files cannot "
                              "be compared with the ones it trained on (once resumed, it records them for later resumes)").format(run=run_dir.name)))
    else:
        guarded += fingerprint_changes(recorded, fingerprint)
    if guarded:
        lines = "; ".join(guarded)
        if not request.allow_changed:
            raise errors.ChangesNeedConsent(
                _("resuming {run} would continue its checkpoint with another base model or other data ({changes}); "
                  "nothing was changed. Start a new run for them, or add --allow-changed to resume anyway").format(
                    run=run_dir.name, changes=lines), guarded, notices)
        notices.append(warning(_("resuming {run} with changes you allowed: {changes}").format(run=run_dir.name, changes=lines)))
    from_step = state.get("step") if isinstance(state.get("step"), int) else -1
    replaced = [p.name for step, p in checkpoints(run_dir) if step > from_step]
    replaced += [FINAL_DIR + "/"] if (run_dir / FINAL_DIR).is_dir() else []
    if replaced:  # a completed run's final/ and the checkpoints after this one are written again
        notices.append(note(_("resuming {run} from {checkpoint} replaces what it has after that step: {what} (each when the "
                              "resumed steps reach it; final/ when the run completes)").format(
            run=run_dir.name, checkpoint=ckpt.name, what=", ".join(replaced))))
    if cfg.trust_remote_code and not request.trust_warned:  # the YAML's load said it already
        notices.append(warning(trust_remote_code_warning()))


def resume_target_request(cfg: RunConfig) -> tuple[Path, Path | None, dict[str, Any]]:
    """LLaMA-Factory's ``resume_from_checkpoint: PATH`` as a resume: the run it names, the
    checkpoint (None: the run's newest), and the keys this config sets differently from the
    run's config.yaml, to apply as overrides (the YAML's settings are the ones trained with,
    as in LLaMA-Factory)."""
    from ftui.config.problems import ConfigError
    from ftui.config.load import read_run_config
    from ftui.rundir.checkpoints import resume_target
    from ftui.rundir.paths import CONFIG_FILE

    run_dir, ckpt = resume_target(cfg.resume_from_checkpoint)  # validated already: it exists and is ftui's
    try:
        saved = read_run_config(run_dir / CONFIG_FILE).to_dict(include_unsupported=False)
    except ConfigError:
        saved = {}
    own = ("output_dir", "run_name", "resume_from_checkpoint")
    changed = {k: v for k, v in cfg.to_dict(include_unsupported=False).items() if k not in own and saved.get(k) != v}
    return run_dir, ckpt, changed
