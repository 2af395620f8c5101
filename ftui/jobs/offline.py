"""Evaluate & Predict jobs: their directories and how they start (torch-free: the CLI and the
app start them; the work is ``ftui.runner.predict`` / ``ftui.runner.evaluate``).

A job's directory (``RUN/predict/ID``, ``RUN/eval/ID``; outside a run, ``RUNS_ROOT/predict/ID``)
is laid out as a run directory, so the one launcher, supervisor, lock, Stop, ``attach`` and
``watch`` serve it: ``config.yaml`` is the run's config with the datasets to score (its
template and cutoff_len encode them) and the job's processes, ``job.json`` what the job does
(the model source, generation settings). The job runs detached in its own session and
outlives the app and the SSH connection, as training does.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ftui.safety.bounded_input import load_json
from ftui.config.load import read_run_config
from ftui.config.schema import RunConfig
from ftui.machine.facts import MachineFacts
from ftui.i18n import _
from ftui.rundir.job_kinds import KINDS
from ftui.rundir.paths import CONFIG_FILE, JOB_SPEC_FILE
from ftui.data.registry import dataset_path_problem, media_job_problem
from ftui.jobs.backends import backend_problem, job_backend

# LLaMA-Factory's generation defaults (its GeneratingArguments; the WebUI's Evaluate tab)
GENERATION_DEFAULTS = {"max_new_tokens": 512, "temperature": 0.95, "top_p": 0.7, "batch_size": 8}


class JobError(ValueError):
    """A job that cannot be prepared (no such checkpoint, no model); the message says what to do."""


def job_folder(kind: str) -> str:
    """Where a run keeps its jobs of ``kind`` (ftui.rundir.job_kinds: RUN/predict, RUN/eval, RUN/export)."""
    folder = KINDS[kind].dir_name if kind in KINDS else None
    if folder is None:
        raise JobError(_("{kind} is not a job that runs in a directory of its own").format(kind=kind))
    return folder


def new_job_dir(parent: Path, kind: str) -> Path:
    """A fresh, owner-only directory named by the time (a suffix when two start in one second)."""
    folder = parent / job_folder(kind)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(100):
        path = folder / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            continue
    raise JobError(_("cannot make a new job directory in {path}").format(path=folder))


def source_of(run_dir: Path | None, checkpoint: str | None, base: bool, model: str | None, adapter: str | None) -> dict[str, Any]:
    """What the job loads, as the chat worker takes it: a run's final/ (or a checkpoint, or its
    base), or a model directory with an optional adapter."""
    if run_dir is not None:
        return {"run": str(run_dir), "checkpoint": checkpoint, "base": base}
    return {"model": model, "adapter": adapter}


def source_label(source: dict[str, Any]) -> str:
    if source.get("run"):
        name = Path(source["run"]).name
        if source.get("base"):
            return f"{name} base"
        return f"{name} step-{source['checkpoint']}" if source.get("checkpoint") else f"{name} final"
    return Path(str(source.get("model"))).name + (f" + {Path(str(source['adapter'])).name}" if source.get("adapter") else "")


def job_config(base: RunConfig, dataset: str, dataset_dir: str | None, max_samples: int | None, nproc: int,
               device: str | None, cutoff_len: int | None = None, eval_batch_size: int | None = None) -> RunConfig:
    """The run's config narrowed to the job: these datasets, all of them scored (no eval split),
    one node, plain data parallel (a model is loaded whole per process), nothing mirrored;
    the run's cutoff_len and eval batch unless the job gives its own."""
    update: dict[str, Any] = {
        "dataset": dataset, "eval_dataset": None, "val_size": 0.0, "max_samples": max_samples,
        "tokenized_path": None, "resume_from_checkpoint": None, "packing": False,
        "engine": "ddp" if nproc > 1 else "single", "deepspeed": None, "nproc_per_node": nproc, "nnodes": 1, "node_rank": 0,
        "rdzv_endpoint": None, "report_to": "none",
    }
    if dataset_dir is not None:
        update["dataset_dir"] = dataset_dir
    if cutoff_len is not None:
        update["cutoff_len"] = cutoff_len
    if eval_batch_size is not None:
        update["per_device_eval_batch_size"] = eval_batch_size
    if device is not None and device != "auto":
        update["device"] = device
    return base.model_copy(update=update)


def prepare_job(kind: str, *, run_dir: Path | None, source: dict[str, Any], dataset: str, dataset_dir: str | None,
                max_samples: int | None = None, generation: dict[str, Any] | None = None, nproc: int = 1,
                device: str | None = None, model_config: RunConfig | None = None, root: Path | None = None,
                cutoff_len: int | None = None, eval_batch_size: int | None = None) -> tuple[Path, RunConfig]:
    """Makes the job's directory (config.yaml, job.json); returns it with the job's config.
    ``model_config``: the config for a model outside a run (its template, cutoff_len)."""
    if run_dir is not None:
        base = read_run_config(run_dir / CONFIG_FILE)  # its schema only: a GPU run's job also runs where there is none
        parent = run_dir
    elif model_config is not None and root is not None:
        base, parent = model_config, root
    else:
        raise JobError(_("give a run, or --model PATH"))
    cfg = job_config(base, dataset, dataset_dir, max_samples, nproc, device, cutoff_len, eval_batch_size)
    problem = backend_problem(job_backend(generation, cfg))  # the job's own infer_backend, else its config's
    problem = problem or dataset_path_problem(cfg.dataset, cfg.dataset_dir, cfg.stage, unresolved=True)  # the job reads it with the run's stage
    problem = problem or media_job_problem(cfg.dataset, cfg.dataset_dir, kind, job_model_type(source, cfg))
    if problem is None and device == "cuda" and not MachineFacts.gather(cfg.gpus).gpu_present:  # --device cuda, with the GPUs the job is given
        problem = _("no CUDA GPU was found on this machine (NVML sees none); use --device auto or cpu")
    if problem:
        raise JobError(problem)  # before the job's directory exists: a refused job leaves nothing behind
    job_dir = new_job_dir(parent, kind)
    cfg.save(job_dir / CONFIG_FILE, include_unsupported=False)
    spec = {"job": kind, "source": source, "source_label": source_label(source), "dataset": dataset,
            "generation": {**GENERATION_DEFAULTS, **(generation or {})}, "created": time.time(), "run": str(run_dir) if run_dir else None}
    tmp = job_dir / (JOB_SPEC_FILE + ".tmp")
    tmp.write_text(json.dumps(spec, indent=2))
    os.replace(tmp, job_dir / JOB_SPEC_FILE)
    return job_dir, cfg


def job_model_type(source: dict[str, Any], cfg: RunConfig) -> str | None:
    """The model_type of what the job loads (a model directory's, else the run's base model's);
    None where no config.json is at hand (a hub name: the runner judges it)."""
    from ftui.presets.families import read_model_type
    from ftui.rundir.paths import resolve_model_path

    try:
        return read_model_type(resolve_model_path(str(source.get("model") or cfg.model_name_or_path)))
    except (OSError, RuntimeError, ValueError):
        return None


def start_job(kind: str, job_dir: Path, cfg: RunConfig) -> dict[str, Any]:
    from ftui.jobs.launch import start_run

    return start_run(job_dir, cfg, job=kind)


def list_jobs(run_dir: Path, kind: str) -> list[Path]:
    """A run's jobs of one kind, oldest first."""
    folder = run_dir / job_folder(kind)
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if p.is_dir() and (p / JOB_SPEC_FILE).is_file()), key=lambda p: p.name)


JOB_SPEC_MAX = 1 << 20  # a job's job.json is a few hundred bytes


def read_job_spec(job_dir: Path) -> dict[str, Any]:
    """A job's job.json ({} when it cannot be read or is not a mapping): a run directory is
    untrusted, so the read is bounded and never blocks on a FIFO (read_at), and nesting deeper
    than the stack is refused (load_json)."""
    from ftui.rundir.run_files import read_at, UnreadableFile

    try:
        data = load_json(read_at(job_dir / JOB_SPEC_FILE, 0, JOB_SPEC_MAX) or b"{}")
    except (OSError, ValueError, UnreadableFile):
        return {}
    return data if isinstance(data, dict) else {}
