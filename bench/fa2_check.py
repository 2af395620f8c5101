"""flash_attn fa2 against SDPA on a CUDA GPU: the same model and packed batch, loss and every
gradient, before any speed figure of fa2 is believed.

On the CPU, tests/test_flash_attn.py checks everything around torch's varlen kernel with a
reference in its place; this runs the kernel itself (torch's FlashAttention-2), through ftui's
collator and attention function, on a small Qwen2 shape (grouped K/V heads, a sliding-window
layer), in pure bf16 and in bf16 autocast over fp32 weights, and records the largest relative
differences, what ran (``attention.describe()``: how grouped heads went in) and any fallback:

    python bench/fa2_check.py --out DIR      # DIR/fa2_check.json; exits 1 if a difference is too large

Every layer of every fa2 forward must reach the kernel (no fallback: that would compare SDPA
with itself), and the differences stay under bounds set between bf16's rounding and what a
wrong attention gives (LOSS_REL, GRAD_REL below).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Measured on the CPU with this shape and data: bf16's rounding moves the loss by 4e-6 to 4e-5
# and the worst gradient element by 0.03 of the largest; a lost sliding window or attention
# across examples moves the loss by 8e-4 to 2e-3 and the gradients by 2 to 3 (random weights:
# attention barely changes the loss, much the gradients). On the GPU other kernels round
# otherwise: the bounds leave room for that and stay below what a wrong attention gives.
LOSS_REL = 4e-4
GRAD_REL = 0.3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ftui.runner import attention
    from ftui.runner.data import IGNORE, Collator, Example, pack_examples
    from ftui.runner.loss import token_loss_sum

    if not torch.cuda.is_available():
        sys.exit("fa2_check.py needs a CUDA GPU")
    fa2 = attention.attn_implementation("fa2")  # registers it, resolves torch's kernel (and checks grouped heads)
    kernel = attention._kernel()
    if kernel is None:
        sys.exit("fa2_check.py: this torch has no varlen FlashAttention-2 kernel (torch >= 2.10)")
    calls: list[int] = []

    def counted(*a, **k):  # every layer of every fa2 forward must reach the kernel
        calls.append(1)
        return kernel(*a, **k)

    counted.__dict__.update(kernel.__dict__)
    attention._KERNEL[0] = counted

    rng = random.Random(0)
    examples = []
    for _ in range(48):
        n = rng.randint(16, 300)
        ids = [rng.randrange(1, 4096) for _ in range(n)]
        examples.append(Example(ids, [IGNORE] * (n // 3) + ids[n // 3:], real_tokens=n))
    rows = pack_examples(examples, 1024)[:4]
    dev = torch.device("cuda")
    batches = {lengths: Collator(0, pad_to_multiple=8, pin_memory=True, sequence_lengths=lengths)(rows).to(dev)
               for lengths in (False, True)}
    cfg = Qwen2Config(vocab_size=4096, hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                      num_key_value_heads=2, use_sliding_window=True, sliding_window=64, max_window_layers=2)
    out: dict = {"rows": len(rows), "tokens": batches[True].input_ids.numel(), "sequences": len(batches[True].cu_seqlens) - 1}
    ok = True
    for precision in ("pure_bf16", "bf16_autocast"):
        results = {}
        for impl in ("sdpa", fa2):
            torch.manual_seed(0)
            model = Qwen2ForCausalLM._from_config(cfg, attn_implementation=impl)
            model = model.to(dev, dtype=torch.bfloat16 if precision == "pure_bf16" else torch.float32)
            batch = batches[impl != "sdpa"]
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision != "pure_bf16"):
                loss = token_loss_sum(model(**batch.model_inputs(), use_cache=False).logits, batch.labels)
            loss.backward()
            results[impl] = (loss.item(), {n: p.grad.float() for n, p in model.named_parameters()})
        (ref_loss, ref_grads), (loss, grads) = results["sdpa"], results[attention.IMPLEMENTATION]
        worst = max(((grads[n] - g).abs().max() / g.abs().max().clamp(min=1e-12)).item() for n, g in ref_grads.items())
        row = {"loss_sdpa": ref_loss, "loss_fa2": loss, "loss_rel": abs(loss - ref_loss) / abs(ref_loss), "grad_rel_max": worst,
               "kernel_calls": len(calls)}
        row["ok"] = row["loss_rel"] <= LOSS_REL and worst <= GRAD_REL and len(calls) == cfg.num_hidden_layers
        calls.clear()
        ok = ok and row["ok"]
        out[precision] = row
        print(precision, row, file=sys.stderr, flush=True)
    out["attention"] = attention.describe()
    out["fallbacks"] = sorted(attention.FALLBACKS)  # none expected: a fallback would be SDPA against SDPA
    out["ok"] = ok = ok and not attention.FALLBACKS
    text = json.dumps(out, indent=1)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fa2_check.json").write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
