"""Writes a synthetic run directory with N step events (the shape the runner writes), for
the attach / render benchmarks. Usage: python bench/make_events.py OUT_DIR N"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ftui.rundir.events import make_event


def write(run: Path, n: int, world: int = 8) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.yaml").write_text("model_name_or_path: Qwen/Qwen2.5-7B\ndataset: alpaca_en_demo\n")
    (run / "launch.json").write_text(json.dumps({"start_time": 1.7e9, "host": "bench"}))
    (run / "train.log").write_text("".join(f"[rank0] line {i}\n" for i in range(5000)))
    t = 1.7e9 + 30
    with open(run / "events.jsonl", "w") as fh:
        fh.write(json.dumps(make_event("run_start", t=t, run_id=run.name, engine="fsdp", precision="bf16", method="full",
                                       world_size=world, nodes=1, model="Qwen/Qwen2.5-7B", total_params=7_615_616_512,
                                       trainable_params=7_615_616_512, max_steps=n, planned_tokens_per_step=1 << 20)) + "\n")
        template = make_event("step", t=0.0, step=0, epoch=0.0, loss=0.0, lr=1e-5, grad_norm=1.0, tokens=900_000,
                              trainable_tokens=400_000, tokens_per_s=250_000.0, step_time_s=3.6, mfu=0.43, loss_scale=None,
                              total_tokens=0, mem=[{"rank": r, "allocated": 60 << 30, "reserved": 70 << 30, "peak": 72 << 30} for r in range(world)])
        for s in range(1, n + 1):
            template.update(t=t + 3.6 * s, step=s, epoch=s / 1000, loss=2 * math.exp(-s / 20000) + 0.5 + 0.01 * math.sin(s), total_tokens=900_000 * s)
            fh.write(json.dumps(template, separators=(",", ":")) + "\n")
    return run


if __name__ == "__main__":
    write(Path(sys.argv[1]), int(sys.argv[2]))
