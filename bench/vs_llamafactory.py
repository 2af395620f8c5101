"""ftui against LLaMA-Factory 0.9.5 on the CPU (issue 41, item 1): the same YAML, model and data, one epoch each, in one command.

    python bench/vs_llamafactory.py                       # every case, 2 repetitions, recorded
    python bench/vs_llamafactory.py --cases padded,packed --reps 3
    python bench/vs_llamafactory.py --quick               # smoke run: tiny sizes, 1 repetition, not recorded

LLaMA-Factory runs in its own venv (``--lf-python``, /work/lfvenv/bin/python; bench/README.md has
the recipe) through ``bench/llamafactory_run.py`` (its ``run_exp``, what ``llamafactory-cli train
CONFIG`` runs, in a wrapper that reads the clock, the real tokens and ``ru_maxrss``), with
``DISABLE_VERSION_CHECK=1``, the HF offline variables, no ``PYTHONPATH`` (it never imports ftui)
and a working directory of its own; ftui runs ``ftui train`` with this interpreter. Both load one
random-weight model saved once (``--shape``, the Llama-architecture hidden 256 x 4 layers of
benchlib.SHAPES; the demo's tokenizer, ``template: qwen``) and LLaMA-Factory's ``alpaca_en_demo``
(``--data``), with one YAML of LLaMA-Factory's keys: ``cutoff_len`` 1024, micro batch 4, fp32,
one epoch, learning rate 1e-4 cosine with 10 % warm-up, ``max_samples`` (600; 160 for
vocab151936), ``logging_steps`` 1, no checkpoints. ftui's copy drops the keys it only warns about
and adds ``engine``, ``nproc_per_node`` and ``device: cpu``. LLaMA-Factory's own default of
gradient checkpointing (on) is turned off (``disable_gradient_checkpointing``): ftui keeps none,
and recomputing the forward pass is work the other side does not do; ``--lf-gradient-checkpointing``
leaves it on (each run's ``gradient_checkpointing`` says what LLaMA-Factory's model had).

Cases (``--cases``):

- ``padded``: no packing key (LLaMA-Factory pads each micro batch; ftui does whatever the same
  YAML gives it);
- ``packed``: ``packing: true`` + ``neat_packing: true`` (examples packed into rows, attention
  kept within each; ftui reads the same keys);
- ``vocab151936``: packed, with the model config's ``vocab_size`` 151,936 (Qwen's);
- ``lora``: padded, ``finetuning_type: lora``, ``lora_rank`` 16 (alpha 32), ``lora_target: all``;
- ``ddp2``: padded, 2 processes: LLaMA-Factory under torchrun as ``FORCE_TORCHRUN=1
  NPROC_PER_NODE=2 llamafactory-cli train`` starts it (``torchrun --nnodes 1 --node_rank 0
  --nproc_per_node 2 --master_addr 127.0.0.1 --master_port P``, the wrapper in place of its
  launcher.py), ftui with ``engine: ddp``, ``nproc_per_node: 2``.

Each repetition runs every case on both sides, alternating which goes first (from one case to
the next and from one repetition to the next); repetition r uses ``seed`` 42 + r on both
sides, so each repetition sees its own data order. Threads: ``OMP_NUM_THREADS`` is set to the
cores over the processes (2 for one process on the 2-core VM, torch's default there; 1 a rank
under DDP, what torchrun and ftui's launcher both default to), on both sides, and each side's
``torch.get_num_threads()`` is reported (``threads``).

Reported per case and repetition, per side, and the ratios (medians over repetitions in
``summary``):

- **train time**, the first step's start to the last step's end, which leaves out data
  preparation, model load and the final save on both sides. ftui: from the start of the first
  step event's window (its ``t`` less ``window_steps`` x ``step_time_s``: the loop's window
  opens right after ``run_start``, before the first micro batch is fetched) to the last step
  event's ``t``. LLaMA-Factory: from ``on_train_begin`` (its model loaded and wrapped, its
  optimizer made, the first batch not yet fetched) to the last ``on_step_end``, rank 0's clock.
  ``train_ratio`` = LLaMA-Factory's / ftui's (above 1: ftui is faster).
- **real tokens**: non-padding tokens of the epoch, ftui's step events' ``tokens``,
  LLaMA-Factory's counted by the wrapper in the batches its trainer receives (summed over
  ranks). The same examples on both sides (``max_samples`` takes the first N), so the totals
  should match: ``same_tokens`` says whether they do. They do not quite when packed:
  LLaMA-Factory lowers ``cutoff_len`` by one when it packs (its data_args.py), so an example
  longer than that loses a token there.
- **wall**: the whole command, process start to exit: ``ftui train CONFIG`` against the
  wrapper process (under ddp2, the torchrun process); ``wall_ratio`` = LLaMA-Factory's / ftui's.
- **peak RSS**: the training processes' ``ru_maxrss`` (lifetime high-water mark, so data
  preparation and model load are in it on both sides): ftui's from its step events' ``mem``
  (``peak``, the largest of each rank over the steps), LLaMA-Factory's read by the wrapper at
  the end of training; under ddp2 the two ranks' peaks **summed** on both sides (launchers and
  ftui's supervisor not counted). ``peak_ratio`` = ftui's / LLaMA-Factory's (below 1: ftui uses
  less).
- **loss**: whether the curves agree within run-to-run noise (bench/loss_agreement.py: each
  repetition's epoch mean of the per-step losses, the two sides' means compared against the
  larger of the spread between a side's repetitions and the per-step standard error, never below
  the 4 decimals LLaMA-Factory logs; verdict ``agree`` within 3 of that noise, ``differ``, or
  ``undetermined`` without a scatter to measure). One repetition gives the per-step estimate only. Where a
  repetition's curves have the same steps (padded: ftui draws the same seeded order over the
  same examples), ``stepwise_max_abs_diff`` is their largest difference step for step.

The JSON goes to stdout at the end and is recorded (``results/vs_llamafactory_cpu*.json``, with
the machine) after every run, ``"finished": false`` until the end, so a cut run keeps what it
measured. ``--sides ftui`` (or ``llamafactory``) runs one side only; ``--quick`` is a smoke run
(a model of hidden 64 x 2 layers, 16 records, ``cutoff_len`` 256, one repetition; nothing
recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))
from benchlib import SHAPES, ftui_steps, machine, median, model_dir, record, run_ftui, run_in_session, stop_on_sigterm, write_config  # noqa: E402
from gpu_check import failure  # noqa: E402
from llamafactory_run import rank_file  # noqa: E402
from loss_agreement import agreement  # noqa: E402
from vs_llamafactory_gpu import data_dir, ftui_yaml, save_random_weights  # noqa: E402

CHILDREN: list[subprocess.Popen] = []
SIDES = ("ftui", "llamafactory")
# case -> what it changes from the padded, full fine-tuning, one-process YAML
CASES: dict[str, dict[str, Any]] = {
    "padded": {},
    "packed": dict(packing=True),
    "vocab151936": dict(packing=True, vocab_size=151936),
    "lora": dict(method="lora"),
    "ddp2": dict(nproc=2),
}
QUICK_SHAPE = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   max_position_embeddings=1024)


def lf_cpu_yaml(case: str, mdir: Path, ddir: Path, out: Path, seed: int, max_samples: int, cutoff: int, batch: int,
                gradient_checkpointing: bool = False) -> dict[str, Any]:
    """LLaMA-Factory's YAML of a case (its keys only; ftui reads the same). ``gradient_checkpointing``:
    leave LLaMA-Factory's default (on) instead of turning it off."""
    spec = CASES[case]
    cfg: dict[str, Any] = dict(
        model_name_or_path=str(mdir), stage="sft", do_train=True, finetuning_type=spec.get("method", "full"),
        dataset="alpaca_en_demo", dataset_dir=str(ddir), template="qwen", cutoff_len=cutoff, max_samples=max_samples,
        overwrite_cache=True, output_dir=str(out), overwrite_output_dir=True, logging_steps=1, save_strategy="no",
        report_to="none", plot_loss=False, disable_tqdm=True,
        per_device_train_batch_size=batch, gradient_accumulation_steps=1, learning_rate=1e-4, num_train_epochs=1.0,
        lr_scheduler_type="cosine", warmup_ratio=0.1, seed=seed, bf16=False, fp16=False,
    )
    if not gradient_checkpointing:
        cfg["disable_gradient_checkpointing"] = True
    if spec.get("packing"):
        cfg.update(packing=True, neat_packing=True)
    if spec.get("method") == "lora":
        cfg.update(lora_rank=16, lora_alpha=32, lora_dropout=0.0, lora_target="all")
    return cfg


def ftui_cpu_yaml(lf: dict[str, Any], case: str, out: Path, name: str) -> dict[str, Any]:
    """The same YAML as ftui reads it (vs_llamafactory_gpu.ftui_yaml: LLaMA-Factory's
    logging-only keys dropped, ftui's own added), on the CPU, with the case's processes."""
    nproc = CASES[case].get("nproc", 1)
    cfg = ftui_yaml(lf, out, name, cpu=True)
    cfg.pop("disable_gradient_checkpointing", None)  # ftui keeps none: the key only warns there
    cfg.update(device="cpu", engine="ddp" if nproc > 1 else "single", nproc_per_node=nproc)
    return cfg


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lf_command(lf_python: str, yaml_path: Path, json_path: Path, nproc: int) -> list[str]:
    """The wrapper's command: itself for one process, under torchrun as LLaMA-Factory's launcher starts it for several."""
    wrapper = [str(BENCH / "llamafactory_run.py"), str(yaml_path), str(json_path)]
    if nproc == 1:
        return [lf_python, *wrapper]
    return [lf_python, "-m", "torch.distributed.run", "--nnodes", "1", "--node_rank", "0", "--nproc_per_node", str(nproc),
            "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *wrapper]


def side_env(threads: int, lf: bool, cache: Path) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    if lf:
        env.pop("PYTHONPATH", None)
        env.update(DISABLE_VERSION_CHECK="1", HF_DATASETS_CACHE=str(cache), WANDB_DISABLED="true")
    return env


def ftui_figures(run_dir: Path) -> dict[str, Any]:
    """Train window, tokens, losses, peak RSS and threads of a finished ftui run, from its events."""
    times, tokens, steps = ftui_steps(run_dir)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
    start = next(e for e in events if e.get("event") == "run_start")
    end = next((e for e in reversed(events) if e.get("event") == "run_end"), {})
    first = steps[0]
    begin = first["t"] - first.get("window_steps", 1) * first["step_time_s"]
    peaks: dict[int, int] = {}
    for s in steps:
        for m in s.get("mem", []):
            peaks[m["rank"]] = max(peaks.get(m["rank"], 0), m["peak"])
    return {"status": end.get("status"), "steps": len(steps), "train_s": times[-1] - begin, "real_tokens": sum(tokens),
            "step_s": [s["step_time_s"] for s in steps], "losses": [s["loss"] for s in steps], "peak_rss_bytes": sum(peaks.values()),
            "peak_rss_bytes_per_rank": [peaks[r] for r in sorted(peaks)], "threads": start.get("cpu_threads"),
            "world_size": start.get("world_size")}


def lf_figures(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The same figures from the wrapper's files, one per rank: rank 0's clock and losses, tokens
    and peaks summed over the ranks."""
    r0 = ranks[0]
    n = min(len(r["times"]) for r in ranks)
    return {"status": "completed" if all(r.get("finished") for r in ranks) else "error", "steps": r0.get("steps", n),
            "train_s": r0["times"][n - 1] - r0["train_begin"] if n else None,
            "real_tokens": sum(sum(r["real_tokens"]) for r in ranks), "losses": r0.get("losses", []),
            "step_s": [b - a for a, b in zip([r0["train_begin"], *r0["times"]], r0["times"][:n])],
            "peak_rss_bytes": sum(r.get("peak_rss_bytes") or 0 for r in ranks),
            "peak_rss_bytes_per_rank": [r.get("peak_rss_bytes") for r in ranks], "threads": r0.get("torch_threads"),
            "world_size": r0.get("world_size"), "optim": r0.get("optim"), "gradient_checkpointing": r0.get("gradient_checkpointing"),
            "versions": r0.get("versions")}


def run_ftui_side(cfg: dict[str, Any], yaml_path: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    out = Path(cfg["output_dir"])
    started = time.time()
    try:
        run_dir = run_ftui(write_config(yaml_path, cfg), env=env, timeout=timeout)
        row = {"wall_s": time.time() - started, **ftui_figures(run_dir)}
    except Exception as exc:
        row = {"wall_s": time.time() - started, **failure(exc, out)}
    shutil.rmtree(out, ignore_errors=True)
    return row


def run_lf_side(cfg: dict[str, Any], yaml_path: Path, json_path: Path, lf_python: str, nproc: int, env: dict[str, str],
                timeout: float) -> dict[str, Any]:
    write_config(yaml_path, cfg)
    log = json_path.with_suffix(".log")
    started = time.time()
    rc = run_in_session(lf_command(lf_python, yaml_path, json_path, nproc), env, log, timeout, CHILDREN, cwd=yaml_path.parent)
    wall = time.time() - started
    files = [rank_file(json_path, r, nproc) for r in range(nproc)]
    row: dict[str, Any] = {"wall_s": wall, "rc": rc}
    try:
        row.update(lf_figures([json.loads(f.read_text()) for f in files]))
    except Exception as exc:  # a rank that wrote nothing, or nothing it needs
        row.update(status="error", error=f"{type(exc).__name__}: {exc}")
    if rc != 0:
        row["status"] = "error"
    if row["status"] != "completed":
        row["log_tail"] = log.read_text()[-3000:] if log.exists() else ""
    shutil.rmtree(cfg["output_dir"], ignore_errors=True)
    return row


def ratios(ftui: dict[str, Any], lf: dict[str, Any]) -> dict[str, float]:
    """train_ratio and wall_ratio: LLaMA-Factory's time over ftui's; peak_ratio: ftui's peak over LLaMA-Factory's."""
    out: dict[str, float] = {}
    if ftui.get("train_s") and lf.get("train_s"):
        out["train_ratio"] = lf["train_s"] / ftui["train_s"]
    if ftui.get("wall_s") and lf.get("wall_s"):
        out["wall_ratio"] = lf["wall_s"] / ftui["wall_s"]
    if ftui.get("peak_rss_bytes") and lf.get("peak_rss_bytes"):
        out["peak_ratio"] = ftui["peak_rss_bytes"] / lf["peak_rss_bytes"]
    return out


def summarize(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """A case's repetitions: median figures per side, median ratios, tokens, and the loss verdict."""
    out: dict[str, Any] = {}
    for side in SIDES:
        done = [r[side] for r in reps if r.get(side, {}).get("status") == "completed"]
        if done:
            out[side] = {k: median([d[k] for d in done]) for k in ("train_s", "wall_s", "peak_rss_bytes")}
            out[side].update(real_tokens=sorted({d["real_tokens"] for d in done}), steps=sorted({d["steps"] for d in done}),
                             threads=sorted({d["threads"] for d in done if d.get("threads") is not None}))
    for key in ("train_ratio", "wall_ratio", "peak_ratio"):
        vals = [r["ratios"][key] for r in reps if key in r.get("ratios", {})]
        if vals:
            out[key] = median(vals)
            out[f"{key}_each"] = vals
    both = [r for r in reps if all(r.get(side, {}).get("status") == "completed" for side in SIDES)]
    if both:
        out["same_tokens"] = out["ftui"]["real_tokens"] == out["llamafactory"]["real_tokens"]
        # side a: LLaMA-Factory, side b: ftui (difference = LLaMA-Factory's mean loss - ftui's), paired by repetition
        out["loss"] = agreement([r["llamafactory"]["losses"] for r in both], [r["ftui"]["losses"] for r in both])
    return out


def order(case_index: int, rep: int, sides: list[str]) -> list[str]:
    """Which side goes first alternates from one case to the next and one repetition to the next."""
    return sides if (case_index + rep) % 2 == 0 else sides[::-1]


def table(results: dict[str, Any]) -> str:
    rows = [f"{'case':12} {'train s ftui':>12} {'train s LF':>10} {'LF/ftui':>7} {'wall LF/ftui':>12} "
            f"{'peak MB ftui':>12} {'peak MB LF':>10} {'ftui/LF':>7} {'tokens ftui / LF':>18} loss"]
    for case, c in results["cases"].items():
        s = c.get("summary", {})
        f, lf = s.get("ftui", {}), s.get("llamafactory", {})

        def num(d: dict[str, Any], k: str, scale: float = 1.0, fmt: str = "{:.1f}") -> str:
            return fmt.format(d[k] / scale) if d.get(k) is not None else "-"

        loss = s.get("loss", {})
        verdict = f"{loss['verdict']} (diff {loss['difference']:+.4f}, z {loss['z']:.2f})" if loss.get("z") is not None else loss.get("verdict", "-")
        tokens = f"{'/'.join(map(str, f.get('real_tokens', ['-'])))} / {'/'.join(map(str, lf.get('real_tokens', ['-'])))}"
        rows.append(f"{case:12} {num(f, 'train_s'):>12} {num(lf, 'train_s'):>10} {num(s, 'train_ratio', fmt='{:.2f}x'):>7} "
                    f"{num(s, 'wall_ratio', fmt='{:.2f}x'):>12} {num(f, 'peak_rss_bytes', 2**20, '{:.0f}'):>12} "
                    f"{num(lf, 'peak_rss_bytes', 2**20, '{:.0f}'):>10} {num(s, 'peak_ratio', fmt='{:.2f}x'):>7} {tokens:>18} {verdict}")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--sides", default=",".join(SIDES), help="ftui, llamafactory or both (the first goes first in the first case)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--shape", default="llama-256x4", choices=sorted(SHAPES))
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data/llamafactory"), help="folder with alpaca_en_demo.json")
    ap.add_argument("--lf-python", default="/work/lfvenv/bin/python", help="LLaMA-Factory's venv's interpreter")
    ap.add_argument("--max-samples", type=int, default=600, help="records of padded, packed, lora and ddp2")
    ap.add_argument("--max-samples-vocab", type=int, default=160, help="records of vocab151936")
    ap.add_argument("--cutoff", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of a process; default: the cores over the case's processes")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds for each run")
    ap.add_argument("--lf-gradient-checkpointing", action="store_true",
                    help="leave LLaMA-Factory's default gradient checkpointing on (it recomputes what ftui keeps)")
    ap.add_argument("--tag", default="", help="appended to the results file's name")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny model and data, one repetition, not recorded")
    args = ap.parse_args()
    cases, sides = args.cases.split(","), args.sides.split(",")
    unknown = [c for c in cases if c not in CASES] + [s for s in sides if s not in SIDES]
    if unknown:
        ap.error(f"unknown: {', '.join(unknown)}")
    shape = QUICK_SHAPE if args.quick else SHAPES[args.shape]
    if args.quick:
        args.reps, args.max_samples, args.max_samples_vocab, args.cutoff = 1, 16, 8, 256
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    results: dict[str, Any] = {
        "machine": machine(), "model": dict(shape, shape=None if args.quick else args.shape), "data": "alpaca_en_demo",
        "cutoff_len": args.cutoff, "micro_batch": args.batch, "max_samples": args.max_samples,
        "max_samples_vocab151936": args.max_samples_vocab, "reps": args.reps, "sides": sides, "lf_python": args.lf_python,
        "lf_gradient_checkpointing": args.lf_gradient_checkpointing,
        "quick": args.quick, "cases": {c: {"reps": []} for c in cases}, "finished": False}
    name = "vs_llamafactory_cpu" + args.tag

    def save(finished: bool) -> None:
        results["finished"] = finished
        if not (args.quick or args.no_record):
            record(name, results)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        stop_on_sigterm(CHILDREN, tmp / "runs", save)
        started = time.time()
        models = {}
        for vocab in sorted({CASES[c].get("vocab_size") for c in cases}, key=str):
            mdir = model_dir(tmp / f"model_{vocab or 'demo'}", **shape, **({"vocab_size": vocab} if vocab else {}))
            save_random_weights(mdir, cpu=True)
            models[vocab] = mdir
        ddir = data_dir(args.data, tmp / "data")
        results["setup_s"] = round(time.time() - started, 1)
        for rep in range(args.reps):
            for i, case in enumerate(cases):
                spec = CASES[case]
                nproc = spec.get("nproc", 1)
                threads = args.threads or max(1, cores // nproc)
                samples = args.max_samples_vocab if spec.get("vocab_size") else args.max_samples
                tag = f"{case}_{rep}"
                lf = lf_cpu_yaml(case, models[spec.get("vocab_size")], ddir, tmp / "lf_out" / tag, 42 + rep, samples,
                                 args.cutoff, args.batch, args.lf_gradient_checkpointing)
                ft = ftui_cpu_yaml(lf, case, tmp / "runs" / tag, f"ftui-{tag}")
                row: dict[str, Any] = {"rep": rep, "seed": 42 + rep, "threads_set": threads, "order": order(i, rep, sides)}
                for side in row["order"]:
                    if side == "ftui":
                        row[side] = run_ftui_side(ft, tmp / f"ftui_{tag}.yaml", side_env(threads, False, tmp), args.timeout)
                    else:
                        row[side] = run_lf_side(lf, tmp / f"lf_{tag}.yaml", tmp / f"lf_{tag}.json", args.lf_python, nproc,
                                                side_env(threads, True, tmp / "hf_datasets"), args.timeout)
                    brief = {k: row[side].get(k) for k in ("status", "steps", "train_s", "wall_s", "real_tokens", "peak_rss_bytes", "error")}
                    print(case, rep, side, json.dumps(brief), file=sys.stderr, flush=True)
                row["ratios"] = ratios(row.get("ftui", {}), row.get("llamafactory", {}))
                results["cases"][case]["reps"].append(row)
                results["cases"][case]["summary"] = summarize(results["cases"][case]["reps"])
                save(False)
    results["yaml_example"] = {"llamafactory": lf, "ftui": ft}
    save(True)
    print(table(results), file=sys.stderr)
    print(json.dumps(results, indent=1))
    ok = all(r.get(s, {}).get("status") == "completed" for c in results["cases"].values() for r in c["reps"] for s in sides)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
