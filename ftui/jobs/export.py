"""Export jobs: a run's final/ or checkpoint as a standalone model directory (torch-free: the
CLI and the app prepare and start them; the work is ``ftui.runner.export``).

An export job lives in ``RUN/export/ID``, laid out as a run directory (config.yaml, job.json,
events.jsonl, train.log, job.lock) like the Evaluate & Predict jobs, so the same launcher,
supervisor, Stop, ``attach`` and ``watch`` serve it: merging a 7B+ model takes minutes and
tens of GiB of host memory, and must outlive the app. What it writes goes to ``out``, which is
never inside a run (a run's directory is its own: deleting the run would take the export) and
never over a directory with something in it unless ``force``, and then only over an earlier
ftui export (``ftui.safety.export_out``: ftui never deletes what it did not write).

Before it starts, :func:`export_needs` says how much host memory and disk the job takes, from
the model's config.json alone, and :func:`resources_problem` refuses when the machine has not
that much.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftui.config.schema import RunConfig
from ftui.config.load import read_run_config
from ftui.i18n import _
from ftui.presets.vision_families import vision_family
from ftui.rundir.formats import fmt_bytes
from ftui.rundir.paths import BASE_MODEL_DIR, CONFIG_FILE, EXPORT_DIR, FINAL_DIR, JOB_SPEC_FILE, ftui_home

DTYPES = ("bf16", "fp16", "fp32")
GGUF_TYPES = ("f16", "bf16", "q8_0")
# The families ftui.runner.gguf_export writes (config.json's model_type), checked before a job starts
GGUF_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
DEFAULT_SHARD_SIZE = "5GB"  # LLaMA-Factory's export_size (5, in GB) and transformers' default
BYTES_PER_PARAM = {"bf16": 2, "fp16": 2, "fp32": 4}
# GGUF bytes per weight: q8_0 stores 32 int8 weights + one fp16 scale per block (34 / 32)
GGUF_BYTES_PER_PARAM = {"f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32}
# What a process holds besides the weights: torch, transformers and the tokenizer (measured
# about 0.6 GiB for a CPU torch; a CUDA build maps more), rounded up
HOST_OVERHEAD = 1 << 30
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


class ExportError(ValueError):
    """An export that cannot start (bad size, out dir in the way, not enough memory); the
    message says what to do."""


def parse_shard_size(text: str | int) -> int:
    """``5GB``, ``500MB``, ``2GiB`` or a number of bytes, as bytes (transformers reads the
    same units: GB = 10**9, GiB = 2**30). At least 1 MB: smaller shards would only make
    thousands of files."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE.match(str(text))
        if not m:
            raise ExportError(_("shard size {size} is not a size; write it as 5GB, 500MB or 2GiB").format(size=repr(text)))
        value = int(float(m.group(1)) * _UNITS[(m.group(2) or "B").lower()])
    if value < 10**6:
        raise ExportError(_("shard size {size} is under 1MB; give at least 1MB (LLaMA-Factory's default is 5GB)").format(size=repr(text)))
    return value


def default_out_dir(run_dir: Path, which: str | None) -> Path:
    """Where the screen proposes to write: FTUI_HOME/exports/RUN-final (or -step-N), outside
    every run and outside the runs root (where every directory is listed as a run)."""
    tail = "final" if which in (None, "final") else f"step-{str(which).removeprefix('step-')}"
    return ftui_home() / "exports" / f"{run_dir.name}-{tail}"


def _is_run_dir(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() and ((path / "launch.json").is_file() or (path / "events.jsonl").is_file())


def out_dir_problem(out: Path, force: bool, runs_root: Path | None = None) -> str | None:
    """Why ``out`` cannot take an export, or None. Never a symbolic link (never followed to
    replace what it points to), never inside a run (or a run's job), never a run directory
    itself, never straight in the runs root (it would be listed as a run), never a file, never
    over a non-empty directory unless ``force``, and then only over an earlier ftui export
    (``ftui.safety.export_out.replace_problem``)."""
    from ftui.safety.export_out import link_problem, replace_problem

    given = out.expanduser()
    if given.is_symlink():
        return link_problem(out, given)
    try:
        target = given.resolve()
    except (OSError, RuntimeError) as err:
        return _("{path} cannot be used: {reason}").format(path=out, reason=err)
    for parent in (target, *target.parents):
        if _is_run_dir(parent):
            if parent == target:
                where = _("{path} is a run directory").format(path=out)
            else:
                where = _("{path} is inside the run directory {run}").format(path=out, run=parent)
            return _("{problem}; export outside every run (deleting a run deletes what is in it), e.g. {example}").format(
                problem=where, example=default_out_dir(parent, None))
    if runs_root is not None:
        try:
            root = runs_root.expanduser().resolve()
        except (OSError, RuntimeError):
            root = None
        if root is not None and target.parent == root:
            return _("{path} is straight in the runs root {root}, where every directory is taken for a run; use another directory").format(
                path=out, root=root)
    if target.exists() and not target.is_dir():
        return _("{path} exists and is not a directory; choose another --out").format(path=out)
    if target.is_dir() and not force:
        try:
            has_content = any(target.iterdir())
        except OSError as err:
            return _("{path} cannot be read: {reason}").format(path=out, reason=err.strerror or err)
        if has_content:
            return _("{path} is not empty; choose another --out, or --force to replace an earlier ftui export there").format(path=out)
    if target.is_dir() and force:
        kept = _kept_from_force(target, runs_root)
        if kept:
            return _("--force would delete everything in {path}, which holds {what}; export into a directory of its own, "
                     "e.g. {example}").format(path=out, what=kept, example=ftui_home() / "exports" / "my-model")
        return replace_problem(target, shown_as=out)
    return None


# Runs found this deep under an out dir given with --force are looked for (a runs root two
# levels down); deeper ones are found through the runs root and the run index instead.
FORCE_SCAN_DEPTH = 3


def _kept_from_force(target: Path, runs_root: Path | None) -> str | None:
    """What ``--force`` must never replace: a directory that is or holds the user's home, the
    current directory, ftui's own directory (FTUI_HOME: the runs root, the run index), the runs
    root, an indexed run or any run directory found within FORCE_SCAN_DEPTH levels. Says what
    it holds, or None when replacing it loses no run."""
    from ftui.rundir.paths import default_runs_root
    from ftui.rundir.index import indexed_run_dirs

    def holds(path: Path | None) -> bool:
        if path is None:
            return False
        try:
            resolved = path.expanduser().resolve()
        except (OSError, RuntimeError):
            return False
        return resolved == target or target in resolved.parents

    for what, path in ((_("your home directory"), Path.home()), (_("the current directory"), Path.cwd()),
                       (_("ftui's own directory (FTUI_HOME)"), ftui_home()), (_("the runs root"), runs_root),
                       (_("the runs root"), Path(default_runs_root()))):
        if holds(path):
            return what
    for run in indexed_run_dirs():
        if holds(run):
            return _("the run {run}").format(run=run)
    frontier = [target]
    for _depth in range(FORCE_SCAN_DEPTH):
        below: list[Path] = []
        for d in frontier:
            try:
                children = [c for c in d.iterdir() if c.is_dir() and not c.is_symlink()]
            except OSError:
                continue
            for c in children:
                if _is_run_dir(c):
                    return _("the run {run}").format(run=c)
            below += children
        frontier = below
    return None


@dataclass(frozen=True)
class ExportNeeds:
    """What an export takes, estimated from config.json (the planner's parameter count)."""

    params: int
    host_bytes: int  # peak host memory of the job
    disk_bytes: int  # what it writes under out (safetensors, plus the GGUF file)

    def describe(self) -> str:
        from ftui.plan.planner import count

        return _("{params} parameters: about {memory} of host memory and {disk} of disk").format(
            params=count(self.params), memory=fmt_bytes(self.host_bytes), disk=fmt_bytes(self.disk_bytes))


def base_model_source(run_dir: Path, cfg: RunConfig) -> str:
    saved = run_dir / BASE_MODEL_DIR
    return str(saved) if saved.is_dir() else cfg.model_name_or_path


def vision_gguf_refusal(model_type: str) -> str:
    """Why ``--gguf`` is refused for a vision-language model, and what to use instead: llama.cpp
    runs one from two files, the language model and the vision tower with its projector
    (``mmproj``), and ftui's GGUF writer makes only the first kind (for text families)."""
    return _("GGUF export of a vision-language model ({model_type}) is not written by ftui: llama.cpp needs the language model "
             "and a separate projector file (mmproj) for the vision tower. Export without --gguf, then convert the merged "
             "export with llama.cpp's convert_hf_to_gguf.py: once for the model (convert_hf_to_gguf.py OUT --outtype f16) and "
             "once with --mmproj for the projector (convert_hf_to_gguf.py OUT --mmproj)").format(model_type=model_type)


def export_needs(run_dir: Path, cfg: RunConfig, which: str | None, dtype: str, gguf: str | None) -> ExportNeeds:
    """Host memory: the model is built in fp32 on the CPU (a LoRA merge in half precision
    would round the base twice), so 4 bytes a parameter; a checkpoint's trained weights are
    read into a second full fp32 state dict first (DCP and DeepSpeed's converter both), so 8;
    plus the process. The GGUF file is written after the model is freed, from the exported
    shards one tensor at a time (streamed into the file): about twice the largest tensor
    (the embeddings) in fp32. Disk: the shards in ``dtype`` and the GGUF file."""
    from ftui.plan.model_shape import ModelShape, UnknownModel, read_model_config
    from ftui.machine.facts import MachineFacts

    try:
        config = read_model_config(base_model_source(run_dir, cfg))
        shape = ModelShape.from_config(config)
    except (UnknownModel, KeyError, TypeError, ValueError) as err:
        raise ExportError(_("cannot size the export: {reason}").format(reason=err)) from None
    if gguf and vision_family(config.get("model_type")) is not None:
        raise ExportError(vision_gguf_refusal(str(config.get("model_type"))))
    if gguf and not MachineFacts.without_gpu().has("gguf"):  # the job would fail once the model is merged
        raise ExportError(_("GGUF export needs the gguf package, which is not installed: pip install 'ftui[gguf]' (or export "
                            "without --gguf)"))
    if gguf and config.get("model_type") not in GGUF_MODEL_TYPES:
        raise ExportError(_("GGUF export is written for the {types} model types, and this model is {model_type}; "
                            "export without --gguf and convert with llama.cpp's convert_hf_to_gguf.py").format(
            types=", ".join(GGUF_MODEL_TYPES), model_type=repr(config.get("model_type"))))
    params = shape.params
    from_checkpoint = which not in (None, "final") or not (run_dir / FINAL_DIR).is_dir()
    load = params * (8 if from_checkpoint else 4)
    gguf_bytes = int(params * GGUF_BYTES_PER_PARAM[gguf]) if gguf else 0
    host = max(load, 2 * 4 * shape.embed_params if gguf else 0) + HOST_OVERHEAD
    return ExportNeeds(params, int(host), int(params * BYTES_PER_PARAM[dtype] + gguf_bytes))


def _existing_parent(path: Path) -> Path:
    for p in (path, *path.parents):
        if p.exists():
            return p
    return Path("/")


def resources_problem(needs: ExportNeeds, out: Path, available_memory: int | None = None) -> str | None:
    """Refuses an export the machine has no room for: the host memory available now (psutil's
    ``available``, what can be had without swapping) and the free disk where out goes."""
    import psutil

    avail = psutil.virtual_memory().available if available_memory is None else available_memory
    if needs.host_bytes > avail:
        from ftui.plan.planner import count

        return _("the export needs about {memory} of host memory ({params} parameters in fp32), and {available} is available; "
                 "free memory (stop other jobs) or export on a larger machine").format(
            memory=fmt_bytes(needs.host_bytes), params=count(needs.params), available=fmt_bytes(avail))
    where = _existing_parent(out.expanduser().resolve())
    try:
        free = shutil.disk_usage(where).free
    except OSError as err:
        return _("cannot check the free disk at {path}: {reason}").format(path=where, reason=err.strerror or err)
    if needs.disk_bytes > free:
        return _("the export writes about {size} and {path} has {free} free; "
                 "choose an --out on a larger disk, a smaller --dtype, or drop --gguf").format(
            size=fmt_bytes(needs.disk_bytes), path=where, free=fmt_bytes(free))
    return None


def source_problem(run_dir: Path, which: str | None) -> str | None:
    """A checkpoint that is not there, or a run with nothing to export, said before the job."""
    from ftui.rundir.checkpoints import CheckpointError, checkpoints, resolve_checkpoint

    if which not in (None, "final"):
        try:
            resolve_checkpoint(run_dir, str(which).removeprefix("step-"))
        except CheckpointError as err:
            return str(err)
        return None
    if (run_dir / FINAL_DIR).is_dir():
        return None
    if which == "final":
        return _("{run} has no final/ (it has not finished); export a checkpoint with --checkpoint N").format(run=run_dir.name)
    if not checkpoints(run_dir):
        return _("{run} has no final/ and no checkpoint yet: nothing trained to export").format(run=run_dir.name)
    return None


def export_job_config(base: RunConfig) -> RunConfig:
    """The run's config as the export job runs it: one process on the CPU (the merge is a few
    additions per weight; the host has the memory a model in fp32 needs), nothing mirrored."""
    return base.model_copy(update={
        "engine": "single", "deepspeed": None, "nproc_per_node": 1, "nnodes": 1, "node_rank": 0, "rdzv_endpoint": None,
        "device": "cpu", "gpus": None, "report_to": "none", "resume_from_checkpoint": None,
        "fp16": False, "enable_liger_kernel": False,  # GPU-only; the export's own dtype is --dtype
    })


def prepare_export(run_dir: Path, *, which: str | None, out: Path, dtype: str = "bf16", max_shard_size: str = DEFAULT_SHARD_SIZE,
                   gguf: str | None = None, force: bool = False, runs_root: Path | None = None,
                   available_memory: int | None = None) -> tuple[Path, RunConfig, ExportNeeds]:
    """Checks everything that can be checked before the job (source, out dir, sizes, memory,
    disk), then makes the job's directory; returns it with the job's config and the needs."""
    from ftui.jobs.offline import new_job_dir

    if dtype not in DTYPES:
        raise ExportError(_("dtype {dtype} is not one of {choices}").format(dtype=repr(dtype), choices=", ".join(DTYPES)))
    if gguf is not None and gguf not in GGUF_TYPES:
        raise ExportError(_("GGUF type {type} is not one of {choices}").format(type=repr(gguf), choices=", ".join(GGUF_TYPES)))
    shard_bytes = parse_shard_size(max_shard_size)
    problem = source_problem(run_dir, which) or out_dir_problem(out, force, runs_root)
    if problem:
        raise ExportError(problem)
    base = read_run_config(run_dir / CONFIG_FILE)  # its schema only: a GPU run exports on any machine
    needs = export_needs(run_dir, base, which, dtype, gguf)
    problem = resources_problem(needs, out, available_memory)
    if problem:
        raise ExportError(problem)
    cfg = export_job_config(base)
    job_dir = new_job_dir(run_dir, "export")
    cfg.save(job_dir / CONFIG_FILE, include_unsupported=False)
    checkpoint = None if which in (None, "final") else str(which).removeprefix("step-")
    spec = {"job": "export", "run": str(run_dir.resolve()), "checkpoint": checkpoint,
            "source_label": f"{run_dir.name} " + (f"step-{checkpoint}" if checkpoint else "final" if (run_dir / FINAL_DIR).is_dir() else _("latest checkpoint")),
            "out": str(out.expanduser().resolve()), "dtype": dtype, "max_shard_size": shard_bytes, "gguf": gguf, "force": force,
            "needs": {"params": needs.params, "host_bytes": needs.host_bytes, "disk_bytes": needs.disk_bytes}, "created": time.time()}
    tmp = job_dir / (JOB_SPEC_FILE + ".tmp")
    tmp.write_text(json.dumps(spec, indent=2))
    os.replace(tmp, job_dir / JOB_SPEC_FILE)
    return job_dir, cfg, needs


def sweep_out_parent(out: Path) -> str | None:
    """Removes what killed exports left beside ``out`` (``export_out.sweep_leftovers``), before
    a new export goes there: one line saying so, or None."""
    from ftui.safety.export_out import sweep_leftovers

    try:
        parent = out.expanduser().resolve().parent
    except (OSError, RuntimeError):
        return None
    return sweep_leftovers(parent)


def leftover_note(job_dir: Path) -> str | None:
    """After an export job that did not complete: its temporary directory, if one is left (a
    job killed with kill -9 or by the OOM killer cannot remove it). Removed here when its job
    is certainly gone; else named, with what removes it."""
    from ftui.rundir.event_reader import read_all
    from ftui.safety.export_out import sweep_leftovers
    from ftui.rundir.paths import EVENTS_FILE

    temps = [e["temp_dir"] for e in read_all(job_dir / EVENTS_FILE) if isinstance(e.get("temp_dir"), str)]
    if not temps or not os.path.lexists(temps[-1]):
        return None
    tmp = Path(temps[-1])
    swept = sweep_leftovers(tmp.parent)
    if not os.path.lexists(tmp):
        return swept
    return _("the export's temporary directory {tmp} is left; the next export into {parent} or ftui runs removes it "
             "once its job has ended").format(tmp=tmp, parent=tmp.parent)


def export_job_out_parents(run_dirs: list[Path], limit: int = 200) -> list[Path]:
    """Where the runs' export jobs wrote (their out dirs' parents, each once; at most ``limit``
    job specs read), and FTUI_HOME/exports: where ``ftui runs`` looks for what killed exports
    left."""
    from ftui.jobs.offline import read_job_spec  # bounded and never blocking: a run directory is untrusted

    parents = {ftui_home() / "exports": None}
    read = 0
    for run in run_dirs:
        try:
            jobs = list_exports(run)
        except OSError:  # another user's run directory, an unreadable export/: listed as it is, nothing to sweep
            continue
        for job in jobs:
            if read >= limit:
                return list(parents)
            read += 1
            out = read_job_spec(job).get("out")
            if isinstance(out, str) and out.startswith("/"):
                parents[Path(out).parent] = None
    return list(parents)


def start_export(job_dir: Path, cfg: RunConfig) -> dict[str, Any]:
    from ftui.jobs.launch import start_run

    return start_run(job_dir, cfg, job="export")


def list_exports(run_dir: Path) -> list[Path]:
    """A run's export jobs, oldest first."""
    folder = run_dir / EXPORT_DIR
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if p.is_dir() and (p / JOB_SPEC_FILE).is_file()), key=lambda p: p.name)
