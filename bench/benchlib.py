"""Shared pieces of the training benchmarks: the machine a result ran on, a synthetic
dataset of varied lengths, a random-weight model directory, and tokens/s from a run.

Tokens/s is computed the same way for ftui and for the baseline: real (non-padding) tokens
of the steps after the first ``warmup`` ones, over the wall time between the end of step
``warmup`` and the end of the last step. Start-up (imports, model build) is not counted.
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
DEMO_MODEL_DIR = BENCH.parent / "ftui" / "presets" / "demo" / "model"


# Model shapes for the GPU benchmarks: with random weights (the published configs' dimensions; Llama architecture,
# which is what Qwen2 is apart from q/k/v biases).
SHAPES: dict[str, dict[str, Any]] = {
    "demo": {},
    # the CPU comparisons' model (throughput.py's, and issue 41's against LLaMA-Factory): the demo's 640-token vocabulary
    "llama-256x4": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=1024),
    "small": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                  num_key_value_heads=4, max_position_embeddings=4096, vocab_size=32000),
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, max_position_embeddings=32768, vocab_size=151936,
                         tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, max_position_embeddings=32768, vocab_size=151936,
                         tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6),
    # Qwen2.5-7B's published config (untied LM head): issue 41's multi-GPU plan (bench/multi_gpu_plan.py)
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, max_position_embeddings=32768, vocab_size=152064,
                       tie_word_embeddings=False, rope_theta=1000000.0, rms_norm_eps=1e-6),
}


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"host": platform.node(), "arch": platform.machine(), "cores": os.cpu_count(),
                            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M")}
    try:
        import psutil

        info["ram_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        info["gpus"] = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        info["gpus"] = []
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        pass
    return info


def record(name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


WORDS = ("the model learns a short answer from each example while the loss falls and the gradient "
         "flows through every layer of the network on this small machine with two cores and no GPU "
         "tokens per second matter more than anything else when people pay for time on shared servers").split()


def varied_dataset(path: Path, n: int, max_words: int, seed: int = 0) -> Path:
    """Alpaca records whose lengths vary as real SFT data does: many short, a long tail."""
    rng = random.Random(seed)

    def text(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(max(1, k)))

    records = []
    for _ in range(n):
        total = min(max_words, int(rng.lognormvariate(3.6, 0.8)))
        q = max(2, total // 4)
        records.append({"instruction": text(q), "input": "", "output": text(total - q)})
    path.write_text(json.dumps(records))
    return path


def model_dir(path: Path, **config: Any) -> Path:
    """A model directory: the demo's tokenizer and chat template with a config of our own."""
    path.mkdir(parents=True, exist_ok=True)
    for f in DEMO_MODEL_DIR.iterdir():
        if f.name != "config.json":
            shutil.copy(f, path / f.name)
    base = json.loads((DEMO_MODEL_DIR / "config.json").read_text())
    base.update(config)
    (path / "config.json").write_text(json.dumps(base, indent=1))
    return path


def write_config(path: Path, cfg: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_ftui(config: Path, env: dict[str, str] | None = None, timeout: float = 3600, cwd: Path | None = None) -> Path:
    """``ftui train CONFIG`` to the end; returns the run directory. ``cwd``: another ftui
    checkout to run (its directory comes first on the path of the command and of the ranks it
    starts, ahead of PYTHONPATH and the installed ftui)."""
    cfg = yaml.safe_load(config.read_text())
    root = Path(cfg["output_dir"])
    before = set(root.iterdir()) if root.exists() else set()
    proc = subprocess.run([sys.executable, "-c", "import sys; from ftui.cli.main import main; sys.exit(main())", "train", str(config)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    new = sorted(set(root.iterdir()) - before) if root.exists() else []
    if proc.returncode != 0 or not new:
        log = (new[0] / "train.log").read_text()[-3000:] if new and (new[0] / "train.log").exists() else ""
        raise RuntimeError(f"ftui train failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}\n{log}")
    return new[0]


def run_in_session(cmd: list[str], env: dict[str, str], log: Path, timeout: float,
                   children: list[subprocess.Popen] | None = None, cwd: Path | None = None) -> int | str:
    """Runs ``cmd`` in a session of its own, its output to ``log``: the exit code, or "timeout"
    after killing its whole process group (a launcher's ranks with it). ``children`` holds the
    process while it runs, for a signal handler to kill."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=cwd)
        if children is not None:
            children.append(proc)
        try:
            rc: int | str = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "timeout"
        finally:
            if children is not None:
                children.remove(proc)
    return rc


def ftui_steps(run_dir: Path) -> tuple[list[float], list[int], list[dict]]:
    """(end time, global real tokens) of every step event (logging_steps must be 1), and the events."""
    times, tokens, steps = [], [], []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev.get("event") == "step":
            times.append(ev["t"])
            tokens.append(ev["tokens"])
            steps.append(ev)
    return times, tokens, steps


def tokens_per_s(times: list[float], tokens: list[int], warmup: int) -> float:
    if len(times) <= warmup + 1:
        raise ValueError(f"need more than {warmup + 1} steps, got {len(times)}")
    return sum(tokens[warmup + 1:]) / (times[-1] - times[warmup])


def baseline_steps(out: Path, world: int) -> tuple[list[float], list[int]]:
    """Step end times of rank 0 and real tokens summed over the ranks."""
    ranks = [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in range(world)]
    n = min(len(r["times"]) for r in ranks)
    return ranks[0]["times"][:n], [sum(r["real_tokens"][i] for r in ranks) for i in range(n)]


def run_baseline(config: Path, out: Path, world: int, env: dict[str, str] | None = None, timeout: float = 3600) -> tuple[list[float], list[int]]:
    script = str(BENCH / "baseline_trainer.py")
    cmd = [sys.executable, script, str(config), str(out)] if world == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}", script, str(config), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"baseline failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return baseline_steps(out, world)


def median(xs: list[float]) -> float:
    s = sorted(xs)
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2


def profile_table(fn, top: int = 25) -> list[dict[str, Any]]:
    """Where one call of ``fn`` spends its time, by operator and kernel: torch.profiler's
    table (the library's own accounting, not a hand-made timer), the ``top`` rows by self
    time on the GPU when there is one (else on the CPU), as JSON-ready rows."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()

    def self_time(e: Any) -> float:  # microseconds; torch < 2.4 names the GPU's field self_cuda_time_total
        if not cuda:
            return e.self_cpu_time_total
        return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0)

    events = sorted(prof.key_averages(), key=self_time, reverse=True)
    total = sum(self_time(e) for e in events) or 1.0
    return [{"name": e.key[:120], "self_ms": round(self_time(e) / 1000, 3), "share": round(self_time(e) / total, 4),
             "calls": e.count} for e in events[:top]]


def stop_on_sigterm(children: list[subprocess.Popen], runs: Path, save: Any) -> None:
    """On SIGTERM (a device call's time limit, a kill): kills the process group of each of
    ``children`` still running, stops ftui's live runs under ``runs``, saves what finished
    (``save(False)``) and exits 128 + the signal, so a cut benchmark keeps its results."""
    import contextlib
    import signal

    def cut(signum: int, _frame: Any) -> None:
        for proc in list(children):
            with contextlib.suppress(Exception):
                os.killpg(proc.pid, signal.SIGKILL)
        from gpu_set import stop_live_runs

        stop_live_runs(runs)
        save(False)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, cut)
