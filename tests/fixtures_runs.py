"""Recorded-run fixtures: deterministic run directories for dashboard tests and snapshots."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable

from ftui.rundir.events import make_event

T0 = 1_700_000_000.0


def write_run(root: Path, name: str, steps: int, max_steps: int, end: str | None = None,
              log_lines: tuple[str, ...] = (), model: str = "Qwen/Qwen2.5-0.5B", world_size: int = 2,
              step_s: float = 1.5, precision: str = "bf16", every: int = 1,
              step_extras: dict | Callable[[int], dict] | None = None, eval_extras: dict | Callable[[int], dict] | None = None,
              loss_at: Callable[[int], float] | None = None, as_written: bool = False) -> Path:
    """``step_extras`` / ``eval_extras``: more fields for every step / eval event (a newer
    stage's figures, or hostile ones), or a function of the step giving them; ``loss_at``: the loss at a step, when the default
    curve (3.1 down to about 0.6) does not suit; ``as_written``: lines with EventWriter's compact
    separators (json.dumps' default otherwise), the shape readers take as columns (compact reads)."""
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"model_name_or_path: {model}\ndataset: alpaca_en_demo\n")
    (run / "launch.json").write_text(json.dumps({"start_time": T0, "host": "fixture-host", "command_line": "torchrun ..."}))
    ev = [make_event("run_start", t=T0 + 20, run_id=name, engine="ddp", precision=precision, method="lora",
                     world_size=world_size, nodes=1, model=model, total_params=494_032_768, trainable_params=4_399_104,
                     max_steps=max_steps, planned_tokens_per_step=65536)]
    total = 0
    for s in range(every, steps + 1, every):
        loss = loss_at(s) if loss_at else 2.5 * math.exp(-s / 60) + 0.6 + 0.05 * math.sin(s)
        total += 30_000 * every
        ev.append(make_event(
            "step", t=T0 + 20 + s * step_s, step=s, epoch=round(s / 100, 4), loss=loss, lr=1e-4 * (1 - s / max_steps),
            grad_norm=1.0 / (1 + s / 50), tokens=30_000, trainable_tokens=12_000, tokens_per_s=20_000.0,
            step_time_s=step_s, mfu=0.412, loss_scale=None, total_tokens=total,
            mem=[{"rank": r, "allocated": (9 + r) << 30, "reserved": 12 << 30, "peak": (14 + r) << 30} for r in range(world_size)],
            **_at(step_extras, s)))
        if s % 50 == 0:
            ev.append(make_event("eval", t=T0 + 21 + s * step_s, step=s, eval_loss=loss + 0.1, **_at(eval_extras, s)))
    if end == "failed":
        ev.append(make_event("run_end", t=T0 + 20 + steps * step_s + 1, status="failed", reason="OutOfMemoryError: CUDA out of memory",
                             error_type="OutOfMemoryError", error_message="CUDA out of memory. Tried to allocate 2.00 GiB",
                             hint="halve per_device_train_batch_size and double gradient_accumulation_steps, or use preset zero3"))
    elif end:
        ev.append(make_event("run_end", t=T0 + 20 + steps * step_s + 1, status=end, reason=f"{steps} steps"))
    separators = (",", ":") if as_written else None
    (run / "events.jsonl").write_text("".join(json.dumps(e, separators=separators) + "\n" for e in ev))
    (run / "train.log").write_text("".join(line + "\n" for line in log_lines))
    return run


def _at(fields: dict | Callable[[int], dict] | None, step: int) -> dict:
    return fields(step) if callable(fields) else fields or {}


def dpo_figures(step: int, prefix: str = "") -> dict:
    """A DPO run's figures at a step (the runner's names): the margin grows, accuracy rises to 1."""
    margin = 2.0 * (1 - math.exp(-step / 80))
    chosen, rejected = margin / 2 - 0.1, -margin / 2 - 0.1
    figures = {"rewards_chosen": chosen, "rewards_rejected": rejected, "rewards_margin": margin,
               "rewards_accuracy": min(1.0, 0.5 + step / 200), "logps_chosen": -40.0 + chosen, "logps_rejected": -42.0 + rejected}
    return {prefix + k: round(v, 6) for k, v in figures.items()}


def fixed_sampler():
    from ftui.machine.gpu import GpuSample, HostSample

    gpus = [GpuSample(i, "NVIDIA H100 80GB HBM3", 97.0, 61 << 30, 80 << 30, 612.0, 64.0) for i in range(2)]
    return gpus, HostSample(12.0, 40 << 30, 128 << 30)
