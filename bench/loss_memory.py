"""Benchmark: peak memory and tokens/s of the chunked loss against full logits, large vocabulary.

The case of issue 18: a model with Qwen2.5's vocabulary (151,936), hidden size 64, 2 layers,
full fine-tuning, fp32, packing, micro batch 4 x cutoff_len 1024, where full logits (4,096
tokens x 151,936 x 4 bytes = 2.5 GB per copy) are almost all of the memory. Runs alternate
(chunked_loss true / false) so a busy machine slows both alike; the peak is the ranks'
``mem[].peak`` (RSS on the CPU, ``max_memory_allocated`` on a GPU), tokens/s as in
throughput.py. The planner's estimate is recorded beside each.

``--against DIR`` compares the chunked loss of this checkout with that of another (the code
before a change, e.g. a ``git worktree``), alternating, instead of chunks against full logits;
recorded as ``loss_memory_<device>_against.json``.

Run: python bench/loss_memory.py [--quick] [--reps N] [--steps N] [--device cpu|cuda] [--against DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchlib import ftui_steps, machine, median, model_dir, record, run_ftui, tokens_per_s, varied_dataset, write_config  # noqa: E402

MODEL = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=151936, max_position_embeddings=4096)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small vocabulary and batch, not recorded")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--against", type=Path, default=None, help="another ftui checkout: its chunked loss against this one's")
    args = ap.parse_args()
    from ftui.plan.model_shape import ModelShape
    from ftui.plan.planner import estimate_for
    from ftui.config.load import parse_config

    model = dict(MODEL, vocab_size=8192) if args.quick else MODEL
    steps, reps, warmup = (4, 1, 1) if args.quick else (args.steps, args.reps, 3)
    micro, cutoff = (2, 256) if args.quick else (4, 1024)
    out = {"machine": machine(), "model": model, "micro_batch": micro, "cutoff_len": cutoff, "precision": "fp32",
           "packing": True, "steps": steps, "reps": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mdir = model_dir(tmp / "model", **model)
        data = varied_dataset(tmp / "varied.json", 1500, max_words=cutoff)
        shape = ModelShape.from_config(json.loads((mdir / "config.json").read_text()))
        # (name, chunked_loss, the checkout whose ftui runs: None for this one)
        paths = [("chunked", True, None), ("full_logits", False, None)]
        if args.against is not None:
            paths = [("chunked", True, None), ("against_chunked", True, args.against.resolve())]
            out["against"] = str(args.against)
        for rep in range(reps):
            row = {}
            for name, chunked, tree in paths:
                cfg = dict(model_name_or_path=str(mdir), model_init="random", finetuning_type="full", dataset=str(data),
                           cutoff_len=cutoff, per_device_train_batch_size=micro, packing=True, learning_rate=1e-4,
                           max_steps=steps, logging_steps=1, save_strategy="no", seed=42, device=args.device,
                           chunked_loss=chunked, output_dir=str(tmp / "runs"), run_name=f"{name}-{rep}")
                run = run_ftui(write_config(tmp / f"{name}{rep}.yaml", cfg), cwd=tree)
                times, tokens, events = ftui_steps(run)
                row[f"{name}_peak_bytes"] = max(m["peak"] for e in events for m in e["mem"])
                row[f"{name}_tokens_per_s"] = tokens_per_s(times, tokens, warmup)
                row[f"{name}_planned_bytes"] = estimate_for(parse_config(cfg)[0], shape).total
                shutil.rmtree(run)  # its final/ is not needed: keep the disk small
            other = paths[1][0]
            row["peak_ratio"] = row["chunked_peak_bytes"] / row[f"{other}_peak_bytes"]
            row["speed_ratio"] = row["chunked_tokens_per_s"] / row[f"{other}_tokens_per_s"]
            out["reps"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    out["median"] = {k: median([r[k] for r in out["reps"]]) for k in out["reps"][0]}
    print(json.dumps(out, indent=1))
    if not args.quick:
        record(f"loss_memory_{'cpu' if args.device == 'cpu' else 'gpu'}{'_against' if args.against else ''}", out)


if __name__ == "__main__":
    main()
