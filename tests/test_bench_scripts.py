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


@pytest.mark.slow  # CI time (a bench script's branch, about 10 s)
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


# --- bench/vs_llamafactory.py (ftui against LLaMA-Factory on the CPU): its pure parts, without LLaMA-Factory

def _vs_lf():
    sys.path.insert(0, str(BENCH))
    import vs_llamafactory

    return vs_llamafactory


def test_vs_llamafactory_writes_one_yaml_per_case_that_both_sides_read_alike(tmp_path):
    from ftui.config.preflight import validate_config
    from ftui.config.schema import RunConfig

    vs = _vs_lf()
    from benchlib import SHAPES, model_dir

    mdir = model_dir(tmp_path / "model", **SHAPES["llama-256x4"])
    for case in vs.CASES:
        lf = vs.lf_cpu_yaml(case, mdir, tmp_path / "data", tmp_path / "lf", 43, 600, 1024, 4)
        ft = vs.ftui_cpu_yaml(lf, case, tmp_path / "runs", f"ftui-{case}")
        # the same model, data, batch, cutoff, examples, epoch, schedule and seed on both sides
        for key in ("model_name_or_path", "dataset", "dataset_dir", "template", "cutoff_len", "max_samples", "finetuning_type",
                    "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "num_train_epochs",
                    "lr_scheduler_type", "warmup_ratio", "seed", "bf16", "logging_steps", "save_strategy"):
            assert ft[key] == lf[key], (case, key)
        assert lf["cutoff_len"] == 1024 and lf["per_device_train_batch_size"] == 4 and lf["seed"] == 43 and lf["bf16"] is False
        assert lf["disable_gradient_checkpointing"] is True and "disable_gradient_checkpointing" not in ft
        assert ft["output_dir"] == str(tmp_path / "runs") and lf["output_dir"] == str(tmp_path / "lf")
        packed = case in ("packed", "vocab151936")
        assert lf.get("packing", False) is packed and lf.get("neat_packing", False) is packed  # padded: no packing key at all
        assert ("packing" in lf) is packed
        assert (lf["finetuning_type"], lf.get("lora_rank"), lf.get("lora_target")) == (("lora", 16, "all") if case == "lora" else ("full", None, None))
        assert (ft["engine"], ft["nproc_per_node"], ft["device"]) == (("ddp", 2, "cpu") if case == "ddp2" else ("single", 1, "cpu"))
        _, problems = validate_config(dict(ft, model_init="random"))  # the folder has no weights; the benchmark saves them
        assert not problems, (case, problems)
        cfg = RunConfig.model_validate(dict(ft, model_init="random"))
        assert bool(cfg.packing) is packed and cfg.precision == "fp32" and cfg.max_samples == 600
    assert vs.CASES["vocab151936"]["vocab_size"] == 151936
    # --lf-gradient-checkpointing: LLaMA-Factory's default (on) is left alone, and ftui's copy is the same
    lf_gc = vs.lf_cpu_yaml("padded", mdir, tmp_path / "data", tmp_path / "lf", 42, 600, 1024, 4, gradient_checkpointing=True)
    assert "disable_gradient_checkpointing" not in lf_gc
    assert vs.ftui_cpu_yaml(lf_gc, "padded", tmp_path / "runs", "x") == vs.ftui_cpu_yaml(
        vs.lf_cpu_yaml("padded", mdir, tmp_path / "data", tmp_path / "lf", 42, 600, 1024, 4), "padded", tmp_path / "runs", "x")


def test_vs_llamafactory_starts_ddp_as_llamafactorys_launcher_does_and_reads_each_ranks_file(tmp_path):
    vs = _vs_lf()
    from llamafactory_run import rank_file

    assert vs.lf_command("/lf/python", tmp_path / "c.yaml", tmp_path / "o.json", 1)[:2] == ["/lf/python", str(BENCH / "llamafactory_run.py")]
    cmd = vs.lf_command("/lf/python", tmp_path / "c.yaml", tmp_path / "o.json", 2)
    assert cmd[:3] == ["/lf/python", "-m", "torch.distributed.run"] and cmd[cmd.index("--nproc_per_node") + 1] == "2"
    assert cmd[cmd.index("--nnodes") + 1] == "1" and cmd[cmd.index("--master_addr") + 1] == "127.0.0.1"
    assert cmd[-3:] == [str(BENCH / "llamafactory_run.py"), str(tmp_path / "c.yaml"), str(tmp_path / "o.json")]
    assert rank_file(tmp_path / "o.json", 0, 1) == tmp_path / "o.json"
    assert [rank_file(tmp_path / "o.json", r, 2).name for r in (0, 1)] == ["o.rank0.json", "o.rank1.json"]
    env = vs.side_env(1, True, tmp_path)
    assert "PYTHONPATH" not in env and env["DISABLE_VERSION_CHECK"] == "1" and env["HF_HUB_OFFLINE"] == "1" and env["OMP_NUM_THREADS"] == "1"
    assert vs.order(0, 0, ["ftui", "llamafactory"]) == ["ftui", "llamafactory"] == vs.order(1, 1, ["ftui", "llamafactory"])
    assert vs.order(1, 0, ["ftui", "llamafactory"]) == ["llamafactory", "ftui"] == vs.order(0, 1, ["ftui", "llamafactory"])


def _ftui_run(path, ranks):
    """A finished 2-step ftui run's events: each step 2 s, written at t = 102 and 104."""
    path.mkdir()
    events = [{"v": 1, "t": 100.0, "event": "run_start", "cpu_threads": 2, "world_size": ranks}]
    for step, (t, peaks) in enumerate([(102.0, [500, 300]), (104.0, [700, 200])], start=1):
        events.append({"v": 1, "t": t, "event": "step", "step": step, "loss": 5.0 - step, "tokens": 1000 + step,
                       "step_time_s": 2.0, "window_steps": 1,
                       "mem": [{"rank": r, "allocated": 1, "reserved": 1, "peak": p} for r, p in enumerate(peaks[:ranks])]})
    events.append({"v": 1, "t": 105.0, "event": "run_end", "status": "completed"})
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_vs_llamafactory_reads_the_same_train_window_tokens_and_peaks_on_both_sides(tmp_path):
    vs = _vs_lf()
    ft = vs.ftui_figures(_ftui_run(tmp_path / "run", 2))
    # the first step's window opens 2 s before its event: 100 .. 104
    assert ft["train_s"] == pytest.approx(4.0) and ft["real_tokens"] == 2003 and ft["steps"] == 2 and ft["losses"] == [4.0, 3.0]
    assert ft["peak_rss_bytes_per_rank"] == [700, 300] and ft["peak_rss_bytes"] == 1000  # each rank's largest, summed
    assert vs.ftui_figures(_ftui_run(tmp_path / "one", 1))["peak_rss_bytes"] == 700
    ranks = [{"finished": True, "steps": 2, "train_begin": 10.0, "times": [12.0, 15.0], "real_tokens": [600, 400], "losses": [4.0, 3.0],
              "peak_rss_bytes": 800, "torch_threads": 1, "world_size": 2},
             {"finished": True, "steps": 2, "train_begin": 10.2, "times": [12.1, 15.1], "real_tokens": [401, 602], "losses": [4.0, 3.0],
              "peak_rss_bytes": 900, "torch_threads": 1, "world_size": 2}]
    lf = vs.lf_figures(ranks)
    assert lf["train_s"] == pytest.approx(5.0) and lf["real_tokens"] == 2003 and lf["peak_rss_bytes"] == 1700  # rank 0's clock, sums
    assert lf["step_s"] == pytest.approx([2.0, 3.0]) and ft["step_s"] == [2.0, 2.0]  # each step's time, the first from the window's start
    assert lf["status"] == "completed" and vs.lf_figures([dict(ranks[0], finished=False)])["status"] == "error"
    r = vs.ratios(dict(ft, wall_s=10.0), dict(lf, wall_s=15.0))
    assert r == pytest.approx({"train_ratio": 1.25, "wall_ratio": 1.5, "peak_ratio": 1000 / 1700})
    reps = [{"ftui": dict(ft, wall_s=10.0), "llamafactory": dict(lf, wall_s=15.0), "ratios": r},
            {"ftui": dict(ft, wall_s=10.0, train_s=5.0), "llamafactory": dict(lf, wall_s=15.0), "ratios": {"train_ratio": 1.0}}]
    s = vs.summarize(reps)
    assert s["train_ratio"] == pytest.approx(1.125) and s["train_ratio_each"] == pytest.approx([1.25, 1.0])
    assert s["ftui"]["train_s"] == pytest.approx(4.5) and s["same_tokens"] is True and s["loss"]["verdict"] == "agree"
    assert s["loss"]["stepwise_max_abs_diff"] == 0.0 and s["loss"]["difference"] == 0.0  # the same curves
    failed = vs.summarize([{"ftui": dict(ft, wall_s=10.0), "llamafactory": {"status": "error"}, "ratios": {}}])
    assert "loss" not in failed and "llamafactory" not in failed and "train_ratio" not in failed


def test_the_loss_verdict_tells_a_different_order_from_a_different_loss():
    import random

    sys.path.insert(0, str(BENCH))
    from loss_agreement import agreement, step_sigma, window_means

    def curve(seed, offset=0.0, n=150):
        rng = random.Random(seed)  # a falling curve with per-step scatter 0.2: the order only moves the scatter
        return [offset + 2.0 + 8.0 * 0.97 ** i + rng.gauss(0, 0.2) for i in range(n)]

    same = agreement([curve(1), curve(2)], [curve(3), curve(4)])
    assert same["verdict"] == "agree" and same["z"] < 3 and same["between_reps_se"] is not None
    # the per-step scatter is read off successive differences, so the falling trend does not inflate it
    assert step_sigma(curve(5)) == pytest.approx(0.2, rel=0.2)
    assert same["per_step_se"] == pytest.approx(0.2 * (2 / 300) ** 0.5, rel=0.25) and same["noise"] >= same["per_step_se"]
    shifted = agreement([curve(1, 0.3), curve(2, 0.3)], [curve(3), curve(4)])
    assert shifted["verdict"] == "differ" and shifted["difference"] == pytest.approx(0.3, abs=0.1) and shifted["z"] > 3
    one = agreement([curve(1)], [curve(3, 0.01)])  # one repetition: the per-step estimate alone
    assert one["between_reps_se"] is None and one["noise"] == one["per_step_se"] and one["verdict"] == "agree"
    # sides of different lengths (packing made different rows): epoch means and fifths still compare; no step-for-step figure
    uneven = agreement([curve(1, n=120)], [curve(3, n=150)])
    assert uneven["stepwise_max_abs_diff"] is None and len(uneven["a"]["window_means"]) == 5
    assert agreement([[1.0, 2.0]], [[1.0, 2.5]])["stepwise_max_abs_diff"] == pytest.approx(0.5)
    assert window_means([1, 1, 2, 2, 3, 3, 4, 4, 5, 5]) == [1, 2, 3, 4, 5] and window_means([4.0, 2.0]) == [4.0, 2.0]
    assert agreement([], [[1.0]])["verdict"] == "no losses on one side"


@pytest.mark.slow  # a bench's smoke run (about 20 s; CI time): the tests above check its parts without training
def test_vs_llamafactory_bench_runs_the_ftui_side():
    out = run("vs_llamafactory.py", "--sides", "ftui", "--cases", "padded")
    (rep,) = out["cases"]["padded"]["reps"]
    assert rep["ftui"]["status"] == "completed" and rep["ftui"]["train_s"] > 0 and rep["ftui"]["real_tokens"] > 0
    assert rep["ftui"]["threads"] == rep["threads_set"] and out["finished"] is True and out["quick"] is True


def test_the_loss_verdict_is_undetermined_without_a_noise_estimate_and_never_finer_than_the_logged_digits():
    sys.path.insert(0, str(BENCH))
    from loss_agreement import RESOLUTION, agreement

    two_steps = agreement([[6.40, 6.30]], [[6.41, 6.30]])  # one repetition, 2 steps: no scatter to read
    assert two_steps["verdict"] == "undetermined" and two_steps["noise"] == RESOLUTION == 1e-4
    # one step a repetition, the same batch whatever the seed: equal to the 4 decimals LLaMA-Factory logs
    one_batch = agreement([[11.9338], [11.9338]], [[11.933825], [11.933825]])
    assert one_batch["verdict"] == "agree" and one_batch["z"] == pytest.approx(0.25)
    assert agreement([[11.9338], [11.9338]], [[11.95], [11.95]])["verdict"] == "undetermined"


# --- bench/serve_load.py (ftui serve under concurrent load, issue 44)

def _serve_load():
    sys.path.insert(0, str(BENCH))
    import serve_load

    return serve_load


def test_serve_load_reads_its_arguments_and_sums_up_the_requests(tmp_path, capsys):
    sl = _serve_load()
    args = sl.parse_args([])
    assert (args.shape, args.requests, args.concurrency, args.max_tokens, args.queue, args.batch, args.device) == (
        "demo", 64, 8, 64, 8, 8, "cpu")
    assert sl.parse_args(["--batch", "1"]).batch == 1
    quick = sl.parse_args(["--quick", "--shape", "qwen2.5-0.5b", "--device", "auto"])
    assert (quick.requests, quick.concurrency, quick.max_tokens, quick.shape, quick.device) == (8, 4, 8, "qwen2.5-0.5b", "auto")
    with pytest.raises(SystemExit):
        sl.parse_args(["--concurrency", "0"])
    results = [{"status": 200, "stream": False, "ttft_s": 1.0, "tokens": 10}, {"status": 200, "stream": True, "ttft_s": 0.2, "tokens": 6},
               {"status": 200, "stream": True, "ttft_s": 0.4, "tokens": 4, "rejected": 2}, {"status": 503, "stream": False},
               {"status": 0, "stream": True, "error": "ConnectError: refused"}]
    s = sl.summarize(results, 2.0)
    assert (s["requests"], s["answered"], s["streamed"], s["rejected_429"], s["errors"]) == (5, 3, 2, 2, 2)
    assert s["requests_per_s"] == 1.5 and s["generated_tokens"] == 20 and s["generated_tokens_per_s"] == 10.0
    assert s["ttft_s_p50"] == pytest.approx(0.4) and s["ttft_s_p95"] == pytest.approx(0.94)
    assert sl.summarize([], 0.0)["ttft_s_p50"] is None
    assert sl.sse_data('data: {"choices": [{"delta": {"content": "x"}}]}') == {"choices": [{"delta": {"content": "x"}}]}
    assert sl.sse_data("data: [DONE]") is None and sl.sse_data(": ping") is None and sl.sse_data("data: {bad") is None
    sl.write_result({"answered": 3}, str(tmp_path / "deep" / "serve_load.json"))  # --out: what a device call brings back
    assert json.loads((tmp_path / "deep" / "serve_load.json").read_text()) == {"answered": 3} == json.loads(capsys.readouterr().out)


def test_the_gpu_session_runs_serve_load_with_arguments_it_takes():
    import re

    text = (BENCH / "gpu_session.sh").read_text()
    call = re.search(r"\"\$PY\" bench/serve_load\.py ([^>]*)>", text.replace("\\\n", " ")).group(1)
    words = subprocess.run(["bash", "-c", 'OUT=/tmp; eval "set -- $CALL"; printf "%s\\n" "$@"'], env={**os.environ, "CALL": call},
                           capture_output=True, text=True, check=True).stdout.splitlines()  # the words bash passes, defaults filled in
    args = _serve_load().parse_args(words)
    assert (args.shape, args.device, args.requests, args.concurrency, args.out) == ("qwen2.5-0.5b", "auto", 64, 8, "/tmp/serve_load.json")
    assert 'timeout "${SERVE_S:-120}"' in text


@pytest.mark.slow  # a bench's smoke run (CI time): tests/test_serve.py drives the server itself
def test_serve_load_bench_runs_against_a_serve_job(tmp_path):
    result = run("serve_load.py", "--out", str(tmp_path / "serve_load.json"))
    assert result["answered"] == 8 and result["errors"] == 0  # a 429 is waited out and sent again
    assert result["generated_tokens"] > 0 and result["ttft_s_p50"] > 0 and result["peak_rss_bytes"] > 0
    assert result["device"] == "cpu" and result["run_end"]["status"] == "stopped" and result["finished"]
    assert result["max_batch"] == 8
    assert json.loads((tmp_path / "serve_load.json").read_text()) == result
