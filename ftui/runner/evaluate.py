"""The eval job: ``python -m ftui.runner eval JOB_DIR``: a model's loss over datasets, as its
run's stage computes it in training's periodic eval (``Stage.evaluate``), and perplexity
(exp of the mean token loss) for sft and pt; the preference stages' figures with it (reward
accuracy and margins for dpo and rm).

JOB_DIR (``RUN/eval/ID``, made by ``ftui eval``) holds the run's config with the datasets to
score and job.json with the model source (final/, a checkpoint, the base). Every record is
scored (no eval split). The model is loaded as chat loads it; the stage's own loss path is put
on it (the chunked loss; a reward model's saved value head; DPO's and KTO's reference: the
base under a LoRA adapter switched off, else the base model loaded beside it). Several
processes each take every N-th example and their sums are all-reduced. Rank 0 writes an
``eval`` event into the job's events and eval_results.json, and, when no job holds the run,
the same event into the run's events.jsonl, where the dashboard shows it at the model's step.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ftui.rundir.event_writer import EventWriter
from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.rundir.paths import EVAL_RESULTS_FILE, EVENTS_FILE, FINAL_DIR
from ftui.runner.distributed import process_group
from ftui.runner.engines import DistInfo
from ftui.runner.engines.base import Engine
from ftui.runner.faults import Heartbeat, StopRequest
from ftui.runner.job import run_job
from ftui.runner.predict import PROGRESS_EVERY_S, job_device, load_model, read_spec
from ftui.runner.stages import make_stage


def main(argv: list[str] | None = None) -> int:
    return run_job("eval", evaluate, sys.argv[1:] if argv is None else argv)


def model_step(spec: dict[str, Any]) -> int:
    """The training step the scored weights are from (0: the base), for the eval event."""
    source = spec.get("source", {})
    if source.get("base") or not source.get("run"):
        return 0
    if source.get("checkpoint"):
        return int(str(source["checkpoint"]).removeprefix("step-"))
    run = Path(source["run"])
    try:
        for line in reversed((run / EVENTS_FILE).read_text(encoding="utf-8").splitlines()):
            event = json.loads(line)
            if event.get("event") == "step":
                return int(event["step"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return 0


def put_loss_path(stage: Any, loaded: Any, spec: dict[str, Any], cfg: RunConfig, engine: Engine) -> None:
    """The stage's loss on the loaded model: as in training, except that a reward model gets
    its trained value head and a full-weights DPO/KTO model the base as its reference."""
    model = loaded.model
    if stage.description.value_head and not stage.description.planner.generation:  # ppo's policy: scored by generating
        from ftui.runner.reward import VALUE_HEAD_FILE, install_value_head, load_value_head

        head = Path(spec["source"]["run"]) / FINAL_DIR / VALUE_HEAD_FILE if spec["source"].get("run") else None
        if head is None or not head.is_file() or spec["source"].get("checkpoint") or spec["source"].get("base"):
            raise ValueError(_("a reward model is scored from its run's final/ (its value head is saved there only)"))
        install_value_head(model, load_value_head(head).to(loaded.device))
        return
    stage.prepare_model(model)
    reference = getattr(stage, "reference", None)
    if reference is None:
        return
    if not hasattr(engine.unwrap(), "disable_adapter"):  # full or freeze weights: the base beside them
        base = load_model(dict(spec, source=dict(spec["source"], base=True, checkpoint=None)), str(loaded.device), cfg.infer_dtype)
        reference.copy = base.model.requires_grad_(False).eval()
    stage.attach(engine)


@torch.no_grad()
def evaluate(job_dir: Path, cfg: RunConfig, info: DistInfo, writer: EventWriter | None, stop: StopRequest,
             resume: Path | None = None) -> tuple[str, str]:
    spec = read_spec(job_dir)
    device = job_device(cfg, info)
    heartbeat = Heartbeat(job_dir, info.rank)
    with process_group(cfg, info, torch.device(device)):
        loaded = load_model(spec, device, cfg.infer_dtype)
        # the model is loaded for inference (transformers' own attention, never fa2), so batches need no sequence lengths
        stage = make_stage(cfg.model_copy(update={"flash_attn": "sdpa"}), loaded.tokenizer)
        data = stage.build_data(pack=False)
        engine = Engine(cfg.model_copy(update={"engine": "single"}), info, torch.device(device))
        engine.model = engine.module = loaded.model
        put_loss_path(stage, loaded, spec, cfg, engine)
        if writer is not None:
            for w in data.warnings:
                writer.write("log", level="warning", message=w)
            params = sum(p.numel() for p in loaded.model.parameters())
            writer.write("job_start", run_id=job_dir.name, job="eval", source=spec.get("source_label", loaded.label),
                         precision=str(loaded.model.dtype).removeprefix("torch."), world_size=info.world_size, model=loaded.label,
                         total_params=params, examples=len(data.train), dataset=cfg.dataset, device=device, stage=cfg.stage)
        share = data.train[info.rank :: info.world_size]
        fields = stage.evaluate(engine, share, stage.collator(), progress_beat(heartbeat, writer, cfg, info, len(data.train)))
        if writer is not None:  # the count complete (the beats say it every few seconds, not at the end)
            writer.write("progress", done=len(data.train), total=len(data.train))
    if writer is None:
        return "completed", ""
    if not fields:
        return "failed", _("no examples to score")
    if stage.description.perplexity:
        loss = fields["eval_loss"]
        fields["eval_perplexity"] = math.exp(loss) if loss < 700 else None
    step = model_step(spec)
    extra = {"source": spec.get("source_label", loaded.label), "dataset": cfg.dataset, "examples": len(data.train)}
    writer.write("eval", step=step, **fields, **extra)
    tmp = job_dir / (EVAL_RESULTS_FILE + ".tmp")
    tmp.write_text(json.dumps({"step": step, **fields, **extra}, indent=2))
    tmp.replace(job_dir / EVAL_RESULTS_FILE)
    record_in_run(spec, step, fields, extra)
    shown = ", ".join(f"{k.removeprefix('eval_')} {v:.4f}" for k, v in fields.items() if isinstance(v, float))
    return "completed", _("{n} examples of {dataset}: {scores}").format(n=len(data.train), dataset=cfg.dataset, scores=shown)


def progress_beat(heartbeat: Heartbeat, writer: EventWriter | None, cfg: RunConfig, info: DistInfo, total: int):
    """Stage.evaluate's per-batch beat: the heartbeat, and on rank 0 a `progress` event every few
    seconds (examples scored, counted from rank 0's batches: the ranks hold equal shares)."""
    batches, last = 0, time.monotonic()

    def beat() -> None:
        nonlocal batches, last
        heartbeat.beat()
        batches += 1
        if writer is not None and time.monotonic() - last >= PROGRESS_EVERY_S:
            last = time.monotonic()
            writer.write("progress", done=min(total, batches * cfg.per_device_eval_batch_size * info.world_size), total=total)

    return beat


def record_in_run(spec: dict[str, Any], step: int, fields: dict[str, Any], extra: dict[str, Any]) -> None:
    """The eval event in the run's own events.jsonl, so its dashboard shows the point; only when
    no job holds the run (a training job is its events' only writer while it lives)."""
    run = spec.get("source", {}).get("run")
    if not run:
        return
    from ftui.rundir.lock import lock_run_dir, RunBusy

    try:
        fd = lock_run_dir(Path(run), wait_s=0.5)
    except (RunBusy, OSError):
        return
    try:
        EventWriter(Path(run) / EVENTS_FILE).write("eval", step=step, **fields, **extra)
    finally:
        os.close(fd)
