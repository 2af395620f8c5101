"""Benchmark: ftui's runner against a plain transformers Trainer, in real tokens/s.

Same random-weight model, same dataset (varied lengths: many short examples, a long tail),
same precision, micro batch, learning rate and number of steps. Each repetition runs, one
after another: the baseline (``bench/baseline_trainer.py``, padding to the batch's
longest), ftui with padding, and ftui with ``packing: true``. Ratios are taken inside a
repetition (so a noisy neighbour slows both sides of a ratio alike) and the median over the
repetitions is reported. Modes: ``single`` (one process) and ``ddp`` (two processes; gloo
on CPU, NCCL on GPUs).

Run: python bench/throughput.py [--quick] [--reps N] [--steps N] [--modes single,ddp]
     python bench/throughput.py --shape qwen2.5-1.5b --precision bf16 --cutoff 2048 --modes single   (on a GPU)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (SHAPES, ftui_steps, machine, median, model_dir, record, run_baseline, run_ftui, tokens_per_s,  # noqa: E402
                      varied_dataset, write_config)

MODEL = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny model, few steps, one repetition, not recorded")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--modes", default="single,ddp")
    ap.add_argument("--shape", default=None, choices=sorted(SHAPES), help="a named model shape instead of the CPU model")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--cutoff", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--tag", default="", help="suffix of the result file")
    args = ap.parse_args()
    steps, reps, warmup = (6, 1, 1) if args.quick else (args.steps, args.reps, 5)
    cutoff, batch = (128, 4) if args.quick else (512, 8)
    cutoff, batch = args.cutoff or cutoff, args.batch or batch
    model_shape = SHAPES[args.shape] if args.shape else ({} if args.quick else MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mdir = model_dir(tmp / "model", **model_shape)
        data = varied_dataset(tmp / "varied.json", 200 if args.quick else 2000, max_words=cutoff // 2 if args.quick else max(700, cutoff))
        common = dict(model_name_or_path=str(mdir), model_init="random", finetuning_type="full", dataset=str(data),
                      cutoff_len=cutoff, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
                      learning_rate=1e-4, max_steps=steps, lr_scheduler_type="cosine", logging_steps=1, save_strategy="no",
                      seed=42, device="auto", output_dir=str(tmp / "runs"),
                      bf16=args.precision == "bf16", fp16=args.precision == "fp16")
        results = {"machine": machine(), "model": args.shape or (MODEL if not args.quick else "demo"), "cutoff_len": cutoff,
                   "precision": args.precision,
                   "micro_batch": batch, "steps": steps, "warmup_steps_not_counted": warmup, "modes": {}}
        for mode in args.modes.split(","):
            world = 2 if mode == "ddp" else 1
            env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // world)))
            cfgs = {}
            for name, packing in (("ftui_padded", False), ("ftui_packed", True)):  # same steps, same batch rows
                cfgs[name] = write_config(tmp / f"{mode}-{name}.yaml", dict(common, packing=packing, nproc_per_node=world,
                                                                          engine="ddp" if world > 1 else "single",
                                                                          run_name=f"{mode}-{name}"))
            base_cfg = write_config(tmp / f"{mode}-baseline.yaml", common)
            reps_out = []
            for rep in range(reps):
                row = {}
                t, n = run_baseline(base_cfg, tmp / f"{mode}-baseline-{rep}", world, env)
                row["baseline"] = tokens_per_s(t, n, warmup)
                for name, cfg in cfgs.items():
                    t, n, ftui_last = ftui_steps(run_ftui(cfg, env))
                    row[name] = tokens_per_s(t, n, warmup)
                row["mfu_packed"] = _median_mfu(ftui_last)
                row["padded_vs_baseline"] = row["ftui_padded"] / row["baseline"]
                row["packed_vs_baseline"] = row["ftui_packed"] / row["baseline"]
                reps_out.append(row)
                print(f"[{mode} rep {rep + 1}/{reps}] " + ", ".join(f"{k} {v:.3g}" for k, v in row.items() if v is not None),
                      file=sys.stderr, flush=True)
            results["modes"][mode] = {
                "world_size": world,
                "real_tokens_per_s_median": {k: median([r[k] for r in reps_out]) for k in ("baseline", "ftui_padded", "ftui_packed")},
                "ratio_median": {k: median([r[k] for r in reps_out]) for k in ("padded_vs_baseline", "packed_vs_baseline")},
                "repetitions": reps_out,
            }
    print(json.dumps(results, indent=1))
    if not args.quick:
        suffix = "" if args.modes == "single,ddp" else "_" + args.modes.replace(",", "_")
        if args.shape:
            suffix += f"_{args.shape}_{args.precision}"
        record("throughput_" + ("cpu" if not results["machine"].get("gpus") else "gpu") + suffix + args.tag, results)


def _median_mfu(steps: list[dict]) -> float | None:
    vals = [s["mfu"] for s in steps[5:] if s.get("mfu")]
    return median(vals) if vals else None


if __name__ == "__main__":
    main()
