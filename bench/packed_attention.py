"""Where a packed step's time goes on a GPU: attention kernels and the loss, measured alone.

For a named shape (random weights, on CUDA, bf16 autocast over fp32 weights as ftui trains),
one micro batch of ``--batch`` packed rows of ``--cutoff`` tokens (examples of varied length,
positions restarting at each, as ftui's packing makes them), times forward + backward of:

- the model with ftui's ``flash_attn: fa2`` (FlashAttention-2 over each example, torch's varlen
  kernel, the examples' cumulative lengths given as ftui's collator gives them),
- the model with ``sdpa`` and the packed ``position_ids`` (transformers builds a block-diagonal
  causal mask: SDPA cannot use its flash kernel with a mask),
- the same with ``flex_attention`` (a block mask that skips blocks across examples),
- ``sdpa`` without ``position_ids`` (plain causal attention across the whole row: the flash
  kernel; the wrong attention for packed rows, shown only as the lower bound),

and the loss alone from the last hidden states: ftui's chunks, Liger's fused kernel, full logits.
``--precision bf16,pure_bf16`` times the model cases also with bf16 weights and no autocast
(``pure_bf16``: its cases are named ``<case>_pure_bf16``). ``--profile`` adds, for the first
model case in each precision, torch.profiler's table of one forward + backward (the top
operators and kernels by GPU self time), to see what the time beyond the matrix products is.
Median of ``--iters`` after ``--warmup``; prints JSON, recorded under results/ unless ``--quick``
(and with ``--out``, rewritten there after every case, so a device call cut by its limit keeps
the timings and profiles that finished).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchlib import SHAPES, machine, median, profile_table, record  # noqa: E402


def packed_positions(rows: int, width: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(rows):
        pos: list[int] = []
        while len(pos) < width:
            n = min(width - len(pos), max(8, int(rng.lognormvariate(5.0, 0.8))))
            pos += list(range(n))
        out.append(pos)
    return out


def timed(fn, warmup: int, iters: int) -> float:
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return median(times)


def main() -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ftui.runner import loss as L
    from ftui.runner import attention
    from ftui.runner.attention import attn_implementation

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen2.5-1.5b", choices=sorted(SHAPES))
    ap.add_argument("--cutoff", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--attn", default="fa2_packed,sdpa_packed,flex_packed,sdpa_causal")
    ap.add_argument("--precision", default="bf16,pure_bf16", help="bf16 (autocast over fp32 weights), pure_bf16 (bf16 weights)")
    ap.add_argument("--profile", action="store_true", help="torch.profiler's table of the first model case in each precision")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=None,
                    help="also write the JSON to this file after every case (a run cut by a time limit keeps what finished)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("packed_attention.py needs a CUDA GPU")
    dev = torch.device("cuda")
    shape = dict(SHAPES[args.shape])
    vocab = shape.pop("vocab_size", 32000)
    cfg = LlamaConfig(vocab_size=vocab, **shape)
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (args.batch, args.cutoff), device=dev)
    rows = packed_positions(args.batch, args.cutoff)
    pos = torch.tensor(rows, device=dev)
    starts = [r * args.cutoff + i for r, row in enumerate(rows) for i, p in enumerate(row) if p == 0]
    bounds = starts + [args.batch * args.cutoff]
    cu = torch.tensor(bounds, dtype=torch.int32, device=dev)
    longest = max(b - a for a, b in zip(bounds, bounds[1:]))  # as ftui's collator gives it (FlashAttention's grid)
    autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16)  # noqa: E731
    out = {"machine": machine(), "shape": args.shape, "cutoff_len": args.cutoff, "micro_batch": args.batch,
           "examples_per_row": float((pos == 0).sum()) / args.batch, "fwd_bwd_s": {}, "loss_fwd_bwd_s": {}, "profile": {}}
    no_autocast = contextlib.nullcontext

    def save() -> None:
        if args.out is not None:
            args.out.write_text(json.dumps(out, indent=1))

    cases = [(name, precision) for precision in filter(None, args.precision.split(",")) for name in filter(None, args.attn.split(","))]
    profiled: set[str] = set()  # the precisions whose first model case has its profiler table
    for name, precision in cases:
        impl = {"flex": "flex_attention", "fa2": attn_implementation("fa2")}.get(name.split("_")[0], "sdpa")
        pure = precision == "pure_bf16"
        case = f"{name}_pure_bf16" if pure else name
        model = LlamaForCausalLM._from_config(cfg, attn_implementation=impl).to(dev, dtype=torch.bfloat16 if pure else torch.float32)
        head = L.install_chunked_loss(model)
        kwargs = {"input_ids": ids} if name.endswith("causal") else {"input_ids": ids, "position_ids": pos}
        if name.startswith("fa2"):  # the examples' lengths, as ftui's collator counts them for flash_attn fa2
            kwargs.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=longest, max_length_k=longest)
            attention.FALLBACKS.clear()

        def step():
            model.zero_grad(set_to_none=True)
            L.micro_batch_loss(model, head, kwargs, ids, no_autocast if pure else autocast).backward()
        try:
            out["fwd_bwd_s"][case] = timed(step, args.warmup, args.iters)
        except Exception as exc:  # a kernel this torch lacks is a reading too
            out["fwd_bwd_s"][case] = f"{type(exc).__name__}: {str(exc)[:300]}"
        if args.profile and isinstance(out["fwd_bwd_s"][case], float) and precision not in profiled:
            profiled.add(precision)
            try:
                out["profile"][case] = profile_table(step)
            except Exception as exc:  # the timing stands; say why there is no table
                out["profile"][case] = f"{type(exc).__name__}: {str(exc)[:300]}"
        if name.startswith("fa2"):  # what ran: the kernel's way with grouped heads, and any fallback to SDPA
            out.setdefault("fa2", {})[case] = {"attention": attention.describe(), "fallbacks": sorted(attention.FALLBACKS)}
        print(case, out["fwd_bwd_s"][case], file=sys.stderr, flush=True)
        save()
        model = head = None
        torch.cuda.empty_cache()
    hidden = torch.randn(args.batch, args.cutoff, cfg.hidden_size, device=dev, requires_grad=True)
    proj = torch.nn.Linear(cfg.hidden_size, vocab, bias=False, device=dev)
    for name in ("chunks", "liger", "full_logits"):
        head = None
        proj_model = torch.nn.Module()
        proj_model.lm_head = proj
        proj_model.get_output_embeddings = lambda: proj
        if name != "full_logits":
            head = L.install_chunked_loss(proj_model, liger=name == "liger")

        def loss_step():
            proj.zero_grad(set_to_none=True)
            hidden.grad = None
            with autocast():
                if head is None:
                    value = L.token_loss_sum(proj(hidden), ids)
                else:
                    head._ftui_labels = ids
                    value = proj(hidden).float()
                    head._ftui_labels = None
            value.backward()
        try:
            out["loss_fwd_bwd_s"][name] = timed(loss_step, args.warmup, args.iters)
        except Exception as exc:
            out["loss_fwd_bwd_s"][name] = f"{type(exc).__name__}: {str(exc)[:300]}"
        print(name, out["loss_fwd_bwd_s"][name], file=sys.stderr, flush=True)
        save()
        proj.forward = torch.nn.Linear.forward.__get__(proj)
    print(json.dumps(out, indent=1))
    if not args.quick:
        gpu = torch.cuda.get_device_name().replace(" ", "_").lower()
        record(f"packed_attention_{gpu}_{args.shape}", out)


if __name__ == "__main__":
    main()
