"""GPU check: a short smoke run of every engine preset this machine can run, per precision.

One command on a CUDA machine, before trusting ftui with a long run there:

    python bench/gpu_check.py                      # demo-sized model, every preset that fits
    python bench/gpu_check.py --shape qwen2.5-0.5b --steps 20

For each (preset, precision, method) it runs ``ftui train`` to the end on a random-weight
model of the named shape (no download), and reports: completed or the error (with the
hint ftui gave), real tokens/s (after the warm-up steps), MFU, each rank's peak
``torch.cuda.max_memory_allocated`` against ``ftui plan``'s estimate for the same config.
Presets that shard over processes (ddp, fsdp, zero1..3) run only where several GPUs exist.
The table is printed last; the whole result goes to ``bench/results/gpu_check_<gpu>.json``
(and to ``--out`` when given). Nothing is timed against a target: these are readings.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchlib import SHAPES, ftui_steps, machine, median, model_dir, record, run_ftui, varied_dataset, write_config  # noqa: E402

ONE_GPU = ["single", "zero0", "fsdp_offload", "zero2_offload", "zero3_offload"]
SEVERAL_GPUS = ["ddp", "fsdp", "zero1", "zero2", "zero3"]


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def cases(presets: list[str], precisions: list[str], methods: list[str], gpus: int) -> list[tuple[str, str, str]]:
    out = []
    for preset in presets:
        if preset in SEVERAL_GPUS and gpus < 2:
            continue
        for precision in precisions:
            for method in methods:
                out.append((preset, precision, method))
    return out


def config_for(preset: str, precision: str, method: str, gpus: int, common: dict[str, Any]) -> dict[str, Any]:
    several = preset in SEVERAL_GPUS
    return dict(common, engine=preset, nproc_per_node=gpus if several else 1, bf16=precision == "bf16",
                fp16=precision == "fp16", finetuning_type=method, run_name=f"{preset}-{precision}-{method}")


def planned_bytes(cfg_dict: dict[str, Any]) -> float | None:
    from ftui.plan.planner import estimate_for
    from ftui.config.load import parse_config

    try:
        cfg, _ = parse_config(cfg_dict)
        return float(estimate_for(cfg).total)
    except Exception as exc:  # the planner's own failure is a reading too
        print(f"planner failed: {exc}", file=sys.stderr)
        return None


def run_end(run_dir: Path) -> dict[str, Any]:
    for line in reversed((run_dir / "events.jsonl").read_text().splitlines()):
        ev = json.loads(line)
        if ev.get("event") == "run_end":
            return ev
    return {}


def read_result(run_dir: Path, warmup: int) -> dict[str, Any]:
    times, tokens, steps = ftui_steps(run_dir)
    end = run_end(run_dir)
    out: dict[str, Any] = {"status": end.get("status"), "steps": len(steps)}
    if len(times) > warmup + 1:
        out["tokens_per_s"] = sum(tokens[warmup + 1:]) / (times[-1] - times[warmup])
    mfus = [s["mfu"] for s in steps[warmup + 1:] if s.get("mfu")]
    out["mfu"] = median(mfus) if mfus else None
    peaks = [m["peak"] for s in steps for m in s.get("mem", [])]
    out["peak_bytes"] = max(peaks) if peaks else None
    out["losses"] = [round(s["loss"], 4) for s in steps if s.get("loss") is not None][:3] + \
                    [round(s["loss"], 4) for s in steps if s.get("loss") is not None][-2:]
    out["skipped_steps"] = sum(1 for s in steps if s.get("skipped"))
    waits = [s["data_wait_s"] for s in steps[warmup + 1:] if "data_wait_s" in s]
    out["data_wait_s_median"] = median(waits) if waits else None
    out["loss_scale_last"] = steps[-1].get("loss_scale") if steps else None
    # the attention the run ran (fa2: which way grouped K/V heads went in) and any warning that
    # part of it fell back to SDPA: a case's speed is read against what it really computed with
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    out["attention"] = next((e.get("attention") for e in events if e.get("event") == "run_start"), None)
    out["attention_fallbacks"] = [e["message"] for e in events if e.get("event") == "log" and "flash_attn" in e.get("message", "")]
    return out


def failure(exc: Exception, root: Path) -> dict[str, Any]:
    text = str(exc)
    runs = sorted(root.iterdir()) if root.exists() else []
    ev = run_end(runs[-1]) if runs and (runs[-1] / "events.jsonl").exists() else {}
    err = ev.get("reason") or (text.splitlines()[0] if text else type(exc).__name__)
    return {"status": ev.get("status", "error"), "error": err[:400], "hint": ev.get("hint"),
            "log_tail": text[-1500:]}


def run_case(yaml_path: Path, output_dir: Path, warmup: int, timeout: float) -> dict[str, Any]:
    """``ftui train`` of one case to its end: read_result's figures, or failure's."""
    try:
        return read_result(run_ftui(yaml_path, timeout=timeout), warmup)
    except Exception as exc:
        row = failure(exc, output_dir)
        if not isinstance(exc, RuntimeError):
            row["traceback"] = traceback.format_exc()[-1500:]
        return row


def gib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="demo", choices=sorted(SHAPES))
    ap.add_argument("--presets", default=",".join(ONE_GPU + SEVERAL_GPUS))
    ap.add_argument("--precisions", default="bf16,fp16")
    ap.add_argument("--methods", default="full")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--cutoff", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--packing", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", type=Path, default=None, help="also copy the JSON (and failing runs' train.log) here")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--device", default="cuda", help="cpu: try the script itself on a machine without a GPU")
    args = ap.parse_args()
    gpus = gpu_count()
    warmup = min(5, max(1, args.steps // 4))
    results: dict[str, Any] = {"machine": machine(), "shape": args.shape, "model": SHAPES[args.shape],
                               "cutoff_len": args.cutoff, "micro_batch": args.batch, "packing": bool(args.packing),
                               "steps": args.steps, "warmup_steps_not_counted": warmup, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        mdir = model_dir(tmp / "model", **SHAPES[args.shape])
        data = varied_dataset(tmp / "varied.json", 2000, max_words=args.cutoff)
        common = dict(model_name_or_path=str(mdir), model_init="random", dataset=str(data), cutoff_len=args.cutoff,
                      per_device_train_batch_size=args.batch, gradient_accumulation_steps=1, learning_rate=1e-4,
                      max_steps=args.steps, lr_scheduler_type="constant", warmup_ratio=0.0, logging_steps=1,
                      save_strategy="no", seed=42, device=args.device, packing=bool(args.packing), lora_rank=16,
                      output_dir=str(tmp / "runs"))
        for preset, precision, method in cases(args.presets.split(","), args.precisions.split(","),
                                               args.methods.split(","), gpus):
            cfg = config_for(preset, precision, method, gpus, common)
            cfg["output_dir"] = str(tmp / "runs" / cfg["run_name"])
            row: dict[str, Any] = {"preset": preset, "precision": precision, "method": method,
                                   "nproc": cfg["nproc_per_node"], "planned_bytes": planned_bytes(cfg)}
            started = time.time()
            row.update(run_case(write_config(tmp / f"{cfg['run_name']}.yaml", cfg), Path(cfg["output_dir"]), warmup, args.timeout))
            row["wall_s"] = round(time.time() - started, 1)
            if row.get("peak_bytes") and row.get("planned_bytes"):
                row["plan_over_measured"] = row["planned_bytes"] / row["peak_bytes"]
            results["cases"].append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            if args.out is not None and row.get("status") != "completed":
                args.out.mkdir(parents=True, exist_ok=True)
                for log in Path(cfg["output_dir"]).glob("*/train.log"):
                    shutil.copy(log, args.out / f"{cfg['run_name']}.train.log")
    gpu = (results["machine"].get("gpus") or ["cpu"])[0].split(",")[0]
    name = "gpu_check_" + re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_").lower() + f"_{args.shape}"
    if not args.no_record:
        record(name, results)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{name}.json").write_text(json.dumps(results, indent=1))
    print(f"\n{'preset':14} {'prec':5} {'method':6} {'status':10} {'tok/s':>9} {'MFU':>6} {'peak GiB':>8} {'plan GiB':>8}  error")
    for r in results["cases"]:
        tps = f"{r['tokens_per_s']:.0f}" if r.get("tokens_per_s") else "-"
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "-"
        print(f"{r['preset']:14} {r['precision']:5} {r['method']:6} {str(r.get('status')):10} {tps:>9} {mfu:>6} "
              f"{gib(r.get('peak_bytes')):>8} {gib(r.get('planned_bytes')):>8}  {(r.get('error') or '')[:90]}")
    return 0 if all(r.get("status") == "completed" for r in results["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
