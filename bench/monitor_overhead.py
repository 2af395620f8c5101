"""Benchmark: what monitoring costs a training step.

The runner always writes a ``step`` event for step 1 (per-rank engagement) and for the last
step. With ``logging_steps`` equal to the number of steps it writes nothing in between:
no event, no memory sampling, no device-to-host read of the counters. With
``logging_steps: 1`` it does all of that every step (the most a run can log). The mean step
time between the first and the last step event is compared, the two settings alternating
in pairs, and the median of the pairwise overheads is reported.

Run: python bench/monitor_overhead.py [--quick] [--reps N] [--steps N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import ftui_steps, machine, median, model_dir, record, run_ftui, varied_dataset, write_config  # noqa: E402

MODEL = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=1024)


def mean_step_s(run: Path) -> float:
    times, _, steps = ftui_steps(run)
    return (times[-1] - times[0]) / (steps[-1]["step"] - steps[0]["step"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="demo model, few steps, one pair, not recorded")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--world", type=int, default=1, help="processes (2: DDP; memory rows are gathered from every rank)")
    args = ap.parse_args()
    steps, reps = (8, 1) if args.quick else (args.steps, args.reps)
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mdir = model_dir(tmp / "model", **({} if args.quick else MODEL))
        data = varied_dataset(tmp / "data.json", 400, max_words=200, seed=2)
        env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // args.world)))
        for rep in range(reps):
            row = {}
            for label, logging in (("every_step", 1), ("first_and_last_only", steps)):
                cfg = dict(model_name_or_path=str(mdir), model_init="random", finetuning_type="full", dataset=str(data),
                           cutoff_len=256, packing=True, per_device_train_batch_size=4, max_steps=steps, logging_steps=logging,
                           save_strategy="no", learning_rate=1e-4, device="auto", output_dir=str(tmp / "runs"),
                           nproc_per_node=args.world, engine="ddp" if args.world > 1 else "single", run_name=f"{label}-{rep}")
                row[f"{label}_step_s"] = mean_step_s(run_ftui(write_config(tmp / f"{label}.yaml", cfg), env))
            row["overhead"] = row["every_step_step_s"] / row["first_and_last_only_step_s"] - 1
            pairs.append(row)
            print(f"[rep {rep + 1}/{reps}] " + ", ".join(f"{k} {v:.4g}" for k, v in row.items()), file=sys.stderr, flush=True)
    out = {"machine": machine(), "model": MODEL if not args.quick else "demo", "world_size": args.world, "steps": steps,
           "overhead_median": median([p["overhead"] for p in pairs]), "pairs": pairs}
    print(json.dumps(out, indent=1))
    if not args.quick:
        record(f"monitor_overhead_{'gpu' if out['machine'].get('gpus') else 'cpu'}_world{args.world}", out)


if __name__ == "__main__":
    main()
