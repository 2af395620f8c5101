"""The benchmark scripts run in a short mode so they cannot rot (no timing assertions)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run(script: str, *args: str) -> dict | list:
    out = subprocess.run([sys.executable, str(BENCH / script), *args, "--quick"], capture_output=True, text=True, timeout=300, check=True).stdout
    return json.loads(out)


def test_first_frame_bench_runs():
    assert run("tui_first_frame.py")["first_frame_s_median"] > 0


def test_attach_bench_runs():
    result = run("tui_attach.py", "3000")
    assert result["step_events"] == 3000 and result["whole_history_s"] >= result["first_frame_with_last_step_s"] > 0


@pytest.mark.slow  # a bench's smoke run (CI time); the bench itself is run by hand
@pytest.mark.dist
def test_watch_cpu_bench_runs():
    (result,) = run("tui_watch_cpu.py", "2")
    assert result["steps_seen_in_window"] >= 0 and result["cpu_s"] >= 0


@pytest.mark.slow  # CI time: test_gpu_set_bench_runs_the_trainer_and_ftui runs the same Trainer and ftui machinery
def test_throughput_bench_runs_both_sides():
    result = run("throughput.py", "--modes", "single")
    single = result["modes"]["single"]
    assert set(single["real_tokens_per_s_median"]) == {"baseline", "ftui_padded", "ftui_packed"}
    assert all(v > 0 for v in single["real_tokens_per_s_median"].values())
    assert single["ratio_median"]["packed_vs_baseline"] > 0


@pytest.mark.slow  # CI time: run with -m slow
def test_monitor_overhead_bench_runs():
    result = run("monitor_overhead.py")
    (pair,) = result["pairs"]
    assert pair["every_step_step_s"] > 0 and pair["first_and_last_only_step_s"] > 0


@pytest.mark.slow  # a bench's smoke run (CI time); tests/test_plan.py checks the planner itself
def test_planner_check_bench_runs():
    result = run("planner_check.py")
    assert [c["case"] for c in result["cases"]] == ["full fp32 single"]
    for case in result["cases"]:
        assert case["model_peak_bytes"] > 0 and case["estimated_gib"] > 0


@pytest.mark.slow  # CI time: run with -m slow; test_chunked_loss covers both loss paths
def test_loss_memory_bench_runs_both_paths():
    out = run("loss_memory.py")
    (row,) = out["reps"]
    assert row["chunked_peak_bytes"] > 0 and row["full_logits_peak_bytes"] > 0
    assert row["chunked_planned_bytes"] > 0 and row["full_logits_planned_bytes"] > 0


@pytest.mark.slow  # CI time: run with -m slow; test_preference_chunked covers both log-probability paths
def test_preference_memory_bench_runs_both_paths():
    (row,) = run("preference_memory.py")["reps"]
    assert row["chunked_micro_batch_bytes"] > 0 and row["full_micro_batch_bytes"] > 0
    assert row["chunked_loss"] == pytest.approx(row["full_loss"], rel=1e-4)


def test_run_summaries_bench_runs():
    result = run("run_summaries.py")
    assert result["steps"] == 20000 and all(r["seconds"] > 0 for r in result["results"].values())


@pytest.mark.slow  # a bench's smoke run (CI time): test_chunked_loss.py checks the same parity on runs
def test_loss_parity_bench_runs():
    result = run("loss_parity.py")
    assert len(result["single-full"]["loss"]) == 2 and len(result["single-full"]["eval_loss"]) == 2


@pytest.mark.slow  # a bench's smoke run (CI time): the GPU set is run on a GPU by hand
def test_gpu_set_bench_runs_the_trainer_and_ftui(tmp_path):
    out = run("gpu_set.py", "--out", str(tmp_path))
    cases = out["cases"]
    assert set(cases) == {"trainer_fp32_padded", "fp32_packed"}
    assert all(c["status"] == "completed" and c["tokens_per_s"] > 0 for c in cases.values())
    assert cases["fp32_packed"]["vs_trainer"] > 0 and cases["fp32_packed"]["planned_bytes"] > 0
    # run_start says which: on the CPU, packed rows run SDPA over each example alone (ftui.runner.batch_layout)
    assert cases["fp32_packed"]["attention"] == "sdpa, each example alone" and cases["fp32_packed"]["attention_fallbacks"] == []
    [written] = tmp_path.glob("gpu_set_*_demo.json")  # --out: what a device call brings back
    assert json.loads(written.read_text()) == out and out["finished"] is True


def test_the_profile_table_names_the_operators_a_call_spends_its_time_in():
    import torch

    sys.path.insert(0, str(BENCH))
    from benchlib import profile_table

    a = torch.randn(256, 256)
    rows = profile_table(lambda: [a @ a for _ in range(20)], top=5)
    assert rows and len(rows) <= 5 and rows[0]["self_ms"] >= rows[-1]["self_ms"]
    assert any(r["name"] in ("aten::mm", "aten::matmul") and r["calls"] >= 20 for r in rows), rows


def test_the_gpu_session_script_parses_and_names_cases_gpu_set_knows():
    """bench/gpu_session.sh is run on a lent GPU only: here, its shell must parse and every case it
    asks gpu_set.py for must exist (a renamed case would cost a device call)."""
    import re

    script = BENCH / "gpu_session.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    cases = re.search(r"CASES=\$\{CASES:-([\w,]+)\}", script.read_text()).group(1).split(",")
    sys.path.insert(0, str(BENCH))
    from gpu_set import CASES, TRAINER

    assert cases[0] == TRAINER and len(cases) > 3
    assert [c for c in cases[1:] if c not in CASES] == []
    # and the attention cases it asks packed_attention.py for are among those it times
    attn = re.search(r"packed_attention\.py .*--attn ([\w,]+)", script.read_text()).group(1).split(",")
    known = re.search(r'"--attn", default="([\w,]+)"', (BENCH / "packed_attention.py").read_text()).group(1).split(",")
    assert attn and [a for a in attn if a not in known] == []
    # several GPUs (issue 41): every engine's case exists and runs on all the GPUs, with the
    # single-GPU references bench/multi_gpu_plan.py reads the measured efficiency against
    from gpu_set import SEVERAL_GPUS
    from multi_gpu_plan import ENGINES, REFERENCE_CASE

    multi = re.search(r"MULTI_CASES=\$\{MULTI_CASES:-([\w,]+)\}", script.read_text()).group(1).split(",")
    assert [c for c in multi if c not in CASES] == []
    assert sorted(CASES[c]["engine"] for c in multi if c in SEVERAL_GPUS) == sorted(ENGINES)
    assert set(REFERENCE_CASE.values()) <= set(multi) | set(cases)
    assert "multi_gpu_plan.py --measured" in script.read_text()


def test_the_gpu_session_script_skips_the_multi_gpu_cases_on_one_gpu_and_says_so(tmp_path):
    """nvidia-smi -L listing one GPU: the several-GPU part says it skips (SINGLE=0: nothing else runs)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text('#!/bin/sh\n[ "$1" = "-L" ] && echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\nexit 0\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"), "PY": sys.executable,
           "NO_WHEELS": "1", "SINGLE": "0"}
    proc = subprocess.run(["bash", str(BENCH / "gpu_session.sh")], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "one GPU (nvidia-smi -L lists 1): the multi-GPU cases (DDP, FSDP2, ZeRO-2, ZeRO-3) need several; skipped" in proc.stdout
    assert not list((tmp_path / "out").glob("gpu_set_*.json"))


def test_the_fa2_check_runs_only_on_cuda_and_says_so():
    """bench/fa2_check.py (fa2 against SDPA with torch's real kernel) needs a GPU; here it must
    at least start, import what it uses and say what it needs (a slip would cost a device call)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU message, and a CUDA GPU is here: the check itself runs in bench/gpu_session.sh")
    proc = subprocess.run([sys.executable, str(BENCH / "fa2_check.py")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "needs a CUDA GPU" in proc.stderr
