"""Benchmark: peak memory of one DPO micro batch, answers' log-probabilities in chunks against full logits.

The case of issue 18's preference part: a Qwen2-architecture model with Qwen2.5's vocabulary
(151,936), hidden size 64, 2 layers, random weights, full fine-tuning (so a frozen reference
copy), fp32, ``pref_loss: sigmoid``, one micro batch of 2 pairs x 512 tokens (4 rows): the
reference's forward, the policy's forward, the loss and its backward, through the DPO stage
exactly as a run calls it. Each measurement runs in a fresh process (``--worker``), the two
paths alternating; the figure is the growth of the process's peak RSS over its RSS just
before the micro batch (the models, built and placed, are the same in both), beside the
whole process's peak and the planner's activation estimate for the same case.

Run: python bench/preference_memory.py [--quick] [--reps N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchlib import machine, median, record  # noqa: E402

MODEL = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=151936, max_position_embeddings=4096)
PAIRS, TOKENS, PROMPT = 2, 512, 128  # a micro batch of 2 pairs x 512 tokens, the first 128 the (masked) prompt


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def worker(chunked: bool, vocab: int, tokens: int) -> dict:
    """One DPO micro batch in this process; what its memory grew by."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ftui.runner.data import IGNORE, Batch
    from ftui.runner.stages.dpo import DPOStage

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**dict(MODEL, vocab_size=vocab)))
    cfg = SimpleNamespace(pref_beta=0.1, pref_loss="sigmoid", pref_ftx=0.0, dpo_label_smoothing=0.0, simpo_gamma=0.5,
                          finetuning_type="full", chunked_loss=chunked, enable_liger_kernel=False)
    stage = DPOStage(cfg, None)
    stage.keep_start(model)
    with torch.no_grad():  # the policy a little off its reference: a loss other than ln 2 a pair
        for p in model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    stage.prepare_model(model)
    engine = SimpleNamespace(name="single", info=SimpleNamespace(rank=0), prepare_frozen=lambda m: m, unwrap=lambda: model)
    stage.attach(engine)
    assert (stage.head is not None) == chunked and (stage.reference.head is not None) == chunked
    rows = 2 * PAIRS
    ids = torch.randint(0, vocab, (rows, tokens), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[:, :min(PROMPT, tokens // 4)] = IGNORE
    batch = Batch(ids, labels, torch.ones_like(ids), None, rows * tokens, 0, PAIRS)
    before, peak_before = rss_bytes(), peak_rss_bytes()
    start = time.perf_counter()
    out = stage.loss(model, batch, contextlib.nullcontext)  # fp32: the single engine's autocast
    out.total.backward()
    seconds = time.perf_counter() - start
    peak = peak_rss_bytes()
    return {"loss": out.total.item(), "rss_before_bytes": before, "peak_before_bytes": peak_before, "peak_bytes": peak,
            "micro_batch_bytes": peak - before, "seconds": seconds}


def planned_activations(chunked: bool, vocab: int, tokens: int) -> float:
    from ftui.plan.model_shape import ModelShape
    from ftui.plan.planner import estimate

    shape = ModelShape.from_config(dict(MODEL, vocab_size=vocab, model_type="qwen2", tie_word_embeddings=False))
    return estimate(shape, method="full", precision="fp32", micro_batch=PAIRS, seq_len=tokens, training_stage="dpo",
                    chunked_loss=chunked).activations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small vocabulary and rows, not recorded")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--worker", choices=["chunked", "full"], help=argparse.SUPPRESS)
    ap.add_argument("--vocab", type=int, default=MODEL["vocab_size"], help=argparse.SUPPRESS)
    ap.add_argument("--tokens", type=int, default=TOKENS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker == "chunked", args.vocab, args.tokens)))
        return
    vocab, tokens, reps = (8192, 128, 1) if args.quick else (MODEL["vocab_size"], TOKENS, args.reps)
    out = {"machine": machine(), "model": dict(MODEL, vocab_size=vocab, architecture="Qwen2ForCausalLM"),
           "case": f"dpo sigmoid, full fine-tuning (frozen reference copy), fp32, {PAIRS} pairs x {tokens} tokens",
           "measure": "peak RSS growth over the RSS just before the micro batch (fresh process per measurement)",
           "reps": []}
    for _ in range(reps):
        row = {}
        for name in ("chunked", "full"):
            proc = subprocess.run([sys.executable, __file__, "--worker", name, "--vocab", str(vocab), "--tokens", str(tokens)],
                                  capture_output=True, text=True, check=True)
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            row |= {f"{name}_{k}": v for k, v in result.items()}
            row[f"{name}_planned_activation_bytes"] = planned_activations(name == "chunked", vocab, tokens)
        row["micro_batch_ratio"] = row["chunked_micro_batch_bytes"] / row["full_micro_batch_bytes"]
        row["peak_ratio"] = row["chunked_peak_bytes"] / row["full_peak_bytes"]
        row["loss_rel_diff"] = abs(row["chunked_loss"] - row["full_loss"]) / abs(row["full_loss"])
        out["reps"].append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    out["median"] = {k: median([r[k] for r in out["reps"]]) for k in out["reps"][0]}
    print(json.dumps(out, indent=1))
    if not args.quick:
        record("preference_memory_cpu", out)


if __name__ == "__main__":
    main()
