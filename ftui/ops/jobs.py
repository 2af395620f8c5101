"""Starting a run's other jobs: predict and eval (ftui.jobs.offline), export
(ftui.jobs.export). Each is prepared in a directory of its own (RUN/predict/ID ...) and
started detached, as training is; the refusals are the operations' errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftui.i18n import _
from ftui.ops import errors

if TYPE_CHECKING:
    from ftui.config.schema import RunConfig
    from ftui.jobs.export import ExportNeeds


def source_problem(run_dir: Path | None, *, checkpoint: str | None = None, base: bool = False, model: str | None = None,
                   adapter: str | None = None) -> str | None:
    """A checkpoint that is not there, a run without weights, a model path that is not a model:
    said before a job starts or a chat loads the model (None: the source is there)."""
    from ftui.rundir.paths import FINAL_DIR

    if run_dir is None:
        from ftui.rundir.paths import resolve_model_path

        if not (Path(resolve_model_path(model)).expanduser() / "config.json").is_file():
            return _("{path} is not a model directory (no config.json); give a directory written by save_pretrained").format(path=model)
        if adapter and not (Path(adapter).expanduser() / "adapter_config.json").is_file():
            return _("{path} is not a LoRA adapter directory (no adapter_config.json)").format(path=adapter)
        return None
    if checkpoint:
        from ftui.rundir.checkpoints import CheckpointError, resolve_checkpoint

        try:
            resolve_checkpoint(run_dir, str(checkpoint).removeprefix("step-"))
        except CheckpointError as e:
            return str(e)
    elif not base and not (run_dir / FINAL_DIR).is_dir():
        from ftui.rundir.checkpoints import checkpoints

        if not checkpoints(run_dir):
            return _("{run} has no final/ and no checkpoint yet; use --base for the model it started from").format(run=run_dir.name)
    return None


@dataclass
class JobStarted:
    """A started predict / eval / export job: its directory and what launch.json records."""

    kind: str
    job_dir: Path
    info: dict[str, Any]


def start_offline_job(kind: str, *, run_dir: Path | None, checkpoint: str | None = None, base: bool = False,
                      model: str | None = None, adapter: str | None = None, model_config: RunConfig | None = None,
                      dataset: str, root: Path | None = None, dataset_dir: str | None = None, max_samples: int | None = None,
                      generation: dict[str, Any] | None = None, nproc: int = 1, device: str = "auto",
                      cutoff_len: int | None = None, eval_batch_size: int | None = None) -> JobStarted:
    """A predict or eval job of a run (``run_dir``: its final/, a checkpoint or its base) or
    of a model outside any run (``model`` with ``model_config``, the job under ``root``):
    checked, prepared, started."""
    from ftui.config.problems import ConfigError
    from ftui.jobs import offline
    from ftui.rundir.run_dir import RunBusy

    problem = source_problem(run_dir, checkpoint=checkpoint, base=base, model=model, adapter=adapter)
    if problem:
        raise errors.SourceRefused(problem)
    source = offline.source_of(run_dir, checkpoint, base, model, adapter)
    try:
        job_dir, cfg = offline.prepare_job(kind, run_dir=run_dir, source=source, dataset=dataset, dataset_dir=dataset_dir,
                                           max_samples=max_samples, generation=generation or {}, nproc=nproc, device=device,
                                           model_config=model_config, root=root, cutoff_len=cutoff_len,
                                           eval_batch_size=eval_batch_size)
    except (offline.JobError, ConfigError) as e:
        raise errors.JobRefused(str(e)) from None
    except OSError as e:
        raise errors.JobNotPrepared(str(e)) from None
    try:
        info = offline.start_job(kind, job_dir, cfg)  # looked up at the call: a test may stand a fake in
    except RunBusy as e:
        raise errors.RunLocked(str(e)) from None
    except OSError as e:
        raise errors.StartFailed(_("cannot start the job in {path}: {reason}").format(path=job_dir, reason=e)) from e
    return JobStarted(kind, job_dir, info)


@dataclass
class PreparedExport:
    """An export job's directory, checked and written, before it starts: ``needs`` says the
    memory and disk it takes (said before the start)."""

    job_dir: Path
    cfg: RunConfig
    needs: ExportNeeds
    out: Path


def prepare_export(run_dir: Path, *, which: str | None, out: Path, dtype: str, max_shard_size: str, gguf: str | None,
                   force: bool, runs_root: Path) -> PreparedExport:
    """Everything that can be checked before an export job (ftui.jobs.export.prepare_export)."""
    from ftui.config.problems import ConfigError
    from ftui.jobs import export

    try:
        job_dir, cfg, needs = export.prepare_export(run_dir, which=which, out=out, dtype=dtype, max_shard_size=max_shard_size,
                                                    gguf=gguf, force=force, runs_root=runs_root)
    except (export.ExportError, ConfigError) as e:
        raise errors.JobRefused(str(e)) from None
    except OSError as e:
        raise errors.JobNotPrepared(str(e)) from None
    return PreparedExport(job_dir, cfg, needs, out)


def sweep_beside_out(prepared: PreparedExport) -> str | None:
    """Removes what killed exports left beside the out dir, before the new export goes there:
    one line saying so, or None."""
    from ftui.jobs import export

    return export.sweep_out_parent(prepared.out)


def start_export(prepared: PreparedExport) -> JobStarted:
    """The prepared export job, started detached."""
    from ftui.jobs import export
    from ftui.rundir.run_dir import RunBusy

    try:
        info = export.start_export(prepared.job_dir, prepared.cfg)  # looked up at the call: a test may stand a fake in
    except RunBusy as e:
        raise errors.RunLocked(str(e)) from None
    except OSError as e:
        raise errors.StartFailed(_("cannot start the job in {path}: {reason}").format(path=prepared.job_dir, reason=e)) from e
    return JobStarted("export", prepared.job_dir, info)
