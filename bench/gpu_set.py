"""The GPU benchmark set (issue 18): one command, every figure that needs a GPU, one file.

On a CUDA machine, for a named model shape with random weights (no download):

    python bench/gpu_set.py --shape qwen2.5-1.5b          # cutoff 2048, micro batch 4, 24 steps

runs, one after another and each to its end, the plain ``transformers.Trainer`` script
(``baseline_trainer.py``, bf16, padding to each batch's longest) and ftui in these cases:

    bf16 packed · bf16 padded · fp16 packed (GradScaler) · fp32 packed (TF32)
    bf16 packed with torch_compile · with Liger · with both · with full logits (chunked_loss off)
    bf16 packed with gradient checkpointing · LoRA r16 (for the planner)
    pure_bf16 packed (bf16 weights, no autocast) · the same with torch_compile and Liger,
    and with micro batch 8 · with torch_compile alone at micro batch 8
    flash_attn fa2 (FlashAttention-2 over each example): bf16 packed · pure_bf16 packed
    with torch_compile (and Liger) at micro batch 8 · with Liger alone (no compile, as DeepSpeed)
    on every GPU (``--nproc``, issue 41): DDP and FSDP2 with pure bf16, compile, Liger and fa2;
    ZeRO-2 and ZeRO-3 with bf16, Liger and fa2; micro batch 8 per GPU

and records for each: real (non-padding) tokens/s after the warm-up steps, MFU, the time a
step waited for data, the peak ``torch.cuda.max_memory_allocated`` of the rank against
``ftui plan``'s estimate for the same config, and the ratio to the Trainer's tokens/s (same
run, same data, same steps). The result goes to ``results/gpu_set_<gpu>_<shape>.json``.
``--cases`` picks some (names as printed); ``--quick`` runs two tiny cases on any machine
(the test suite does, so the script cannot rot). Nothing here is a timed assertion.

The runs write no checkpoint (``save_strategy: no``; a 1.5 B full fine-tune's is 18 GB, most
of a case's time on the first H100), and the result file is rewritten after every case, so
a device call cut by its time limit keeps the cases it finished (``"finished": false``); a
SIGTERM (``timeout``) also kills the job of the case in progress.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchlib import SHAPES, machine, model_dir, record, run_baseline, tokens_per_s, varied_dataset, write_config  # noqa: E402
from gpu_check import gib, planned_bytes, run_case  # noqa: E402

BF16 = dict(bf16=True, fp16=False)
CASES: dict[str, dict[str, Any]] = {  # name -> ftui overrides (the Trainer is its own case)
    "bf16_packed": dict(BF16, packing=True),
    "bf16_padded": dict(BF16, packing=False),
    "fp16_packed": dict(bf16=False, fp16=True, packing=True),
    "fp32_packed": dict(bf16=False, fp16=False, packing=True),
    "bf16_packed_compile": dict(BF16, packing=True, torch_compile=True),
    "bf16_packed_liger": dict(BF16, packing=True, enable_liger_kernel=True),
    "bf16_packed_compile_liger": dict(BF16, packing=True, torch_compile=True, enable_liger_kernel=True),
    "bf16_packed_full_logits": dict(BF16, packing=True, chunked_loss=False),
    "bf16_packed_checkpointing": dict(BF16, packing=True, gradient_checkpointing=True),
    "bf16_packed_lora": dict(BF16, packing=True, finetuning_type="lora", lora_rank=16),
    # bf16 weights, gradients and moments, no autocast (LLaMA-Factory's pure_bf16): the lever
    # the H100 profile pointed at (fp32 master weights' casts and fp32 passes)
    "pure_bf16_packed": dict(bf16=False, fp16=False, pure_bf16=True, packing=True),
    "pure_bf16_packed_compile_liger": dict(bf16=False, fp16=False, pure_bf16=True, packing=True, torch_compile=True,
                                           enable_liger_kernel=True),
    # twice the tokens a step (micro batch 8): the optimizer step, clipping and the step's
    # fixed costs spread over 16k tokens (the MFU target fixes cutoff_len, not the batch)
    "pure_bf16_packed_compile_liger_mb8": dict(bf16=False, fp16=False, pure_bf16=True, packing=True, torch_compile=True,
                                               enable_liger_kernel=True, per_device_train_batch_size=8),
    # compile alone at micro batch 8 (ftui's own loss chunks, transformers' layers compiled
    # whole instead of around Liger's Triton kernels): whether Liger's layer kernels help or
    # cost once compile fuses the same operations
    "pure_bf16_packed_compile_mb8": dict(bf16=False, fp16=False, pure_bf16=True, packing=True, torch_compile=True,
                                         per_device_train_batch_size=8),
    # flash_attn fa2: FlashAttention-2 over each packed example (torch's varlen kernel) instead
    # of SDPA's memory-efficient kernel over whole rows with a block mask and repeated K/V heads
    "bf16_packed_fa2": dict(BF16, packing=True, flash_attn="fa2"),
    "pure_bf16_packed_compile_liger_mb8_fa2": dict(bf16=False, fp16=False, pure_bf16=True, packing=True, torch_compile=True,
                                                   enable_liger_kernel=True, per_device_train_batch_size=8, flash_attn="fa2"),
    "pure_bf16_packed_compile_mb8_fa2": dict(bf16=False, fp16=False, pure_bf16=True, packing=True, torch_compile=True,
                                             per_device_train_batch_size=8, flash_attn="fa2"),
    # bf16 weights without torch_compile, with Liger and fa2 at micro batch 8: the single-GPU step of
    # what DeepSpeed runs (its bf16 module; ftui refuses pure_bf16 and torch_compile under DeepSpeed),
    # which bench/multi_gpu_plan.py scales ZeRO-2 and ZeRO-3 from
    "pure_bf16_packed_liger_mb8_fa2": dict(bf16=False, fp16=False, pure_bf16=True, packing=True, enable_liger_kernel=True,
                                           per_device_train_batch_size=8, flash_attn="fa2"),
    # several GPUs (issue 41 item 5), on every GPU of the machine (--nproc): each engine with the
    # fastest settings ftui lets it run, full fine-tuning, packed, micro batch 8 per GPU
    "ddp_pure_bf16_packed_compile_liger_mb8_fa2": dict(engine="ddp", bf16=False, fp16=False, pure_bf16=True, packing=True,
                                                       torch_compile=True, enable_liger_kernel=True, per_device_train_batch_size=8,
                                                       flash_attn="fa2"),
    "fsdp_pure_bf16_packed_compile_liger_mb8_fa2": dict(engine="fsdp", bf16=False, fp16=False, pure_bf16=True, packing=True,
                                                        torch_compile=True, enable_liger_kernel=True, per_device_train_batch_size=8,
                                                        flash_attn="fa2"),
    "zero2_bf16_packed_liger_mb8_fa2": dict(BF16, engine="zero2", packing=True, enable_liger_kernel=True, per_device_train_batch_size=8,
                                            flash_attn="fa2"),
    "zero3_bf16_packed_liger_mb8_fa2": dict(BF16, engine="zero3", packing=True, enable_liger_kernel=True, per_device_train_batch_size=8,
                                            flash_attn="fa2"),
}
SEVERAL_GPUS = [name for name, case in CASES.items() if case.get("engine", "single") != "single"]
TRAINER = "trainer_bf16_padded"
QUICK = [TRAINER.replace("bf16", "fp32"), "fp32_packed"]


def stop_live_runs(root: Path, pattern: str = "*/*") -> None:
    """Kills the job of a case cut short (``timeout``'s SIGTERM, the device call's limit, or the
    case's own ``--timeout``): an ftui job runs in a session of its own and would otherwise go on
    training on the GPUs after this script is gone, or under the next case."""
    from ftui.jobs.launch import stop_run

    for run in root.glob(pattern):
        with contextlib.suppress(Exception):
            stop_run(run, force=True)


def save_random_weights(mdir: Path) -> None:
    """Random weights written once, so that no case spends its start-up initialising 1.5 B
    parameters and writing them to its run directory (``model_init: random`` would)."""
    code = ("import sys, torch; from transformers import AutoConfig, AutoModelForCausalLM; torch.manual_seed(0); "
            "AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(sys.argv[1])).save_pretrained(sys.argv[1])")
    subprocess.run([sys.executable, "-c", code, str(mdir)], check=True, capture_output=True)  # stdout is the JSON's


def trainer_case(name: str, common: dict[str, Any], tmp: Path, warmup: int) -> dict[str, Any]:
    precision = name.split("_")[1]
    cfg = write_config(tmp / f"{name}.yaml", dict(common, bf16=precision == "bf16", fp16=precision == "fp16"))
    out = tmp / name
    times, tokens = run_baseline(cfg, out, 1)
    peak = json.loads(Path(f"{out}.rank0.json").read_text()).get("peak_allocated")
    return {"status": "completed", "steps": len(times), "tokens_per_s": tokens_per_s(times, tokens, warmup), "peak_bytes": peak}


def ftui_case(name: str, common: dict[str, Any], tmp: Path, warmup: int, timeout: float, nproc: int = 1) -> dict[str, Any]:
    settings = dict(CASES[name], nproc_per_node=nproc) if name in SEVERAL_GPUS else CASES[name]
    cfg = dict(common, **settings, run_name=name, output_dir=str(tmp / "runs" / name))
    # the case's settings go with its figures: tests/test_plan_h100_peaks.py replays the peak
    # against the planner with what this run used, whatever CASES says later
    row: dict[str, Any] = {"settings": settings, "planned_bytes": planned_bytes(cfg)}
    try:
        row.update(run_case(write_config(tmp / f"{name}.yaml", cfg), Path(cfg["output_dir"]), warmup, timeout))
    finally:  # a 1.5 B run writes GBs (its final weights): keep the disk free
        stop_live_runs(Path(cfg["output_dir"]), "*")  # a case its --timeout cut trains on otherwise
        shutil.rmtree(cfg["output_dir"], ignore_errors=True)
    if row.get("peak_bytes") and row.get("planned_bytes"):
        row["plan_over_measured"] = row["planned_bytes"] / row["peak_bytes"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen2.5-1.5b", choices=sorted(SHAPES))
    ap.add_argument("--cases", default=",".join([TRAINER, *CASES]), help="comma-separated case names")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--cutoff", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=900, help="seconds a case may take")
    ap.add_argument("--nproc", type=int, default=0, help="processes (GPUs) of the several-GPU cases (default: every GPU nvidia-smi lists)")
    ap.add_argument("--tag", default="", help="suffix of the result file")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    ap.add_argument("--quick", action="store_true", help="the demo model, two cases, a few steps, not recorded")
    args = ap.parse_args()
    shape, steps, cutoff, batch = (("demo", 8, 128, 4) if args.quick else (args.shape, args.steps, args.cutoff, args.batch))
    names = QUICK if args.quick else args.cases.split(",")
    unknown = [n for n in names if n not in CASES and not n.startswith("trainer_")]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; known: {TRAINER}, {', '.join(CASES)}")
    warmup = 2 if args.quick else 5
    results: dict[str, Any] = {"machine": machine(), "shape": shape, "model": SHAPES[shape], "cutoff_len": cutoff,
                               "micro_batch": batch, "steps": steps, "warmup_steps_not_counted": warmup,
                               "method": "full", "cases": {}}
    nproc = args.nproc or len(results["machine"].get("gpus") or [])
    several = [n for n in names if n in SEVERAL_GPUS]
    if several and nproc < 2:
        ap.error(f"{', '.join(several)} need several GPUs; this machine lists {nproc} (give --nproc)")
    gpu = (results["machine"].get("gpus") or ["cpu"])[0].split(",")[0]
    name = "gpu_set_" + re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_").lower() + f"_{shape}{args.tag}"

    def save(finished: bool) -> None:
        """After every case, not only at the end: a device call cut by its time limit keeps
        the cases it finished (``finished`` says whether the set ran to its end)."""
        results["finished"] = finished
        base = results["cases"].get(TRAINER.replace("bf16", "fp32") if args.quick else TRAINER, {}).get("tokens_per_s")
        for row in results["cases"].values():
            if base and row.get("tokens_per_s"):
                row["vs_trainer"] = row["tokens_per_s"] / base
        if not args.quick:
            record(name, results)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.json").write_text(json.dumps(results, indent=1))

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        def cut(signum: int, _frame: Any) -> None:
            stop_live_runs(tmp / "runs")
            sys.exit(128 + signum)
        signal.signal(signal.SIGTERM, cut)
        mdir = model_dir(tmp / "model", **SHAPES[shape])
        save_random_weights(mdir)
        data = varied_dataset(tmp / "varied.json", 200 if args.quick else 4000, max_words=cutoff)
        common = dict(model_name_or_path=str(mdir), finetuning_type="full", dataset=str(data),
                      cutoff_len=cutoff, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
                      learning_rate=1e-4, max_steps=steps, lr_scheduler_type="constant", warmup_ratio=0.0,
                      logging_steps=1, save_strategy="no", seed=42, device="auto", engine="single", nproc_per_node=1)
        for case in names:
            started = time.time()
            if case.startswith("trainer_"):
                try:
                    row = trainer_case(case, common, tmp, warmup)
                except Exception as exc:
                    row = {"status": "error", "error": str(exc)[-1500:]}
            else:
                row = ftui_case(case, common, tmp, warmup, args.timeout, nproc)
            row["wall_s"] = round(time.time() - started, 1)
            results["cases"][case] = row
            print(case, json.dumps(row), file=sys.stderr, flush=True)
            save(finished=False)
    save(finished=True)
    print(json.dumps(results, indent=1))
    print(f"\n{'case':28} {'status':10} {'tok/s':>9} {'x Trainer':>9} {'MFU':>6} {'wait ms':>7} {'peak GiB':>8} {'plan GiB':>8}", file=sys.stderr)
    for case, r in results["cases"].items():
        tps = f"{r['tokens_per_s']:.0f}" if r.get("tokens_per_s") else "-"
        ratio = f"{r['vs_trainer']:.2f}" if r.get("vs_trainer") else "-"
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "-"
        wait = f"{1000 * r['data_wait_s_median']:.1f}" if r.get("data_wait_s_median") is not None else "-"
        print(f"{case:28} {str(r.get('status')):10} {tps:>9} {ratio:>9} {mfu:>6} {wait:>7} "
              f"{gib(r.get('peak_bytes')):>8} {gib(r.get('planned_bytes')):>8}  {(r.get('error') or '')[:80]}", file=sys.stderr)
    return 0 if all(r.get("status") == "completed" for r in results["cases"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
