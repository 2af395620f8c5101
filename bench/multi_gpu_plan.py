"""Several GPUs, on paper (issue 41, item 5): the expected step time, tokens/s and scaling of DDP,
FSDP2, ZeRO-2 and ZeRO-3 on 8 H100s in one node and on 2 nodes x 8, from each engine's
communication per optimizer step (``comm_model.py``) and the measured single-GPU step, with
what ftui's planner says per rank; against measured multi-GPU runs when there are some.

    python bench/multi_gpu_plan.py                      # records results/multi_gpu_plan.json, prints the table
    python bench/multi_gpu_plan.py --measured OUT/gpu_set_*_x8.json OUT/gpu_set_*.json --out OUT/multi_gpu_plan.json

The single-GPU step is the H100's (``results/gpu_set_nvidia_h100_80gb_hbm3_qwen2.5-1.5b.json``):
for DDP and FSDP2 ftui's fastest full fine-tuning there (pure bf16, ``torch_compile``, Liger,
``flash_attn: fa2``, packed, micro batch 8 x 2,048, ``run5``); DeepSpeed takes neither
``pure_bf16`` nor ``torch_compile`` in ftui, so ZeRO's is the fastest measured step with bf16
weights and no compile (``run4``'s pure bf16 packed, micro batch 4, SDPA) unless ``--measured``
holds the same settings at micro batch 8 with Liger and fa2 (``pure_bf16_packed_liger_mb8_fa2``,
which ``gpu_session.sh`` runs beside the multi-GPU cases). The 7 B step is the 1.5 B's scaled by
the FLOPs per token at the same MFU. ``--quick`` prints without recording, and so does a run with
``--measured`` (``--out`` writes its JSON: the device call's copy).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchlib import RESULTS, SHAPES, machine, model_dir, record  # noqa: E402
from comm_model import Sizes, StepTime, Topology, ddp, fsdp, step_time, zero2, zero3  # noqa: E402

GB = 1e9
MICRO_BATCH, CUTOFF = 8, 2048
H100_BYTES = 81559 * 2**20  # nvidia-smi's memory.total of the H100 80GB HBM3 the single-GPU figures ran on
H100_PEAK = 989e12  # dense bf16, ftui.runner.metrics
SHAPE_NAMES = ("qwen2.5-1.5b", "qwen2.5-7b")
ENGINES = ("ddp", "fsdp", "zero2", "zero3")

# NCCL bus bandwidths (bytes/s) and latencies (s). One node: NVIDIA/nccl-tests#212 (S. Jeaugey, NCCL):
# NVLink 4's 450 GB/s line rate gives ~370 GB/s busbw after protocol overhead for ring all-gather /
# reduce-scatter / all-reduce (NVLink SHARP all-reduce peaks near 480 GB/s, on large buffers only,
# not taken). Two nodes: NVIDIA/nccl-tests#290 (NVIDIA): 46-48 GB/s per 400 Gb/s NDR NIC; 45 taken
# for one NIC per GPU over InfiniBand or RoCE. Latencies: NVIDIA/nccl#1244 shows a 2-node
# collective's small-message floor at about 47 us; one node's 20 us is assumed (not sourced).
ONE_NODE = Topology("8 x H100, one node (NVLink 4)", 1, 8, 370 * GB, 0.0, 20e-6, 50e-6)
TWO_NODES = Topology("2 nodes x 8 H100 (400 Gb/s per GPU)", 2, 8, 370 * GB, 45 * GB, 20e-6, 50e-6)

# the engine's configuration as ftui runs it (its preset) and the case of gpu_set.py it is measured by
TORCH_BEST = dict(pure_bf16=True, torch_compile=True, enable_liger_kernel=True, flash_attn="fa2")
DEEPSPEED_BEST = dict(bf16=True, enable_liger_kernel=True, flash_attn="fa2")  # no pure_bf16, no compile under DeepSpeed
SETTINGS = {"single": TORCH_BEST, "ddp": TORCH_BEST, "fsdp": TORCH_BEST, "zero2": DEEPSPEED_BEST, "zero3": DEEPSPEED_BEST}
REFERENCE_CASE = {"ddp": "pure_bf16_packed_compile_liger_mb8_fa2", "fsdp": "pure_bf16_packed_compile_liger_mb8_fa2",
                  "zero2": "pure_bf16_packed_liger_mb8_fa2", "zero3": "pure_bf16_packed_liger_mb8_fa2"}
RECORDED = RESULTS / "gpu_set_nvidia_h100_80gb_hbm3_qwen2.5-1.5b.json"
RECORDED_REFERENCE = {"pure_bf16_packed_compile_liger_mb8_fa2": ("run5", 8), "pure_bf16_packed_liger_mb8_fa2": ("run4:pure_bf16_packed", 4)}


def traffic(engine: str, sizes: Sizes) -> list:
    """Each engine's collectives in the precision ftui runs them in: pure bf16 under DDP and
    FSDP2 (bf16 gradients all-reduced; bf16 shards gathered and reduced: MixedPrecisionPolicy
    with no reduce dtype), DeepSpeed's bf16 module under ZeRO (communication_data_type bf16)."""
    return {"ddp": lambda: ddp(sizes, grad_bytes=2), "fsdp": lambda: fsdp(sizes, param_bytes=2, reduce_bytes=2),
            "zero2": lambda: zero2(sizes), "zero3": lambda: zero3(sizes)}[engine]()


def reference(name: str, measured: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The single-GPU case a prediction starts from: measured here (--measured) or recorded."""
    if name in measured and measured[name].get("tokens_per_s"):
        row = measured[name]
        return {"case": name, "source": "--measured", "tokens_per_s": row["tokens_per_s"], "mfu": row.get("mfu"),
                "micro_batch": (row.get("settings") or {}).get("per_device_train_batch_size", MICRO_BATCH)}
    recorded = json.loads(RECORDED.read_text())
    where, micro = RECORDED_REFERENCE[name]
    run, _, case = where.partition(":")
    row = recorded[run][case or name]
    return {"case": case or name, "source": f"{RECORDED.name} {run}", "tokens_per_s": row["tokens_per_s"], "mfu": row["mfu"],
            "micro_batch": micro}


def micro_seconds(ref: dict[str, Any], sizes: Sizes, base: Sizes, checkpointing: bool) -> float:
    """One micro batch of 8 x 2,048 tokens (packed rows: full to within the last row) at the
    reference's measured tokens/s, scaled from the measured shape by the FLOPs per token (same
    MFU); gradient checkpointing recomputes the forward (8N a token instead of 6N)."""
    seconds = MICRO_BATCH * CUTOFF / ref["tokens_per_s"] * sizes.dense / base.dense
    return seconds * (8 / 6 if checkpointing else 1.0)


def planner_rows(tmp: Path) -> list[dict[str, Any]]:
    """``ftui plan``'s verdict per rank for each shape and engine, on 80 GB H100s that need not be
    here (for_another_machine, as ``ftui plan --gpu-memory`` does), micro batch 8 x 2,048, packed;
    with gradient checkpointing too where it does not fit without."""
    from ftui.config.load import parse_config
    from ftui.machine.facts import for_another_machine
    from ftui.plan.verdict import plan

    data = tmp / "data.json"
    data.write_text(json.dumps([{"instruction": "a", "input": "", "output": "b"}]))
    rows = []
    for shape in SHAPE_NAMES:
        mdir = model_dir(tmp / shape, **SHAPES[shape])
        for engine in ("single", *ENGINES):
            for nodes in ((1,) if engine == "single" else (1, 2)):
                for checkpointing in (False, True):
                    cfg_dict = dict(model_name_or_path=str(mdir), model_init="random", dataset=str(data), finetuning_type="full",
                                    cutoff_len=CUTOFF, per_device_train_batch_size=MICRO_BATCH, packing=True, engine=engine,
                                    nproc_per_node=1 if engine == "single" else 8, nnodes=nodes,
                                    gradient_checkpointing=checkpointing, output_dir=str(tmp / "runs"), **SETTINGS[engine])
                    if nodes > 1:
                        cfg_dict["rdzv_endpoint"] = "10.0.0.1:29500"  # any: nothing connects
                    with for_another_machine():
                        cfg, _warnings = parse_config(cfg_dict, data_needed=False)
                    verdict = plan(cfg, gpu_bytes=H100_BYTES, compute_major=9)
                    e = verdict.estimate
                    rows.append({"shape": shape, "engine": engine, "ranks": cfg.world_size, "gradient_checkpointing": checkpointing,
                                 "per_rank_gib": round(e.total / 2**30, 2), "needed_gib": round(e.needed / 2**30, 2),
                                 "fits_80gb": bool(verdict.fits), "split": e.split()})
    return rows


def fits(planner: list[dict[str, Any]], shape: str, engine: str, ranks: int, checkpointing: bool) -> bool:
    return any(r["fits_80gb"] for r in planner if r["shape"] == shape and r["engine"] == engine and r["ranks"] == ranks
               and r["gradient_checkpointing"] == checkpointing)


def predict(engine: str, shape: str, topo: Topology, ref: dict[str, Any], accumulation: int, checkpointing: bool) -> dict[str, Any]:
    sizes, base = Sizes.of(model_shape(shape)), Sizes.of(model_shape("qwen2.5-1.5b"))
    micro_s = micro_seconds(ref, sizes, base, checkpointing)
    t: StepTime = step_time(traffic(engine, sizes), topo, micro_s, layer_share=sizes.layer / sizes.dense,
                            accumulation=accumulation, backward_share=3 / 4 if checkpointing else 2 / 3)
    tokens = topo.ranks * accumulation * MICRO_BATCH * CUTOFF
    mfu = ref["mfu"] * t.efficiency * (6 / 8 if checkpointing else 1.0) if ref.get("mfu") else None
    return {"engine": engine, "shape": shape, "topology": topo.name, "ranks": topo.ranks, "accumulation": accumulation,
            "gradient_checkpointing": checkpointing, "reference": ref["case"], "micro_batch_s_1gpu": round(micro_s, 4),
            "nvlink_bytes_per_gpu": t.nvlink_bytes_per_gpu, "network_bytes_per_gpu": t.net_bytes_per_gpu,
            "comm_s": round(t.comm_s, 4), "exposed_s": round(t.exposed_s, 4),
            "hidden_share": round(1 - t.exposed_s / t.comm_s, 3) if t.comm_s else None, "step_s": round(t.step_s, 4),
            "tokens_per_s": round(tokens / t.step_s), "efficiency": round(t.efficiency, 3), "mfu": round(mfu, 3) if mfu else None}


def model_shape(name: str):
    from ftui.plan.model_shape import ModelShape

    cfg = {"model_type": "llama", "vocab_size": 32000, **SHAPES[name]}
    return ModelShape.from_config(cfg)


def measured_rows(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """The cases of gpu_set.py's JSON files (--out of the device call), by name; a later file's
    case wins."""
    out: dict[str, dict[str, Any]] = {}
    for path in paths:
        result = json.loads(path.read_text())
        out.update({name: dict(row, shape=result.get("shape")) for name, row in result.get("cases", {}).items()})
    return out


def against_measured(measured: dict[str, dict[str, Any]], refs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each multi-GPU case gpu_set.py ran (``settings.engine``) beside the prediction for the same
    engine, GPU count and one node; efficiency against the same settings' single-GPU case in the
    same files when there is one."""
    out = []
    for name, row in measured.items():
        settings = row.get("settings") or {}
        engine, n = settings.get("engine"), settings.get("nproc_per_node", 1)
        if engine not in ENGINES or n < 2:
            continue
        topo = Topology(f"{n} GPUs, one node", 1, n, ONE_NODE.nvlink_busbw, 0.0, ONE_NODE.latency_intra, ONE_NODE.latency_inter)
        shape = row.get("shape") if row.get("shape") in SHAPES and row.get("shape") != "demo" else "qwen2.5-1.5b"
        p = predict(engine, shape, topo, refs[engine], 1, bool(settings.get("gradient_checkpointing")))
        single = measured.get(REFERENCE_CASE[engine], {}).get("tokens_per_s")
        tps = row.get("tokens_per_s")
        out.append({"case": name, "shape": shape, "engine": engine, "ranks": n, "status": row.get("status"), "measured_tokens_per_s": tps,
                    "predicted_tokens_per_s": p["tokens_per_s"], "measured_over_predicted": round(tps / p["tokens_per_s"], 3) if tps else None,
                    "measured_efficiency": round(tps / (n * single), 3) if tps and single else None,
                    "predicted_efficiency": p["efficiency"], "measured_mfu": row.get("mfu"), "peak_gib": round(row["peak_bytes"] / 2**30, 2)
                    if row.get("peak_bytes") else None, "planned_gib": round(row["planned_bytes"] / 2**30, 2) if row.get("planned_bytes") else None,
                    "error": row.get("error")})
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = ["| shape | engine | GPUs | ckpt | comm / GPU (NVLink + network) | comm s | hidden | exposed s | step s | tokens/s | "
             "x (1 GPU x n) | MFU | planner per rank |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    plan = {(r["shape"], r["engine"], r["ranks"], r["gradient_checkpointing"]): r for r in result["planner"]}
    for r in result["predictions"]:
        if r["accumulation"] != 1:
            continue
        p = plan.get((r["shape"], r["engine"], r["ranks"], r["gradient_checkpointing"]))
        verdict = f"{p['per_rank_gib']:.1f} GiB, {'fits' if p['fits_80gb'] else 'does NOT fit'}" if p else "-"
        comm = f"{r['nvlink_bytes_per_gpu'] / GB:.2f} + {r['network_bytes_per_gpu'] / GB:.2f} GB"
        hidden = f"{100 * r['hidden_share']:.0f} %" if r["hidden_share"] is not None else "-"
        mfu = f"{100 * r['mfu']:.1f} %" if r["mfu"] else "-"
        lines.append(f"| {r['shape']} | {r['engine']} | {r['ranks']} | {'yes' if r['gradient_checkpointing'] else 'no'} | {comm} | "
                     f"{r['comm_s']:.3f} | {hidden} | {r['exposed_s']:.3f} | {r['step_s']:.3f} | {r['tokens_per_s']:,} | "
                     f"{r['efficiency']:.3f} | {mfu} | {verdict} |")
    lines += ["", "| shape | engine | GPUs | efficiency, accumulation 1 | accumulation 4 |", "| --- | --- | --- | --- | --- |"]
    by = {(r["shape"], r["engine"], r["ranks"], r["gradient_checkpointing"], r["accumulation"]): r for r in result["predictions"]}
    for (shape, engine, ranks, ck, acc), r in by.items():
        if acc == 1 and (shape, engine, ranks, ck, 4) in by:
            lines.append(f"| {shape}{' (ckpt)' if ck else ''} | {engine} | {ranks} | {r['efficiency']:.3f} | {by[(shape, engine, ranks, ck, 4)]['efficiency']:.3f} |")
    lines += ["", "| shape | engine | ranks | planner per rank, micro batch 8 x 2,048 (needed with overhead) | with gradient checkpointing |",
              "| --- | --- | --- | --- | --- |"]
    for (shape, engine, ranks, ck), p in plan.items():
        if not ck and (shape, engine, ranks, True) in plan:
            q = plan[(shape, engine, ranks, True)]
            lines.append(f"| {shape} | {engine} | {ranks} | {p['per_rank_gib']:.1f} GiB ({p['needed_gib']:.1f}): "
                         f"{'fits' if p['fits_80gb'] else 'does NOT fit'} | {q['per_rank_gib']:.1f} GiB ({q['needed_gib']:.1f}): "
                         f"{'fits' if q['fits_80gb'] else 'does NOT fit'} |")
    if result.get("against_measured"):
        lines += ["", "| measured case | GPUs | status | tokens/s measured | predicted | measured / predicted | efficiency measured | predicted | "
                  "peak GiB | plan GiB |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for m in result["against_measured"]:
            lines.append(f"| {m['case']} | {m['ranks']} | {m['status']} | {m['measured_tokens_per_s'] or '-'} | {m['predicted_tokens_per_s']:,} | "
                         f"{m['measured_over_predicted'] or '-'} | {m['measured_efficiency'] or '-'} | {m['predicted_efficiency']} | "
                         f"{m['peak_gib'] or '-'} | {m['planned_gib'] or '-'} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", type=Path, nargs="*", default=[], help="gpu_set.py JSON files (a device call's $OUT)")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    ap.add_argument("--quick", action="store_true", help="print only, record nothing")
    args = ap.parse_args()
    measured = measured_rows(args.measured)
    refs = {engine: reference(REFERENCE_CASE[engine], measured) for engine in ENGINES}
    with tempfile.TemporaryDirectory() as tmp:
        planner = planner_rows(Path(tmp))
    predictions = []
    for shape in SHAPE_NAMES:
        for topo in (ONE_NODE, TWO_NODES):
            for engine in ENGINES:
                # as asked (micro batch 8 without checkpointing), and with checkpointing where the planner says only that fits
                variants = [False] + ([True] if not fits(planner, shape, engine, topo.ranks, False) else [])
                for checkpointing in variants:
                    for accumulation in (1, 4):
                        predictions.append(predict(engine, shape, topo, refs[engine], accumulation, checkpointing))
    result = {"what": "bench/multi_gpu_plan.py: DDP, FSDP2, ZeRO-2 and ZeRO-3 on 8 H100s and 2 x 8, on paper (issue 41 item 5)",
              "machine": machine(), "micro_batch": MICRO_BATCH, "cutoff_len": CUTOFF,
              "topologies": {t.name: {"nodes": t.nodes, "gpus_per_node": t.gpus_per_node, "nvlink_busbw": t.nvlink_busbw,
                                      "net_busbw_per_gpu": t.net_busbw, "latency_intra_s": t.latency_intra,
                                      "latency_inter_s": t.latency_inter} for t in (ONE_NODE, TWO_NODES)},
              "references": refs, "planner": planner, "predictions": predictions,
              "against_measured": against_measured(measured, refs) if measured else []}
    if not args.quick and not args.measured:
        record("multi_gpu_plan", result)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
