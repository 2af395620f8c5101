"""The training job: ``python -m ftui.runner train RUN_DIR [--resume CHECKPOINT]``.

Setup, readable top to bottom (after torchtune's recipes), then the shared loop:

    config -> device and process group -> tokenizer, the stage's data -> model, method, the
    stage's loss path -> engine -> schedule -> resume -> run_start -> ftui.runner.loop
    -> final/ -> run_end (written by ftui.runner.job)

``--resume CHECKPOINT`` restores model or adapter, optimizer, scheduler, loss scaler, RNG
and data position, and continues as if never stopped. What differs between SFT and
pre-training (and the stages to come) is the stage (``ftui.runner.stages``); how the work
is spread over devices is the engine (``ftui.runner.engines``).
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import torch

from ftui.rundir.event_writer import EventWriter
from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.rundir.paths import BASE_MODEL_DIR
from ftui.runner import attention
from ftui.runner.batch_layout import batch_layout
from ftui.runner.checkpoint import load_checkpoint
from ftui.runner.data import DataFormatError, run_sampler
from ftui.runner.distributed import cpu_threads, process_group
from ftui.runner.engines import DistInfo, make_engine, pick_device
from ftui.runner.faults import Heartbeat, StopRequest
from ftui.runner.job import run_job
from ftui.runner.loop import Training, run_loop
from ftui.runner.metrics import matmul_mode, peak_flops, set_matmul_precision
from ftui.runner.model import (apply_method, apply_speedups, backward_span, chat_template_for, count_params,
                               flops_per_token, grow_embeddings, load_model, load_tokenizer, model_config)
from ftui.runner.stages import make_stage
from ftui.runner.weights import save_final, save_pissa_start, save_random_base


def main(argv: list[str] | None = None) -> int:
    return run_job("train", train, sys.argv[1:] if argv is None else argv)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass


def prepare_reporter(writer: EventWriter | None):
    """`prepare` events (records tokenized so far) for the dashboard and `ftui watch`: a big
    dataset takes a minute before the first step."""
    if writer is None:
        return None
    return lambda done, total: writer.write("prepare", done=done, total=total)


def train(run_dir: Path, cfg: RunConfig, info: DistInfo, writer: EventWriter | None, stop: StopRequest,
          resume: Path | None = None) -> tuple[str, str]:
    device = pick_device(cfg, info)
    if device.type == "cpu" or cfg.engine_spec.host_optimizer:
        torch.set_num_threads(cpu_threads(info.local_world_size))
    mode = matmul_mode(cfg.precision, cfg.tf32, torch.cuda.get_device_capability(device) if device.type == "cuda" else (0, 0))
    if device.type == "cuda":
        set_matmul_precision(mode)
    with process_group(cfg, info, device):
        seed_everything(cfg.seed)

        # --- Tokenizer and the stage's data (every rank builds the same examples; each reads its share)
        tokenizer = load_tokenizer(cfg)
        stage = make_stage(cfg, tokenizer)
        data = stage.build_data(progress=prepare_reporter(writer))
        if writer is not None:
            for w in data.warnings:
                writer.write("log", level="warning", message=w)

        # --- Model, method, the stage's loss path
        base_dir = run_dir / BASE_MODEL_DIR
        model_label = cfg.model_name_or_path  # as configured: run_start names it so, resumed or not
        if resume is not None and cfg.model_init == "random" and base_dir.is_dir():
            # the random base this run started from, so a resumed adapter sits on the same weights
            cfg = cfg.model_copy(update={"model_name_or_path": str(base_dir), "model_init": "pretrained"})
        engine = make_engine(cfg, info, device)
        layout = batch_layout(cfg, model_config(cfg), device.type)  # padded or padding-free rows, and the attention for them
        stage.layout = layout
        model = load_model(cfg, engine.load_device(), attention=layout.attn_implementation)
        if cfg.flash_attn == "fa2":
            attention.note_model(model.config)  # what will run SDPA, for the warning at the first step
        loaded_attention = getattr(model.config, "_attn_implementation", None)  # what auto became: sdpa or eager
        grow_embeddings(model, tokenizer)  # room for the stop words a template added
        if cfg.model_init == "random" and info.is_main:
            save_random_base(model, tokenizer, run_dir)
        stage.keep_start(model)  # a preference stage's reference copy (full, freeze)
        model = apply_method(model, cfg)
        if cfg.pissa_init and info.is_main:
            save_pissa_start(model, run_dir)
        apply_speedups(model, cfg)
        stage.prepare_model(model)
        total, trainable = count_params(model)
        frozen_below, backward_layers = backward_span(model)

        # --- Engine: wraps the model and owns the optimizer
        engine.prepare(model)
        stage.attach(engine)
        load_peak = None
        if device.type == "cuda":
            # Peaks reported from here on cover training, not loading and sharding the model.
            load_peak = torch.cuda.max_memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)

        # --- Schedule
        sampler = run_sampler(cfg, len(data.train), info.rank, info.world_size)
        accum = cfg.gradient_accumulation_steps
        steps_per_epoch = stage.steps_per_epoch(len(data.train), sampler.batches_per_epoch, accum, info.world_size)
        if steps_per_epoch == 0:
            raise DataFormatError(_("{n} training examples are too few for one optimizer step of {bs} x {accum} x {ranks} "
                                    "ranks; lower the batch or accumulation").format(
                n=len(data.train), bs=cfg.per_device_train_batch_size, accum=accum, ranks=info.world_size))
        max_steps = cfg.max_steps if cfg.max_steps > 0 else math.ceil(cfg.num_train_epochs * steps_per_epoch)
        warmup = cfg.warmup_steps or math.ceil(cfg.warmup_ratio * max_steps)
        from transformers import get_scheduler

        scheduler = get_scheduler(cfg.lr_scheduler_type, engine.torch_optimizer(), num_warmup_steps=warmup, num_training_steps=max_steps)
        collator = stage.collator(pad_to_multiple=8 if device.type == "cuda" else 1, pin_memory=device.type == "cuda")
        peak = peak_flops(device, mode)
        # attention spans each example (a packed row holds several), so average per example
        seq_for_flops = max(1, sum(len(e.input_ids) for e in data.train) // max(1, data.train_examples or len(data.train)))
        fpt = flops_per_token(engine.unwrap().config, total, trainable, seq_for_flops, frozen_below, backward_layers)

        # --- Resume: engine state, RNG, scheduler, scaler, data position
        step = 0
        total_tokens = 0.0
        if resume is not None:
            state = load_checkpoint(engine, resume)
            scheduler.load_state_dict(state["scheduler"])
            for group, lr in zip(engine.torch_optimizer().param_groups, scheduler.get_last_lr()):
                group["lr"] = lr
            if engine.scaler is not None and state.get("scaler"):
                engine.scaler.load_state_dict(state["scaler"])
            step = int(state["step"])
            stage.resume_state(state.get("stage") or {})
            total_tokens = float(state.get("total_tokens", 0.0))

        if writer is not None:
            writer.write(
                "run_start", run_id=run_dir.name, stage=cfg.stage, engine=engine.name, precision=cfg.precision_label,
                method=cfg.method, world_size=info.world_size, nodes=cfg.nnodes, model=model_label,
                total_params=total, trainable_params=trainable, max_steps=max_steps,
                planned_tokens_per_step=cfg.per_device_train_batch_size * accum * info.world_size * cfg.cutoff_len,
                device=str(device.type), device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                steps_per_epoch=steps_per_epoch, train_examples=len(data.train), eval_examples=len(data.eval),
                warmup_steps=warmup, peak_flops=peak, matmul_mode=mode, flops_per_token=fpt, save_steps=cfg.save_steps,
                memory_peak_window="training: peaks are reset after the model is loaded and the engine is set up",
                cpu_threads=torch.get_num_threads(),  # intra-op threads: what a slow CPU run is first asked about
                load_peak=load_peak,
                attention=attention.describe() if cfg.flash_attn == "fa2" else attention.loaded_label(loaded_attention),
                padding_free=layout.padding_free, padding_free_why=layout.why,
                **({"resumed_from_step": step, "resumed_from": str(resume)} if resume is not None else {}),
            )

        # --- The loop
        step = run_loop(Training(
            cfg=cfg, info=info, device=device, run_dir=run_dir, engine=engine, stage=stage, data=data,
            scheduler=scheduler, sampler=sampler, collator=collator, writer=writer, stop=stop, max_steps=max_steps,
            steps_per_epoch=steps_per_epoch, flops_per_token=fpt, peak_flops=peak,
        ), step, total_tokens)

        # --- Save
        if step >= max_steps:
            Heartbeat(run_dir, info.rank).beat()  # gathering the shards of a big model takes a while
            save_final(engine, tokenizer, chat_template_for(cfg, tokenizer), run_dir, stage.final_extras)
        if info.world_size > 1:
            torch.distributed.barrier()
        if step < max_steps:
            return "stopped", _("stop requested at step {step} of {max_steps}").format(step=step, max_steps=max_steps)
        return "completed", _("{n} steps").format(n=max_steps)

