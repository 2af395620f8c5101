"""The one training loop, shared by every stage and engine; it knows neither.

    for each optimizer step:
        take G micro batches from the stage's batch source (the training rows, or batches it generates)
        one all-reduce: [real tokens, labelled tokens, loss tokens, stop requested, previous NaN flag]
        forward/backward each micro batch: stage.loss(...).total / (global loss tokens / dp ranks)
        engine.step(): clip, (unscale), optimizer step, zero grads; scheduler.step()
        heartbeat; a `step` event every `logging_steps` (with the stage's figures)
        eval every `eval_steps` (stage.evaluate); checkpoints/step-N every `save_steps` and at
        the end (save_strategy epoch: every steps_per_epoch instead; no: none); always on a stop

Every rank reaches the same decisions (stop, give up after NaNs, save) from the same
all-reduced numbers, so no rank is ever left waiting in a collective. The loop returns the
step it reached; the job (``ftui.runner.train``) writes final/ and run_end.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from ftui.rundir.event_writer import EventWriter
from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.runner import attention
from ftui.runner.checkpoint import save_checkpoint
from ftui.runner.engines import DistInfo, Engine
from ftui.runner.faults import Heartbeat, NonFiniteLoss, StopRequest
from ftui.runner.data import EpochSampler, TokenizedData
from ftui.runner.metrics import Window, memory_row
from ftui.runner.stages import Stage


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


# The step's counts in the one all-reduce: COUNTS numbers, then the stop request and the NaN flag.
COUNTS = 3  # real tokens, labelled (trainable) tokens, loss tokens


class StepCounts:
    """The step's counts, stop request and NaN flag for the one all-reduce, moved to the
    device without a host sync: written into a pinned host buffer and copied with
    ``non_blocking`` (``torch.tensor(..., device=cuda)`` would block the host on every step).
    Reusing one buffer is safe: the next step writes it only after ``DeferredFlag.read`` has
    waited for an event recorded after this copy."""

    def __init__(self, device: torch.device):
        self.device = device
        self.host = torch.zeros(COUNTS + 2, dtype=torch.float32, pin_memory=device.type == "cuda")

    def to_device(self, counts: tuple[float, ...], stop: bool, nonfinite: torch.Tensor) -> torch.Tensor:
        for i, value in enumerate(counts):
            self.host[i] = value
        self.host[COUNTS] = float(stop)
        out = self.host.to(self.device, non_blocking=True) if self.device.type == "cuda" else self.host.clone()
        out[COUNTS + 1] = nonfinite
        return out


@dataclass
class Training:
    """Everything the loop needs, set up by the job (``ftui.runner.train``)."""

    cfg: RunConfig
    info: DistInfo
    device: torch.device
    run_dir: Path
    engine: Engine
    stage: Stage
    data: TokenizedData
    scheduler: Any
    sampler: EpochSampler
    collator: Callable
    writer: EventWriter | None
    stop: StopRequest
    max_steps: int
    steps_per_epoch: int
    flops_per_token: float
    peak_flops: float | None


def run_loop(t: Training, step: int = 0, total_tokens: float = 0.0) -> int:
    """Trains from ``step`` until ``max_steps`` or a stop; returns the step reached."""
    cfg, engine, stage, info, device, writer = t.cfg, t.engine, t.stage, t.info, t.device, t.writer
    accum = cfg.gradient_accumulation_steps
    figures = stage.figures
    heartbeat = Heartbeat(t.run_dir, info.rank)
    last_outcome = None

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
                writer.write("log", level="warning", message=_("not saving a checkpoint at step {step}: the loss or gradients are NaN/inf, "
                                                                   "so the weights may be too").format(step=step))
            return
        trainer_state = {
            "scheduler": t.scheduler.state_dict(), "scaler": engine.scaler.state_dict() if engine.scaler else None,
            "total_tokens": total_tokens, "micro_batch_size": cfg.per_device_train_batch_size,
            "accumulation": accum, "max_steps": t.max_steps, "stage": stage.checkpoint_state(),
        }
        heartbeat.beat()
        path = save_checkpoint(engine, t.run_dir, step, trainer_state, cfg.save_total_limit)
        heartbeat.beat()
        if writer is not None:
            writer.write("checkpoint", step=step, path=str(path))

    stream = stage.batches(t, start=step * accum)  # the dataset's rows, or batches the stage generates
    window = Window(device)
    flags = DeferredFlag(device, size=2)  # [stop requested anywhere, previous step's loss non-finite anywhere]
    eval_every = cfg.eval_steps or cfg.logging_steps * 10
    eval_share = t.data.eval[info.rank :: info.world_size]
    nonfinite = torch.zeros((), device=device)
    streak = 0
    last_counts = torch.zeros(COUNTS, device=device)
    step_counts = StepCounts(device)
    engine.model.train()
    started_at = step  # 0, or where a resumed run starts
    while step < t.max_steps:
        batches = [next(stream) for _micro in range(accum)]
        # Counts of this step on every rank, the stop request and the previous step's NaN
        # flag, in one all-reduce: every rank reaches the same decisions.
        counts = step_counts.to_device((sum(b.real_tokens for b in batches), sum(b.trainable_tokens for b in batches),
                                        sum(b.loss_tokens for b in batches)), t.stop.requested, nonfinite)
        engine.all_reduce_sum(counts)
        flags.push(counts[COUNTS:])
        # Each rank's gradient is averaged over dp ranks by the engine, so scale the
        # per-unit sum by dp_size / global loss tokens: the result is the exact mean over
        # the whole step, whatever the padding or sequence lengths.
        divisor = counts[COUNTS - 1].clamp(min=1.0) / engine.dp_size
        step_loss = torch.zeros((), device=device)
        step_figures = torch.zeros(len(figures), device=device)
        for i, batch in enumerate(batches):
            with engine.accumulating(last=i == accum - 1):
                out = stage.loss(engine.model, batch, engine.autocast)
                engine.backward(out.total / divisor)
            step_loss += out.total.detach()
            for k, name in enumerate(figures):
                step_figures[k] += out.figures[name].detach().float()
        nonfinite = (~torch.isfinite(step_loss)).float()
        last_outcome = engine.step()
        if not last_outcome.skipped:
            t.scheduler.step()
        step += 1
        heartbeat.beat()
        window.add(torch.cat([step_loss.detach().float().reshape(1), step_figures]), counts[:COUNTS])
        window.data_wait, stream.waited = window.data_wait + stream.waited, 0.0
        last_counts = counts[:COUNTS]

        stop_any, prev_nonfinite = flags.read()
        stopping = stop_any > 0 or (info.world_size == 1 and t.stop.requested)
        if prev_nonfinite > 0 and step > 1:
            streak += 1
            if writer is not None:
                writer.write("log", level="warning", message=_("loss is NaN/inf at step {step} ({streak} in a row; the limit is {limit})").format(
                    step=step - 1, streak=streak, limit=cfg.nonfinite_loss_limit))
            if streak >= cfg.nonfinite_loss_limit:
                raise NonFiniteLoss(_("the loss was NaN/inf for {streak} steps in a row (last at step {step})").format(
                    streak=streak, step=step - 1), first_step=step - streak)
        else:
            streak = 0
        ranks = engagement_rows(engine, device) if step == 1 else None  # optimizer state exists now
        if step == started_at + 1 and writer is not None and cfg.flash_attn == "fa2" and attention.FALLBACKS:
            writer.write("log", level="warning", message=_("flash_attn fa2: some attention ran SDPA instead ({why}); the result is the same, "
                                                           "the speed SDPA's there").format(why=", ".join(sorted(attention.FALLBACKS))))
        if step % cfg.logging_steps == 0 or step == t.max_steps or stopping or ranks:
            total_tokens = log_step(t, window, last_counts, last_outcome, step, total_tokens, ranks)
        evaluating = bool(t.data.eval) and (step % eval_every == 0 or step == t.max_steps)
        saving = checkpoint_due(cfg.save_strategy, cfg.save_steps, t.steps_per_epoch, step, t.max_steps, stopping)
        if evaluating or saving:
            with window.excluded():  # tokens/s, step time and MFU count training only
                if evaluating:
                    fields = stage.evaluate(engine, eval_share, t.collator, heartbeat.beat)
                    if writer is not None and fields:
                        writer.write("eval", step=step, **fields)
                if saving:
                    checkpoint(step_loss)
        if stopping:
            break
    return step


def checkpoint_due(strategy: str, save_steps: int, steps_per_epoch: int, step: int, max_steps: int, stopping: bool) -> bool:
    """Whether ``step`` writes a checkpoint: every ``save_steps`` (save_strategy steps) or every
    ``steps_per_epoch`` (epoch), and at the last step; none while training with "no". A stop
    always saves, whatever the strategy: the stopped run is resumed from there, and stopping
    must not lose what was trained."""
    if stopping:
        return True
    every = {"steps": save_steps, "epoch": steps_per_epoch}.get(strategy)
    return every is not None and (step % every == 0 or step == max_steps)


def log_step(t: Training, window: Window, last_counts: torch.Tensor, outcome: Any, step: int, total_tokens: float,
             ranks: list[dict[str, int]] | None = None) -> float:
    """Writes one `step` event from the window's counters: one batched device->host read."""
    engine, device, figures = t.engine, t.device, t.stage.figures
    local = engine.all_reduce_sum(window.sums[: 1 + len(figures)].clone())  # loss and figures: this rank's sums
    norm = outcome.grad_norm.float().reshape(1) if outcome.grad_norm is not None else torch.full((1,), float("nan"), device=device)
    vals = torch.cat([local, window.sums[1 + len(figures):], last_counts.float(), norm]).tolist()
    mem = engine.gather_rows(memory_row(device))
    elapsed = time.perf_counter() - window.started
    data_wait = window.data_wait
    win_loss, figure_sums = vals[0], vals[1 : 1 + len(figures)]
    win_tokens, _win_trainable, win_units, tokens, trainable, _units, grad_norm = vals[1 + len(figures):]
    steps = window.steps
    window.reset()
    measured = t.stage.window_figures()  # every rank: the stage's own window restarts too
    total_tokens += win_tokens
    tokens_per_s = win_tokens / elapsed if elapsed > 0 else 0.0
    if t.writer is None:
        return total_tokens
    loss = win_loss / win_units if win_units else float("nan")
    t.writer.write(
        "step", step=step, epoch=round(step / t.steps_per_epoch, 4), loss=loss, lr=t.scheduler.get_last_lr()[0],
        grad_norm=grad_norm if not outcome.skipped and math.isfinite(grad_norm) else None, tokens=int(tokens), trainable_tokens=int(trainable),
        tokens_per_s=tokens_per_s, step_time_s=elapsed / steps,
        mfu=(t.flops_per_token * tokens_per_s / (t.peak_flops * t.info.world_size)) if t.peak_flops else None,
        loss_scale=outcome.loss_scale, skipped=outcome.skipped, window_steps=steps, total_tokens=int(total_tokens),
        data_wait_s=data_wait / steps,
        mem=[{"rank": r, "allocated": int(m[0]), "reserved": int(m[1]), "peak": int(m[2])} for r, m in enumerate(mem)],
        **{name: (s / win_units if win_units else None) for name, s in zip(figures, figure_sums)},
        **measured,
        **({"ranks": ranks} if ranks else {}),
    )
    return total_tokens


def engagement_rows(engine: Engine, device: torch.device) -> list[dict[str, int]]:
    """Per rank: parameter elements and optimizer-state bytes held (proof the engine engaged)."""
    mine = engine.engagement()
    row = torch.tensor([mine["param_elements"], mine["optimizer_bytes"]], dtype=torch.float64 if device.type == "cpu" else torch.int64, device=device)
    return [{"rank": r, "param_elements": int(v[0]), "optimizer_bytes": int(v[1])} for r, v in enumerate(engine.gather_rows(row))]
