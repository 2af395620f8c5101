"""ftui against LLaMA-Factory on one CUDA GPU (issue 41, item 3): the same YAML, model, data and steps, in one call.

On the lent GPU machine, after the wheels are installed (bench/gpu_session_lf.sh does both):

    DISABLE_VERSION_CHECK=1 python bench/vs_llamafactory_gpu.py --lf-site /tmp/lfsite --out $OUT

For a model shape with random weights (``--shape``, Qwen2.5-1.5B's by default, built from its
config and saved once in bf16, so both load the same weights) and LLaMA-Factory's
``alpaca_en_demo`` (``--data``: a folder holding ``alpaca_en_demo.json``; a
``dataset_info.json`` naming it is written beside a copy), each case writes one
LLaMA-Factory YAML and runs:

- LLaMA-Factory 0.9.5 through ``bench/llamafactory_run.py`` (its ``run_exp`` in a process of
  its own whose ``PYTHONPATH`` starts with ``--lf-site``: LLaMA-Factory and its pinned
  libraries, never ftui's), with its best settings that run on the machine: ``neat_packing``,
  ``pure_bf16`` (its compute type: bf16 weights, no autocast; ``bf16: false`` as its web UI
  writes it), ``torch_compile``, ``enable_liger_kernel``, ``flash_attn: sdpa`` (the
  flash-attn package is not installed there and cannot be brought: no network, and it is a
  compiled CUDA extension), gradient checkpointing off (``disable_gradient_checkpointing``:
  ftui's runs keep none either and both fit), ``dataloader_num_workers: 4``;
- ftui on the same YAML plus its own keys (engine single) and ``flash_attn: fa2`` (torch's
  FlashAttention-2 varlen kernel, which ftui uses without the flash-attn package).

Same micro batch (``--batch``, 8), ``cutoff_len`` (2048), learning rate, constant schedule and
``max_steps``; the first ``--warmup`` steps (compilation) are not counted. Reported per case:
real tokens/s (non-padding tokens of the counted steps over the time from the end of step
``warmup`` to the end of the last: ftui's step events' ``tokens`` and ``t``; LLaMA-Factory's
counted by the wrapper from the batches its trainer receives), MFU with ftui's formula for
both (ftui's FLOPs per token over the device's bf16 peak, read off ftui's own step events,
applied to each side's tokens/s: same model and data, so the same FLOPs per token), peak
``torch.cuda.max_memory_allocated`` of each process, the first and last losses, and the
ratios. The JSON is rewritten after every run (``"finished": false`` until the end), so a
call cut by its limit keeps what finished. ``--cpu`` is a dry run of the whole script on a
machine without a GPU (fp32, no compile, no Liger, SDPA for ftui too).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))
from benchlib import (SHAPES, ftui_steps, machine, median, model_dir, record, run_ftui, run_in_session, tokens_per_s,  # noqa: E402
                      stop_on_sigterm, write_config)
from gpu_check import failure, gib, read_result  # noqa: E402

CHILDREN: list[subprocess.Popen] = []


def gpu_facts() -> dict[str, Any]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        name, mem, driver = [s.strip() for s in out.splitlines()[0].split(",")]
        return {"gpu": name, "gpu_memory": mem, "driver": driver}
    except Exception:
        return {"gpu": None, "driver": None}


def versions(names: list[str]) -> dict[str, str | None]:
    import importlib.metadata as md

    out: dict[str, str | None] = {}
    for n in names:
        try:
            out[n] = md.version(n)
        except Exception:
            out[n] = None
    return out


def save_random_weights(mdir: Path, cpu: bool) -> None:
    """Random weights, once, in bf16 (fp32 on the CPU dry run), built on the GPU: both sides load these."""
    code = ("import sys, torch; from transformers import AutoConfig, AutoModelForCausalLM; torch.manual_seed(0)\n"
            "cfg = AutoConfig.from_pretrained(sys.argv[1]); dt = torch.float32 if sys.argv[2] == 'cpu' else torch.bfloat16\n"
            "cfg.torch_dtype = dt\n"
            "with torch.device('cpu' if sys.argv[2] == 'cpu' else 'cuda'):\n"
            "    m = AutoModelForCausalLM.from_config(cfg, dtype=dt)\n"
            "m.save_pretrained(sys.argv[1])")
    subprocess.run([sys.executable, "-c", code, str(mdir), "cpu" if cpu else "cuda"], check=True, capture_output=True)


def data_dir(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "alpaca_en_demo.json", dst / "alpaca_en_demo.json")
    (dst / "dataset_info.json").write_text(json.dumps({"alpaca_en_demo": {"file_name": "alpaca_en_demo.json"}}))
    return dst


# LLaMA-Factory's speed settings a run may leave out (--lf-variants): "compile+liger" is its best;
# "liger" (no torch_compile) and "compile" (no Liger) are what is left where that one fails
VARIANTS = {"compile+liger": dict(torch_compile=True, enable_liger_kernel=True),
            "liger": dict(torch_compile=False, enable_liger_kernel=True),
            "compile": dict(torch_compile=True, enable_liger_kernel=False)}


def lf_yaml(method: str, mdir: Path, ddir: Path, out: Path, args: argparse.Namespace, variant: str = "compile+liger") -> dict[str, Any]:
    """LLaMA-Factory's YAML of a case: what its user would write for its fastest run."""
    cfg: dict[str, Any] = dict(
        model_name_or_path=str(mdir), trust_remote_code=True,
        stage="sft", do_train=True, finetuning_type=method,
        dataset="alpaca_en_demo", dataset_dir=str(ddir), template="qwen", cutoff_len=args.cutoff,
        packing=True, neat_packing=True, overwrite_cache=True, preprocessing_num_workers=min(16, os.cpu_count() or 1),
        output_dir=str(out), overwrite_output_dir=True, logging_steps=1, save_strategy="no", report_to="none",
        plot_loss=False, disable_tqdm=True,
        per_device_train_batch_size=args.batch, gradient_accumulation_steps=1, learning_rate=1e-4,
        max_steps=args.steps, lr_scheduler_type="constant", warmup_ratio=0.0, seed=42,
        dataloader_num_workers=4, disable_gradient_checkpointing=True, flash_attn="sdpa",
    )
    if method == "lora":
        cfg.update(lora_rank=16, lora_alpha=32, lora_dropout=0.0, lora_target="all")
    if args.cpu:
        cfg.update(bf16=False, pure_bf16=False, torch_compile=False, enable_liger_kernel=False, dataloader_num_workers=0)
    else:
        cfg.update(bf16=False, pure_bf16=True, **VARIANTS[variant])
    return cfg


def ftui_yaml(lf: dict[str, Any], out: Path, name: str, cpu: bool) -> dict[str, Any]:
    """The same YAML with ftui's own keys: one process (engine single) and FlashAttention-2
    (torch's varlen kernel) where there is a GPU."""
    cfg = {k: v for k, v in lf.items() if k not in ("overwrite_output_dir", "overwrite_cache", "plot_loss", "disable_tqdm",
                                                   "report_to", "do_train", "trust_remote_code")}
    cfg.update(output_dir=str(out), run_name=name, engine="single", device="auto", nproc_per_node=1,
               flash_attn="auto" if cpu else "fa2")
    return cfg


def ftui_case(cfg: dict[str, Any], yaml_path: Path, warmup: int, timeout: float) -> dict[str, Any]:
    out = Path(cfg["output_dir"])
    row: dict[str, Any] = {"yaml": cfg}
    try:
        run_dir = run_ftui(write_config(yaml_path, cfg), timeout=timeout)
        row.update(read_result(run_dir, warmup))
        times, tokens, steps = ftui_steps(run_dir)
        row["real_tokens"] = tokens
        row["tokens_per_s"] = tokens_per_s(times, tokens, warmup)
        # ftui's FLOPs per token over the peak: mfu / tokens_per_s of any step (the same constant in every step)
        ks = [s["mfu"] / s["tokens_per_s"] for s in steps if s.get("mfu") and s.get("tokens_per_s")]
        row["flops_per_token_over_peak"] = median(ks) if ks else None
    except Exception as exc:
        row.update(failure(exc, out))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return row


def lf_case(cfg: dict[str, Any], yaml_path: Path, json_path: Path, lf_site: str | None, warmup: int, timeout: float) -> dict[str, Any]:
    env = dict(os.environ, DISABLE_VERSION_CHECK="1")
    if lf_site:
        env["PYTHONPATH"] = lf_site + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    write_config(yaml_path, cfg)
    log = json_path.with_suffix(".log")
    row: dict[str, Any] = {"yaml": cfg}
    row["rc"] = rc = run_in_session([sys.executable, str(BENCH / "llamafactory_run.py"), str(yaml_path), str(json_path)],
                                    env, log, timeout, CHILDREN)
    res = json.loads(json_path.read_text()) if json_path.exists() else {}
    times, tokens = res.get("times", []), res.get("real_tokens", [])
    row.update(steps=len(times), real_tokens=tokens, losses=res.get("losses", [])[:3] + res.get("losses", [])[-2:],
               peak_bytes=res.get("peak_bytes"), peak_bytes_at_exit=res.get("peak_bytes_at_exit"),
               versions=res.get("versions"), attn_implementation=res.get("attn_implementation"),
               param_dtype=res.get("param_dtype"), trainable_params=res.get("trainable_params"),
               gradient_checkpointing=res.get("gradient_checkpointing"), run_exp_s=res.get("run_exp_s"))
    if len(times) > warmup + 1:
        row["tokens_per_s"] = tokens_per_s(times, tokens, warmup)
    row["status"] = "completed" if rc == 0 and res.get("finished") else "error"
    if row["status"] != "completed":
        row["log_tail"] = log.read_text()[-3000:] if log.exists() else ""
    shutil.rmtree(cfg["output_dir"], ignore_errors=True)
    return row


def lf_side(variant: str) -> str:
    return "llamafactory" if variant == "compile+liger" else f"llamafactory_{variant}"


def compare(ftui: dict[str, Any], lf: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    k = ftui.get("flops_per_token_over_peak")
    if k:
        for side in (ftui, lf):
            if side.get("tokens_per_s"):
                side["mfu_same_formula"] = k * side["tokens_per_s"]
    if ftui.get("tokens_per_s") and lf.get("tokens_per_s"):
        out["tokens_per_s_ftui_over_lf"] = ftui["tokens_per_s"] / lf["tokens_per_s"]
    if ftui.get("peak_bytes") and lf.get("peak_bytes"):
        out["peak_ftui_over_lf"] = ftui["peak_bytes"] / lf["peak_bytes"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen2.5-1.5b", choices=sorted(SHAPES))
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data/llamafactory"), help="folder with alpaca_en_demo.json")
    ap.add_argument("--lf-site", default=None, help="LLaMA-Factory's site folder, first on its PYTHONPATH")
    ap.add_argument("--methods", default="full,lora")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--cutoff", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=240, help="seconds for each run")
    ap.add_argument("--lf-variants", default="compile+liger",
                    help=f"LLaMA-Factory's settings, comma-separated ({', '.join(VARIANTS)}), each a run of its own")
    ap.add_argument("--cpu", action="store_true", help="dry run without a GPU (fp32, no compile, no Liger, SDPA)")
    ap.add_argument("--tag", default="")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON (and failing runs' logs) here")
    ap.add_argument("--versions", action="store_true", help="print the versions LLaMA-Factory's side would import, and stop")
    args = ap.parse_args()
    if args.versions:
        print("LLaMA-Factory side:", versions(["llamafactory", "transformers", "peft", "accelerate", "datasets", "trl",
                                               "tokenizers", "liger-kernel", "torch"]))
        return 0
    facts = gpu_facts()
    results: dict[str, Any] = {
        "machine": dict(machine(), **facts), "shape": args.shape, "model": SHAPES[args.shape], "data": "alpaca_en_demo",
        "cutoff_len": args.cutoff, "micro_batch": args.batch, "steps": args.steps, "warmup_steps_not_counted": args.warmup,
        "ftui_versions": versions(["torch", "transformers", "peft", "liger-kernel", "datasets", "pydantic"]),
        "cpu_dry_run": args.cpu, "cases": {}, "finished": False}
    gpu = (facts.get("gpu") or "cpu").lower()
    name = "vs_llamafactory_" + "".join(c if c.isalnum() else "_" for c in gpu).strip("_") + f"_{args.shape}{args.tag}"

    def save(finished: bool) -> None:
        results["finished"] = finished
        if not args.cpu:
            record(name, results)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.json").write_text(json.dumps(results, indent=1))

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        stop_on_sigterm(CHILDREN, tmp / "runs", save)
        started = time.time()
        mdir = model_dir(tmp / "model", **SHAPES[args.shape])
        save_random_weights(mdir, args.cpu)
        ddir = data_dir(args.data, tmp / "data")
        results["setup_s"] = round(time.time() - started, 1)
        print(f"model and data ready in {results['setup_s']} s", file=sys.stderr, flush=True)
        variants = args.lf_variants.split(",")
        for i, method in enumerate(args.methods.split(",")):
            lf_cfgs = {v: lf_yaml(method, mdir, ddir, tmp / "lf_out" / method, args, v) for v in variants}
            ft_cfg = ftui_yaml(lf_cfgs[variants[0]], tmp / "runs" / method, f"ftui-{method}", args.cpu)
            case: dict[str, Any] = results["cases"].setdefault(method, {})
            # alternate which goes first from one case to the next (ftui between two LLaMA-Factory runs when several)
            lf_sides = [lf_side(v) for v in variants]
            order = ([lf_sides[0], "ftui", *lf_sides[1:]] if len(lf_sides) > 1 else
                     ["ftui", *lf_sides] if i % 2 == 0 else [*lf_sides, "ftui"])
            for side in order:
                t0 = time.time()
                if side == "ftui":
                    row = ftui_case(ft_cfg, tmp / f"ftui_{method}.yaml", args.warmup, args.timeout)
                else:
                    v = variants[lf_sides.index(side)]
                    tag = f"{method}_{v.replace('+', '_')}"
                    row = lf_case(lf_cfgs[v], tmp / f"lf_{tag}.yaml", tmp / f"lf_{tag}.json", args.lf_site, args.warmup, args.timeout)
                    row["variant"] = v
                    if args.out is not None and row.get("status") != "completed":
                        args.out.mkdir(parents=True, exist_ok=True)
                        shutil.copy(tmp / f"lf_{tag}.log", args.out / f"lf_{tag}.log")
                row["wall_s"] = round(time.time() - t0, 1)
                case[side] = row
                if "ftui" in case:
                    ratios = {s: compare(case["ftui"], case[s]) for s in lf_sides if s in case}
                    case["ratios"] = ratios.get("llamafactory", {}) if list(ratios) == ["llamafactory"] else ratios
                brief = {k: row.get(k) for k in ("status", "steps", "tokens_per_s", "mfu", "peak_bytes", "losses", "wall_s", "error")}
                print(method, side, json.dumps(brief), file=sys.stderr, flush=True)
                save(False)
    save(True)
    print(f"\n{'case':6} {'side':26} {'status':10} {'tok/s':>9} {'MFU':>6} {'peak GiB':>8} {'losses'}", file=sys.stderr)
    for method, case in results["cases"].items():
        for side in [s for s in case if s != "ratios"]:
            r = case.get(side, {})
            tps = f"{r['tokens_per_s']:.0f}" if r.get("tokens_per_s") else "-"
            mfu = f"{100 * r['mfu_same_formula']:.1f}%" if r.get("mfu_same_formula") else "-"
            print(f"{method:6} {side:26} {str(r.get('status')):10} {tps:>9} {mfu:>6} {gib(r.get('peak_bytes')):>8} {r.get('losses')}",
                  file=sys.stderr)
        print(f"{method:6} ratios {json.dumps(case.get('ratios', {}))}", file=sys.stderr)
    ok = all(r.get("status") == "completed" for c in results["cases"].values() for s, r in c.items() if s != "ratios")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
