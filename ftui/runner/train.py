"""The rank entry point: ``python -m ftui.runner.train RUN_DIR`` (started by ftui.jobs.spawn,
or by torchrun on several nodes).

One explicit training loop, readable top to bottom (after torchtune's recipes):

    config -> device and process group -> tokenizer, data -> model, method -> engine
    -> for each optimizer step: gather G micro batches, count their real tokens on every
       rank, forward/backward each (loss summed over tokens, divided by the global count),
       clip, step, schedule -> write a `step` event every `logging_steps`
    -> checkpoints/step-N every `save_steps` -> eval -> last checkpoint, final/ -> run_end

``python -m ftui.runner.train RUN_DIR --resume CHECKPOINT`` restores model or adapter,
optimizer, scheduler, loss scaler, RNG and data position, and continues as if never stopped.

Rank 0 writes ``events.jsonl``; every rank's output goes to ``train.log``. SIGTERM asks for
a graceful stop: all ranks finish the current step, save a checkpoint and end together (the
request travels with the step's token-count all-reduce, so no rank is left waiting in a
collective); a second SIGTERM exits at once. So do NaN/inf losses: counted on every rank
from the same all-reduced flag, and after ``nonfinite_loss_limit`` in a row the run stops.
"""

from __future__ import annotations

import math
import os
import queue
import random
import shutil
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Iterator

import torch

from ftui.events import DISK_FULL_ERRNOS, DISK_FULL_TEXT, EVENTS_FILE, EventWriter
from ftui.config import RunConfig, load_config
from ftui.runner.data import Batch, Collator, DataFormatError, EpochSampler, TokenizedData, build_datasets, chat_template_for
from ftui.presets.engine_presets import MORE_MEMORY_SAVING
from ftui.runner.checkpoint import load_checkpoint, save_checkpoint
from ftui.runner.loss import install_chunked_loss, micro_batch_loss
from ftui.runner.distributed import process_group
from ftui.runner.engines import DistInfo, Engine, make_engine, pick_device
from ftui.runner.metrics import Window, matmul_mode, memory_row, peak_flops, set_matmul_precision
from ftui.runner.model import (apply_method, apply_speedups, backward_span, count_params, flops_per_token, load_model,
                               load_tokenizer)
from ftui.runs import CONFIG_FILE, FINAL_DIR, HEARTBEAT_DIR, CheckpointError


class NonFiniteLoss(RuntimeError):
    """The loss was NaN or inf for too many steps in a row."""


class StopRequest:
    """Set by SIGTERM; a second signal ends the process at once."""

    def __init__(self) -> None:
        self.requested = False
        self.at: float | None = None

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.requested:
            os._exit(128 + signum)
        self.requested = True
        self.at = time.time()
        try:
            print(f"[ftui] signal {signum}: finishing the current step, then stopping", file=sys.stderr, flush=True)
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


class DeferredFlag:
    """Reads small device values (stop request, NaN flag) without stalling the GPU: a pinned
    copy and an event recorded before the step's compute, read after it is enqueued."""

    def __init__(self, device: torch.device, size: int = 1):
        self.device = device
        self.size = size
        self.host = torch.zeros(size, pin_memory=device.type == "cuda")
        self.event = torch.cuda.Event() if device.type == "cuda" else None
        self.pending = False

    def push(self, value: torch.Tensor) -> None:
        self.host.copy_(value.reshape(self.size), non_blocking=self.event is not None)
        if self.event is not None:
            self.event.record()
        self.pending = True

    def read(self) -> list[float]:
        if not self.pending:
            return [0.0] * self.size
        if self.event is not None:
            self.event.synchronize()  # done long before: recorded ahead of the step's compute
        return self.host.tolist()


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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass


class StepCounts:
    """The step's [real tokens, trainable tokens, stop requested, NaN flag] for the one
    all-reduce, moved to the device without a host sync: written into a pinned host buffer
    and copied with ``non_blocking`` (``torch.tensor(..., device=cuda)`` would block the host
    on every step). Reusing one buffer is safe: the next step writes it only after
    ``DeferredFlag.read`` has waited for an event recorded after this copy."""

    def __init__(self, device: torch.device):
        self.device = device
        self.host = torch.zeros(4, dtype=torch.float32, pin_memory=device.type == "cuda")

    def to_device(self, tokens: float, trainable: float, stop: bool, nonfinite: torch.Tensor) -> torch.Tensor:
        self.host[0], self.host[1], self.host[2] = tokens, trainable, float(stop)
        counts = self.host.to(self.device, non_blocking=True) if self.device.type == "cuda" else self.host.clone()
        counts[3] = nonfinite
        return counts


def uses_host_optimizer(cfg: RunConfig) -> bool:
    """The offload presets step the optimizer on the CPU (FSDP's CPUOffloadPolicy, DeepSpeed's
    CPU Adam), so their ranks need CPU threads as CPU runs do."""
    return cfg.engine_spec.host_optimizer


def host_batches(data: TokenizedData, sampler: EpochSampler, collator: Collator,
                 start: int = 0) -> Iterator[tuple[int, Batch]]:
    """Endless (epoch, batch) stream over the training examples, this rank's share, collated
    on the host (pinned on CUDA), from the ``start``-th micro batch overall (a resumed run
    continues exactly where it stopped)."""
    epoch, offset = divmod(start, sampler.batches_per_epoch)
    while True:
        for idx in sampler.batches(epoch, offset):
            yield epoch, collator([data.train[i] for i in idx])
        epoch += 1
        offset = 0


class Prefetcher:
    """Collates the next micro batches in a background thread while the current one computes,
    so the loop waits for data only when collation is slower than a step; ``waited`` adds up
    the time the loop did wait (reported per step as ``data_wait_s``). The order is the
    source's, so exact resume is unaffected. A thread, not DataLoader workers: collation is a
    few list operations and one tensor per field, the records are already tokenized, and
    worker processes would each copy the whole dataset."""

    def __init__(self, source: Iterator[tuple[int, Batch]], device: torch.device, depth: int):
        self.device = device
        self.queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self.waited = 0.0
        self.thread = threading.Thread(target=self._fill, args=(source,), name="ftui-prefetch", daemon=True)
        self.thread.start()

    def _fill(self, source: Iterator[tuple[int, Batch]]) -> None:
        try:
            for item in source:
                self.queue.put(item)
        except BaseException as exc:  # handed to the loop, which raises it
            self.queue.put(exc)

    def __iter__(self) -> "Prefetcher":
        return self

    def __next__(self) -> tuple[int, Batch]:
        began = time.perf_counter()
        item = self.queue.get()
        self.waited += time.perf_counter() - began
        if isinstance(item, BaseException):
            raise item
        epoch, batch = item
        return epoch, batch.to(self.device)


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


def hint_for(exc: BaseException, cfg: RunConfig) -> str:
    if isinstance(exc, torch.OutOfMemoryError):
        bs, accum = cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps
        options = []
        if bs > 1:
            options.append(f"per_device_train_batch_size={bs // 2} with gradient_accumulation_steps={accum * 2} (same effective batch)")
        if not cfg.gradient_checkpointing:
            options.append("gradient_checkpointing: true")
        nxt = None if cfg.deepspeed else MORE_MEMORY_SAVING.get(cfg.engine)
        if nxt:
            options.append(f"engine {nxt}" + (" (needs nproc_per_node >= 2)" if nxt in ("zero2", "zero3") and cfg.world_size == 1 else ""))
        if cfg.finetuning_type == "full":
            options.append("finetuning_type lora")
        return f"out of GPU memory with engine {cfg.engine_name}, micro batch {bs}, cutoff_len {cfg.cutoff_len}: try " + "; or ".join(options)
    if isinstance(exc, NonFiniteLoss):
        fixes = ["lower learning_rate (e.g. by 10x)"]
        if cfg.fp16:
            fixes.append("use bf16 instead of fp16 (no overflow)")
        if cfg.max_grad_norm == 0:
            fixes.append("turn clipping on (max_grad_norm: 1.0)")
        return "; ".join(fixes) + "; resume from the last checkpoint before the NaNs (ftui train --resume RUN --checkpoint N)"
    if isinstance(exc, CheckpointError):
        return "pick another checkpoint with --checkpoint N (ftui runs shows the run; its checkpoints/ holds step-N directories)"
    if isinstance(exc, DataFormatError):
        return "fix the dataset (or its dataset_info.json entry) and start again"
    if disk_full(exc):
        return ("the disk is full (or a quota or file-size limit was hit) while writing: free space where the run "
                "directory is, or lower save_total_limit; checkpoints written before are intact, so resume with "
                "ftui train --resume RUN once there is room")
    if isinstance(exc, OSError) and ("model" in str(exc).lower() or "config" in str(exc).lower()):
        return "check model_name_or_path: a local directory with config.json, or a hub name this machine can reach"
    return "the traceback is at the end of train.log"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    resume: Path | None = None
    if len(argv) == 3 and argv[1] == "--resume":
        resume = Path(argv[2])
    elif len(argv) != 1:
        print("usage: python -m ftui.runner.train RUN_DIR [--resume CHECKPOINT_DIR]", file=sys.stderr)
        return 2
    run_dir = Path(argv[0])
    die_with_parent()
    info = DistInfo.from_env()
    writer = EventWriter(run_dir / EVENTS_FILE) if info.is_main else None
    stop = StopRequest()
    stop.install()
    # A file-size limit (ulimit -f) must fail the write with EFBIG, not kill the rank unseen.
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    cfg: RunConfig | None = None
    try:
        cfg, _warnings = load_config(run_dir / CONFIG_FILE)
        status, reason = train(run_dir, cfg, info, writer, stop, resume)
    except BaseException as exc:  # every failure ends with a run_end that says why
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except OSError:
            pass  # train.log is on a full disk too: the run_end below still says why
        if writer is not None:
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            full = writer.disk_full or disk_full(exc)
            write_end(writer, status="failed", reason=("disk full: " if full else "") + reason,
                      error_type=type(exc).__name__, error_message=str(exc)[:4000],
                      hint=DISK_FULL_HINT if writer.disk_full else hint_for(exc, cfg) if cfg is not None
                      else "the config could not be read")
        return 1
    if writer is not None:
        write_end(writer, status=status, reason=reason)
        writer.close()
    return 0


DISK_FULL_HINT = ("the disk is full (or a quota or file-size limit was hit) where the run directory is: free space, then "
                  "ftui train --resume RUN continues from the newest checkpoint; train.log may be cut short for the same reason")


def write_end(writer: EventWriter, **fields: Any) -> None:
    """run_end, which EventWriter fits into the reserved room on a full disk; if even that
    fails, the supervisor's own record (which reads train.log and the free space) stands."""
    try:
        writer.write("run_end", **fields)
    except OSError as err:
        try:
            print(f"[ftui] could not write run_end: {err}", file=sys.stderr, flush=True)
        except OSError:
            pass


def train(run_dir: Path, cfg: RunConfig, info: DistInfo, writer: EventWriter | None, stop: StopRequest,
          resume: Path | None = None) -> tuple[str, str]:
    device = pick_device(cfg, info)
    if device.type == "cpu" or uses_host_optimizer(cfg):
        # the launcher sets OMP_NUM_THREADS=1 for several ranks; a rank that computes on the CPU gets its share of the cores
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // info.local_world_size))
    mode = matmul_mode(cfg.precision, cfg.tf32, torch.cuda.get_device_capability(device) if device.type == "cuda" else (0, 0))
    if device.type == "cuda":
        set_matmul_precision(mode)
    with process_group(cfg, info, device):
        seed_everything(cfg.seed)

        # --- Tokenizer and data (every rank builds the same examples; each reads its share)
        tokenizer = load_tokenizer(cfg)
        data = build_datasets(cfg, tokenizer, progress=prepare_reporter(writer))
        if writer is not None:
            for w in data.warnings:
                writer.write("log", level="warning", message=w)

        # --- Model and method
        base_dir = run_dir / "base_model"
        if resume is not None and cfg.model_init == "random" and base_dir.is_dir():
            # the random base this run started from, so a resumed adapter sits on the same weights
            cfg = cfg.model_copy(update={"model_name_or_path": str(base_dir), "model_init": "pretrained"})
        engine = make_engine(cfg, info, device)
        model = load_model(cfg, engine.load_device())
        if cfg.model_init == "random" and info.is_main:
            save_random_base(model, tokenizer, run_dir, cfg)
        model = apply_method(model, cfg)
        apply_speedups(model, cfg)
        loss_head = install_chunked_loss(model) if cfg.chunked_loss else None
        total, trainable = count_params(model)
        frozen_below, backward_layers = backward_span(model)

        # --- Engine: wraps the model and owns the optimizer
        engine.prepare(model)
        load_peak = None
        if device.type == "cuda":
            # Peaks reported from here on cover training, not loading and sharding the model.
            load_peak = torch.cuda.max_memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)

        # --- Schedule
        sampler = EpochSampler(len(data.train), cfg.per_device_train_batch_size, info.rank, info.world_size, cfg.seed)
        accum = cfg.gradient_accumulation_steps
        steps_per_epoch = sampler.batches_per_epoch // accum
        if steps_per_epoch == 0:
            raise DataFormatError(
                f"{len(data.train)} training examples are too few for one optimizer step of "
                f"{cfg.per_device_train_batch_size} x {accum} x {info.world_size} ranks; lower the batch or accumulation"
            )
        max_steps = cfg.max_steps if cfg.max_steps > 0 else math.ceil(cfg.num_train_epochs * steps_per_epoch)
        warmup = cfg.warmup_steps or math.ceil(cfg.warmup_ratio * max_steps)
        from transformers import get_scheduler

        scheduler = get_scheduler(cfg.lr_scheduler_type, engine.torch_optimizer(), num_warmup_steps=warmup, num_training_steps=max_steps)
        collator = Collator(tokenizer.pad_token_id, pad_to_multiple=8 if device.type == "cuda" else 1, pin_memory=device.type == "cuda")
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
            total_tokens = float(state.get("total_tokens", 0.0))

        if writer is not None:
            writer.write(
                "run_start", run_id=run_dir.name, engine=engine.name, precision=cfg.precision, method=cfg.method,
                world_size=info.world_size, nodes=cfg.nnodes, model=cfg.model_name_or_path,
                total_params=total, trainable_params=trainable, max_steps=max_steps,
                planned_tokens_per_step=cfg.per_device_train_batch_size * accum * info.world_size * cfg.cutoff_len,
                device=str(device.type), device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                steps_per_epoch=steps_per_epoch, train_examples=len(data.train), eval_examples=len(data.eval),
                warmup_steps=warmup, peak_flops=peak, matmul_mode=mode, flops_per_token=fpt, save_steps=cfg.save_steps,
                memory_peak_window="training: peaks are reset after the model is loaded and the engine is set up",
                load_peak=load_peak,
                **({"resumed_from_step": step, "resumed_from": str(resume)} if resume is not None else {}),
            )

        def checkpoint(last_loss: torch.Tensor) -> None:
            # Weights are NaN after a step whose loss or (applied) gradient was: never save those.
            finite = torch.isfinite(last_loss).reshape(1)
            norm = last_outcome.grad_norm if last_outcome is not None else None
            if norm is not None and not last_outcome.skipped:
                finite = finite & torch.isfinite(norm).reshape(1)
            finite = finite.float()
            engine.all_reduce_sum(finite)  # rare (checkpoint steps only): a host read is fine here
            if finite.item() < info.world_size:
                if writer is not None:
                    writer.write("log", level="warning", message=f"not saving a checkpoint at step {step}: the loss or gradients are NaN/inf, so the weights may be too")
                return
            trainer_state = {
                "scheduler": scheduler.state_dict(), "scaler": engine.scaler.state_dict() if engine.scaler else None,
                "total_tokens": total_tokens, "micro_batch_size": cfg.per_device_train_batch_size,
                "accumulation": accum, "max_steps": max_steps,
            }
            heartbeat.beat()
            path = save_checkpoint(engine, run_dir, step, trainer_state, cfg.save_total_limit)
            heartbeat.beat()
            if writer is not None:
                writer.write("checkpoint", step=step, path=str(path))

        # --- The loop
        stream = Prefetcher(host_batches(data, sampler, collator, start=step * accum), device, depth=2 * accum)
        window = Window(device)
        flags = DeferredFlag(device, size=2)  # [stop requested anywhere, previous step's loss non-finite anywhere]
        heartbeat = Heartbeat(run_dir, info.rank)
        eval_every = cfg.eval_steps or cfg.logging_steps * 10
        epoch = 0
        nonfinite = torch.zeros((), device=device)
        streak = 0
        last_counts = torch.zeros(2, device=device)
        step_counts = StepCounts(device)
        last_outcome = None
        engine.model.train()
        while step < max_steps:
            batches = []
            for _ in range(accum):
                epoch, batch = next(stream)
                batches.append(batch)
            # Token counts of this step on every rank, the stop request and the previous step's
            # NaN flag, in one all-reduce: every rank reaches the same decisions.
            counts = step_counts.to_device(sum(b.real_tokens for b in batches), sum(b.trainable_tokens for b in batches),
                                           stop.requested, nonfinite)
            engine.all_reduce_sum(counts)
            flags.push(counts[2:4])
            # Each rank's gradient is averaged over dp ranks by the engine, so scale the
            # per-token sum by dp_size / global trainable tokens: the result is the exact
            # token mean over the whole step, whatever the padding or sequence lengths.
            divisor = counts[1].clamp(min=1.0) / engine.dp_size
            step_loss = torch.zeros((), device=device)
            for i, batch in enumerate(batches):
                with engine.accumulating(last=i == accum - 1):
                    loss_sum = micro_batch_loss(engine.model, loss_head, batch.model_inputs(), batch.labels, engine.autocast)
                    engine.backward(loss_sum / divisor)
                step_loss += loss_sum.detach()
            nonfinite = (~torch.isfinite(step_loss)).float()
            last_outcome = engine.step()
            if not last_outcome.skipped:
                scheduler.step()
            step += 1
            heartbeat.beat()
            window.add(step_loss, counts[:2])
            window.data_wait, stream.waited = window.data_wait + stream.waited, 0.0
            last_counts = counts[:2]

            stop_any, prev_nonfinite = flags.read()
            stopping = stop_any > 0 or (info.world_size == 1 and stop.requested)
            if prev_nonfinite > 0 and step > 1:
                streak += 1
                if writer is not None:
                    writer.write("log", level="warning", message=f"loss is NaN/inf at step {step - 1} ({streak} in a row; the limit is {cfg.nonfinite_loss_limit})")
                if streak >= cfg.nonfinite_loss_limit:
                    raise NonFiniteLoss(f"the loss was NaN/inf for {streak} steps in a row (last at step {step - 1})")
            else:
                streak = 0
            ranks = engagement_rows(engine, device) if step == 1 else None  # optimizer state exists now
            if step % cfg.logging_steps == 0 or step == max_steps or stopping or ranks:
                total_tokens = log_step(writer, engine, window, last_counts, last_outcome, scheduler, step,
                                        step / steps_per_epoch, total_tokens, fpt, peak, device, info, ranks)
            evaluating = bool(data.eval) and (step % eval_every == 0 or step == max_steps)
            saving = step % cfg.save_steps == 0 or step == max_steps or stopping  # every way out of the loop saves
            if evaluating or saving:
                with window.excluded():  # tokens/s, step time and MFU count training only
                    if evaluating:
                        run_eval(writer, engine, data, cfg, collator, info, device, step, loss_head, heartbeat)
                    if saving:
                        checkpoint(step_loss)
            if stopping:
                break

        # --- Save
        if step >= max_steps:
            heartbeat.beat()
            save_final(engine, tokenizer, cfg, run_dir)
        if info.world_size > 1:
            torch.distributed.barrier()
        if step < max_steps:
            return "stopped", f"stop requested at step {step} of {max_steps}"
        return "completed", f"{max_steps} steps"


def prepare_reporter(writer: EventWriter | None):
    """`prepare` events (records tokenized so far) for the dashboard and `ftui watch`: a big
    dataset takes a minute before the first step."""
    if writer is None:
        return None
    return lambda done, total: writer.write("prepare", done=done, total=total)


def log_step(writer, engine: Engine, window: Window, last_counts, outcome, scheduler, step: int, epoch: float,
             total_tokens: float, fpt: float, peak: float | None, device: torch.device, info: DistInfo,
             ranks: list[dict[str, int]] | None = None) -> float:
    """Writes one `step` event from the window's counters: one batched device->host read."""
    loss_sum = engine.all_reduce_sum(window.sums[0:1].clone())
    norm = outcome.grad_norm.float().reshape(1) if outcome.grad_norm is not None else torch.full((1,), float("nan"), device=device)
    vals = torch.cat([loss_sum, window.sums[1:], last_counts.float(), norm]).tolist()
    mem = engine.gather_rows(memory_row(device))
    elapsed = time.perf_counter() - window.started
    data_wait = window.data_wait
    win_loss, win_tokens, win_trainable, tokens, trainable, grad_norm = vals
    steps = window.steps
    window.reset()
    total_tokens += win_tokens
    tokens_per_s = win_tokens / elapsed if elapsed > 0 else 0.0
    if writer is None:
        return total_tokens
    loss = win_loss / win_trainable if win_trainable else float("nan")
    writer.write(
        "step", step=step, epoch=round(epoch, 4), loss=loss, lr=scheduler.get_last_lr()[0],
        grad_norm=grad_norm if not outcome.skipped and math.isfinite(grad_norm) else None, tokens=int(tokens), trainable_tokens=int(trainable),
        tokens_per_s=tokens_per_s, step_time_s=elapsed / steps,
        mfu=(fpt * tokens_per_s / (peak * info.world_size)) if peak else None,
        loss_scale=outcome.loss_scale, skipped=outcome.skipped, window_steps=steps, total_tokens=int(total_tokens),
        data_wait_s=data_wait / steps,
        mem=[{"rank": r, "allocated": int(m[0]), "reserved": int(m[1]), "peak": int(m[2])} for r, m in enumerate(mem)],
        **({"ranks": ranks} if ranks else {}),
    )
    return total_tokens


def engagement_rows(engine: Engine, device: torch.device) -> list[dict[str, int]]:
    """Per rank: parameter elements and optimizer-state bytes held (proof the engine engaged)."""
    mine = engine.engagement()
    row = torch.tensor([mine["param_elements"], mine["optimizer_bytes"]], dtype=torch.float64 if device.type == "cpu" else torch.int64, device=device)
    return [{"rank": r, "param_elements": int(v[0]), "optimizer_bytes": int(v[1])} for r, v in enumerate(engine.gather_rows(row))]


@torch.no_grad()
def run_eval(writer, engine: Engine, data: TokenizedData, cfg: RunConfig, collator: Collator, info: DistInfo,
             device: torch.device, step: int, loss_head: torch.nn.Module | None = None,
             heartbeat: Heartbeat | None = None) -> None:
    """Eval loss over this rank's share of the eval examples, with the training loss path
    (``loss_head``: the chunked loss's output projection, None for full logits)."""
    engine.model.eval()
    mine = data.eval[info.rank :: info.world_size]
    sums = torch.zeros(2, device=device, dtype=torch.float64)
    bs = cfg.per_device_eval_batch_size
    for i in range(0, len(mine), bs):
        batch = collator(mine[i : i + bs]).to(device)
        sums[0] += micro_batch_loss(engine.model, loss_head, batch.model_inputs(), batch.labels, engine.autocast).double()
        sums[1] += batch.trainable_tokens
        if heartbeat is not None:
            heartbeat.beat()
    engine.all_reduce_sum(sums)
    engine.model.train()
    total_loss, n = sums.tolist()
    if writer is not None and n:
        writer.write("eval", step=step, eval_loss=total_loss / n, eval_tokens=int(n))


def save_random_base(model: torch.nn.Module, tokenizer: Any, run_dir: Path, cfg: RunConfig) -> None:
    """A random-weight base is not on disk anywhere: keep it, so adapters and chat can load it."""
    base = run_dir / "base_model"
    model.save_pretrained(base, safe_serialization=True)
    tokenizer.save_pretrained(base)
    model.config._name_or_path = str(base.resolve())
    model.name_or_path = str(base.resolve())


def save_final(engine: Engine, tokenizer: Any, cfg: RunConfig, run_dir: Path) -> None:
    """final/: the model or adapter plus tokenizer, loadable by plain transformers / peft.

    Collective (FSDP and ZeRO-3 gather their shards onto rank 0, which writes). Written under
    a temporary name and renamed, so a crash never leaves half a final/."""
    state_dict = engine.full_state_dict()
    if not engine.info.is_main:
        return
    final = run_dir / FINAL_DIR
    tmp = run_dir / (FINAL_DIR + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    module = engine.unwrap()
    module.save_pretrained(tmp, safe_serialization=True, state_dict=state_dict)
    tokenizer.chat_template = chat_template_for(cfg, tokenizer)  # chat uses the trained format
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)


if __name__ == "__main__":
    sys.exit(main())
