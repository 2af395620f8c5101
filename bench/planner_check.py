"""Benchmark: the "will it fit?" planner against measured peaks.

On CPU the runner reports each rank's peak resident memory (``mem[].peak`` of its step
events). That includes the Python process itself (interpreter, torch, tokenizer, data),
so every configuration is run twice: with the benchmark model and with the tiny demo
model, same engine, world size and data. The difference of the peaks is what the model's
weights, gradients, optimizer states and activations cost; the planner's estimate for the
benchmark model (less its estimate for the demo model) is compared with it. The training
processes run with a fixed glibc mmap threshold, so that RSS follows live memory (see
below). On a GPU the peak is ``torch.cuda.max_memory_allocated`` and no floor is needed (the
script still subtracts the demo's, which is small).

Run: python bench/planner_check.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchlib import SHAPES, ftui_steps, machine, model_dir, record, run_ftui, varied_dataset, write_config  # noqa: E402

from ftui.plan.model_shape import ModelShape  # noqa: E402
from ftui.plan.planner import GIB, estimate_for  # noqa: E402
from ftui.config.load import parse_config  # noqa: E402

# About 85 M parameters: big enough that the training state dwarfs the process floor.
MODEL = dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
             max_position_embeddings=1024)
CASES = [  # (name, overrides)
    ("full fp32 single", dict(finetuning_type="full", engine="single", nproc_per_node=1)),
    ("full fp32 gradient checkpointing", dict(finetuning_type="full", engine="single", nproc_per_node=1, gradient_checkpointing=True)),
    ("lora fp32 single", dict(finetuning_type="lora", lora_rank=16, engine="single", nproc_per_node=1)),
    ("full bf16 single", dict(finetuning_type="full", engine="single", nproc_per_node=1, bf16=True)),
    ("full pure_bf16 single", dict(finetuning_type="full", engine="single", nproc_per_node=1, pure_bf16=True)),
    ("full pure_bf16 fsdp x2", dict(finetuning_type="full", engine="fsdp", nproc_per_node=2, pure_bf16=True)),
    ("full fp32 ddp x2", dict(finetuning_type="full", engine="ddp", nproc_per_node=2)),
    ("full fp32 zero2 x2", dict(finetuning_type="full", engine="zero2", nproc_per_node=2)),
    ("full fp32 zero3 x2", dict(finetuning_type="full", engine="zero3", nproc_per_node=2)),
    ("full fp32 fsdp x2", dict(finetuning_type="full", engine="fsdp", nproc_per_node=2)),
    # Qwen2.5's vocabulary on a tiny body, 4 x 1024 tokens: the loss is the largest item
    ("full fp32 Qwen vocabulary chunked loss", dict(finetuning_type="full", engine="single", nproc_per_node=1)),
    ("full fp32 Qwen vocabulary full logits", dict(finetuning_type="full", engine="single", nproc_per_node=1,
                                                       chunked_loss=False)),
    # rows of 1,024 tokens, where eager attention's kept softmax (heads x length a token) is the
    # largest activation: flash_attn disabled against SDPA (--cases 1024 --tag _attention)
    ("full fp32 sdpa 1024", dict(finetuning_type="full", engine="single", nproc_per_node=1, cutoff_len=1024)),
    ("full fp32 eager attention 1024", dict(finetuning_type="full", engine="single", nproc_per_node=1, cutoff_len=1024,
                                            flash_attn="disabled")),
]  # (bf16 eager attention is not a case: the CPU's bf16 backward of it ran over 16 minutes without finishing a step)
LARGE_VOCAB = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   vocab_size=151936, max_position_embeddings=2048)


def peak_per_rank(run: Path) -> float:
    """The largest peak any rank reached, over the run's step events."""
    _, _, steps = ftui_steps(run)
    return max(m["peak"] for ev in steps for m in ev.get("mem", []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one case with a small model, not recorded")
    ap.add_argument("--cases", default="", help="only the cases whose name contains one of these (comma-separated)")
    ap.add_argument("--shape", default=None, choices=sorted(SHAPES), help="a named model shape (on a GPU: device auto)")
    ap.add_argument("--tag", default="", help="suffix of the result file")
    args = ap.parse_args()
    wanted = [w for w in args.cases.split(",") if w]
    cases = CASES[:1] if args.quick else [c for c in CASES if not wanted or any(w in c[0] for w in wanted)]
    model = dict(MODEL, hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2) if args.quick else MODEL
    if args.shape:
        model = SHAPES[args.shape]
    micro, cutoff = 4, 256
    out = {"machine": machine(), "model": model, "micro_batch": micro, "cutoff_len": cutoff, "packing": True, "cases": []}
    # glibc keeps freed blocks below its (dynamic, up to 32 MiB) mmap threshold in the heap,
    # so a process's RSS stays at its high-water mark of *fragmented* memory, well above what
    # tensors held. A fixed 128 KiB threshold returns every freed tensor to the system, so
    # peak RSS measures live memory, as torch.cuda.max_memory_allocated does on a GPU.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    out["malloc_mmap_threshold"] = 131072
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        big = model_dir(tmp / "bench-model", **model)
        large_vocab = model_dir(tmp / "large-vocab-model", **LARGE_VOCAB)
        small = model_dir(tmp / "demo-model", max_position_embeddings=2048)  # the floor of the 1024-token cases too
        data = varied_dataset(tmp / "data.json", 400, max_words=400, seed=1)
        for name, over in cases:
            row = {"case": name}
            vocab_case = "vocabulary" in name
            over = dict(over)
            row["model"], row["cutoff_len"] = (LARGE_VOCAB, 1024) if vocab_case else (model, over.pop("cutoff_len", cutoff))
            for label, mdir in (("model", large_vocab if vocab_case else big), ("floor", small)):
                cfg = dict(model_name_or_path=str(mdir), model_init="random", dataset=str(data), cutoff_len=row["cutoff_len"], packing=True,
                           per_device_train_batch_size=micro, max_steps=3, logging_steps=1, save_strategy="no", learning_rate=1e-4,
                           device="auto" if args.shape else "cpu", output_dir=str(tmp / "runs"), run_name=f"{label}-{name.replace(' ', '-')}", **over)
                run = run_ftui(write_config(tmp / f"{label}.yaml", cfg), env)
                row[f"{label}_peak_bytes"] = peak_per_rank(run)
                rc, _ = parse_config(cfg, "bench")
                row[f"{label}_estimate_bytes"] = estimate_for(rc, ModelShape.from_config(json.loads((mdir / "config.json").read_text()))).total
            row["measured_gib"] = (row["model_peak_bytes"] - row["floor_peak_bytes"]) / GIB
            row["estimated_gib"] = (row["model_estimate_bytes"] - row["floor_estimate_bytes"]) / GIB
            row["error"] = row["estimated_gib"] / row["measured_gib"] - 1
            out["cases"].append(row)
            print(f"{name}: measured {row['measured_gib']:.2f} GiB, estimated {row['estimated_gib']:.2f} GiB, error {100 * row['error']:+.1f}%",
                  file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))
    if not args.quick:
        record("planner_check_" + ("gpu" if out["machine"].get("gpus") else "cpu") + args.tag, out)


if __name__ == "__main__":
    main()
