"""Evaluate & Predict as jobs (issue 16): `ftui predict` and `ftui eval` on the trained demo,
against its base; in order across processes; a predict job that outlives the CLI that started
it, and one stopped half way that keeps what it answered; LLaMA-Factory's predict YAML through
`ftui train`. (The BLEU / ROUGE definitions against LLaMA-Factory: tests/test_text_metrics.py.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import wait_for
from ftui.machine.gpu import gpu_count
from ftui.rundir.paths import EVAL_RESULTS_FILE, EVENTS_FILE, PREDICT_RESULTS_FILE, PREDICTIONS_FILE

FTUI = [sys.executable, "-m", "ftui.cli.main"]
QUICK = ["--temperature", "0", "--max-new-tokens", "40"]


def events_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / EVENTS_FILE).read_text().splitlines() if line.strip()]


def run_cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*FTUI, *args], capture_output=True, text=True, timeout=timeout)


def job_dir_of(proc: subprocess.CompletedProcess) -> Path:
    """The job directory the CLI printed (its last line)."""
    return Path(proc.stdout.strip().splitlines()[-1].strip())


def predictions(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / PREDICTIONS_FILE).read_text().splitlines()]


def test_predict_scores_the_trained_demo_far_above_its_base(demo_run):
    trained = run_cli("predict", str(demo_run), "--dataset", "ftui_demo", "--max-samples", "24", *QUICK)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    base = run_cli("predict", str(demo_run), "--base", "--dataset", "ftui_demo", "--max-samples", "24", *QUICK)
    assert base.returncode == 0, base.stdout + base.stderr
    good, bad = (json.loads((job_dir_of(p) / PREDICT_RESULTS_FILE).read_text()) for p in (trained, base))
    for results in (good, bad):
        assert {"predict_bleu-4", "predict_rouge-1", "predict_rouge-2", "predict_rouge-l"} <= set(results)
        assert results["predict_samples"] == 24 and results["complete"] and results["predict_samples_per_second"] > 0
    # the demo learnt its answers: BLEU-4 and ROUGE-L at least 60 points above the random base's
    assert good["predict_bleu-4"] > 80 and good["predict_bleu-4"] - bad["predict_bleu-4"] > 60
    assert good["predict_rouge-l"] - bad["predict_rouge-l"] > 60
    rows = predictions(job_dir_of(trained))
    assert len(rows) == 24 and all(set(r) == {"prompt", "predict", "label"} for r in rows)
    assert job_dir_of(trained).parent == demo_run / "predict"
    assert "<|im_start|>user" in rows[0]["prompt"] and rows[0]["predict"].strip() == rows[0]["label"].strip()


def test_eval_reports_loss_and_perplexity_and_marks_the_run(demo_run, tmp_path):
    run = tmp_path / demo_run.name
    # an earlier predict job's rendezvous file (.store-*) may still be going away as its last
    # process exits: not part of the run, and copying it raced its removal in a CI run
    shutil.copytree(demo_run, run, ignore=shutil.ignore_patterns(".store-*"))
    proc = run_cli("eval", str(run), "--dataset", "ftui_demo", "--max-samples", "16")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((job_dir_of(proc) / EVAL_RESULTS_FILE).read_text())
    assert results["examples"] == 16 and results["eval_loss"] < 0.5 and results["eval_perplexity"] < 1.7
    assert [(e["done"], e["total"]) for e in events_of(job_dir_of(proc)) if e["event"] == "progress"][-1] == (16, 16)
    assert "16/16" in proc.stdout  # the bar ends full (it stayed at 0/16 when the scoring took under a few seconds)
    last = events_of(run)[-1]  # the run's own events: the dashboard draws the point at the model's step
    steps = [e["step"] for e in events_of(run) if e["event"] == "step"]
    assert last["event"] == "eval" and last["step"] == steps[-1] and last["eval_loss"] == results["eval_loss"]


@pytest.mark.slow  # CI time: the one-process jobs above cover the job; this the sharing
@pytest.mark.dist
def test_two_processes_share_the_examples_and_keep_the_dataset_order(demo_run, tmp_path):
    one = run_cli("predict", str(demo_run), "--dataset", "ftui_demo", "--max-samples", "7", *QUICK)
    two = run_cli("predict", str(demo_run), "--dataset", "ftui_demo", "--max-samples", "7", "--nproc-per-node", "2", *QUICK)
    assert one.returncode == 0 and two.returncode == 0, two.stdout + two.stderr
    assert predictions(job_dir_of(two)) == predictions(job_dir_of(one))
    start = next(e for e in events_of(job_dir_of(two)) if e["event"] == "job_start")
    assert start["world_size"] == 2


def test_a_predict_job_outlives_its_cli_and_a_stopped_one_keeps_its_answers(demo_run, lf_data):
    from ftui.jobs.launch import stop_run

    cmd = [*FTUI, "predict", str(demo_run), "--dataset", "alpaca_en_demo", "--dataset-dir", str(lf_data),
           "--max-samples", "300", "--batch-size", "1", "--temperature", "0", "--max-new-tokens", "24"]
    jobs = demo_run / "predict"
    earlier = set(jobs.iterdir()) if jobs.is_dir() else set()
    cli = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert wait_for(lambda: jobs.is_dir() and len(set(jobs.iterdir()) - earlier) == 1, timeout=120)
    job = (set(jobs.iterdir()) - earlier).pop()
    assert wait_for(lambda: (job / EVENTS_FILE).is_file() and '"progress"' in (job / EVENTS_FILE).read_text(), timeout=300)
    os.killpg(cli.pid, signal.SIGKILL)  # the app (here: the CLI following the job) dies
    cli.wait()
    before = sum(1 for e in events_of(job) if e["event"] == "progress")
    assert wait_for(lambda: sum(1 for e in events_of(job) if e["event"] == "progress") > before, timeout=300)  # still going
    stop_run(job)
    assert wait_for(lambda: any(e["event"] == "run_end" for e in events_of(job)), timeout=300)
    end = events_of(job)[-1]
    assert end["event"] == "run_end" and end["status"] == "stopped", end
    rows = predictions(job)
    results = json.loads((job / PREDICT_RESULTS_FILE).read_text())
    assert 0 < len(rows) < 300 and results["predict_samples"] == len(rows) and not results["complete"]
    assert all(r["label"] for r in rows)


def predict_yaml(demo_run: Path, tmp_path: Path) -> dict:
    return {"model_name_or_path": str(demo_run / "final"), "stage": "sft", "do_predict": True, "predict_with_generate": True,
            "finetuning_type": "full", "eval_dataset": "ftui_demo", "cutoff_len": 256, "max_samples": 4,
            "output_dir": str(tmp_path / "out"), "per_device_eval_batch_size": 2, "do_sample": False, "max_new_tokens": 40}


@pytest.mark.slow  # CI time: predict jobs run in the tests above, and the YAML's reading is tested below
def test_llamafactorys_predict_yaml_runs_a_predict_job(demo_run, tmp_path):
    path = tmp_path / "predict.yaml"
    path.write_text(yaml.safe_dump(predict_yaml(demo_run, tmp_path)))
    proc = run_cli("train", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = job_dir_of(proc)
    assert job.parent == tmp_path / "out" / "predict" and len(predictions(job)) == 4
    assert json.loads((job / PREDICT_RESULTS_FILE).read_text())["predict_bleu-4"] > 80


def test_llamafactorys_predict_yaml_becomes_a_predict_job_and_without_generation_is_refused(demo_run, tmp_path, monkeypatch):
    import ftui.jobs.offline as offline
    from ftui.cli.main import main

    started = []
    monkeypatch.setattr(offline, "start_job", lambda kind, job_dir, cfg: started.append((kind, job_dir, cfg)))
    path = tmp_path / "predict.yaml"
    path.write_text(yaml.safe_dump(predict_yaml(demo_run, tmp_path)))
    assert main(["train", str(path), "--detach"]) == 0
    (kind, job_dir, cfg), = started
    spec = json.loads((job_dir / "job.json").read_text())
    assert kind == "predict" and job_dir.parent == tmp_path / "out" / "predict" and cfg.cutoff_len == 256
    assert cfg.max_samples == 4 and spec["generation"]["batch_size"] == 2 and spec["generation"]["temperature"] == 0
    assert spec["generation"]["max_new_tokens"] == 40 and spec["source"]["model"] == str(demo_run / "final")
    path.write_text(yaml.safe_dump(predict_yaml(demo_run, tmp_path) | {"predict_with_generate": False}))
    refused = run_cli("train", str(path))
    assert refused.returncode == 2 and "predict_with_generate" in refused.stderr


@pytest.mark.parametrize("args,says", [
    (["--checkpoint", "999"], "999"),
    (["--model", "/nonexistent"], "give a run"),
    (["--base", "--checkpoint", "1"], "not both"),
    (["--batch-size", "0"], "--batch-size must be 1 or more"),
    (["--dataset", "nosuch", "--dataset-dir", "/nonexistent"], "'nosuch' is not a file, and there is no /nonexistent/dataset_info.json"),
    (["--dataset", ","], "no dataset given"),
    (["--device", "cuda:1"], "invalid choice"),
    pytest.param(["--device", "cuda"], "no CUDA GPU was found",
                 marks=pytest.mark.skipif(gpu_count() > 0, reason="checks the refusal without a CUDA GPU, and this machine has one")),
])
def test_predict_usage_problems_exit_2_before_any_job(demo_run, args, says):
    from ftui.jobs.offline import list_jobs

    before = list_jobs(demo_run, "predict")
    proc = run_cli("predict", str(demo_run), "--dataset", "ftui_demo", *args, timeout=120)
    assert proc.returncode == 2 and says in " ".join(proc.stderr.split()), proc.stderr
    assert list_jobs(demo_run, "predict") == before  # refused before its directory was made


def test_eval_takes_its_own_cutoff_len_and_batch_and_predict_its_cutoff_len(tmp_path, monkeypatch):
    """--cutoff-len (both) and eval's --batch-size replace the run's settings in the job's config:
    the options the jobs' failure hints name."""
    import ftui.jobs.offline as offline
    from ftui.cli.main import main

    model = tmp_path / "model"  # a model directory as far as the CLI looks (the job is not started)
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}))
    (model / "model.safetensors").write_bytes(b"")
    (model / "tokenizer.json").write_text("{}")
    started = []
    monkeypatch.setattr(offline, "start_job", lambda kind, job_dir, cfg: started.append((kind, cfg)))
    data = str(Path(__file__).parent / "data" / "farm_qa.json")
    common = ["--model", str(model), "--dataset", data, "--detach", "--root", str(tmp_path / "runs")]
    assert main(["eval", *common, "--cutoff-len", "64", "--batch-size", "3"]) == 0
    assert main(["predict", *common, "--cutoff-len", "96", "--batch-size", "5"]) == 0
    (_, eval_cfg), (_, predict_cfg) = started
    assert (eval_cfg.cutoff_len, eval_cfg.per_device_eval_batch_size) == (64, 3)
    assert predict_cfg.cutoff_len == 96 and predict_cfg.per_device_eval_batch_size == 1  # predict's batch is generation's
    assert main(["eval", *common, "--cutoff-len", "4"]) == 2 and len(started) == 2


def test_a_jobs_failure_hint_names_the_jobs_options_not_trainings(tmp_path):
    import torch

    from conftest import tiny_config
    from ftui.runner.data import DataFormatError
    from ftui.runner.faults import hint_for

    cfg = tiny_config(tmp_path, per_device_eval_batch_size=4, cutoff_len=256)
    oom = torch.OutOfMemoryError("CUDA out of memory")
    assert "--max-new-tokens" in hint_for(oom, cfg, "predict") and "gradient_checkpointing" not in hint_for(oom, cfg, "predict")
    assert "--batch-size (now 4)" in hint_for(oom, cfg, "eval") and "--cutoff-len (now 256)" in hint_for(oom, cfg, "eval")
    assert "gradient_checkpointing" in hint_for(oom, cfg, "train")
    assert "--cutoff-len N" in hint_for(DataFormatError("no usable examples"), cfg, "eval")
    unreadable = PermissionError(13, "Permission denied", "/runs/x/final/model.safetensors")
    assert "final/" in hint_for(unreadable, cfg, "export") and "model_name_or_path" not in hint_for(unreadable, cfg, "export")
    assert "model_name_or_path" in hint_for(unreadable, cfg, "train")


@pytest.mark.parametrize("given,expected", [([], 512), (["--cutoff-len", "256"], 256)])
def test_a_model_outside_a_run_gets_a_cutoff_len_it_allows_or_the_one_given(demo_run, tmp_path, monkeypatch, given, expected):
    """`ftui predict --model DIR` of a model made for 512 positions (the demo's, exported): the
    default 2048 refused it, and --cutoff-len was not read before that refusal."""
    import ftui.jobs.offline
    from ftui.cli import main as cli
    started = []
    monkeypatch.setattr(ftui.jobs.offline, "start_job", lambda kind, job_dir, cfg: started.append(cfg) or {})
    monkeypatch.setattr(cli, "_follow_job", lambda *a, **k: (type("S", (), {"status": "completed"})(), False))
    code = cli.main(["predict", "--model", str(demo_run / "final"), "--dataset", "ftui_demo", "--root", str(tmp_path), *given])
    assert code == 0 and [cfg.cutoff_len for cfg in started] == [expected]


def test_a_dataset_of_another_stage_is_refused_before_the_job_starts(demo_run, tmp_path):
    """A ranking set for the demo (an sft run): refused with exit 2 before any job, as ftui train
    refuses it (the job started and failed with exit 1)."""
    from ftui.jobs.offline import list_jobs

    (tmp_path / "pairs.json").write_text('[{"instruction": "q", "chosen": "a", "rejected": "b"}]')
    (tmp_path / "dataset_info.json").write_text(json.dumps({"pairs": {"file_name": "pairs.json", "ranking": True}}))
    before = list_jobs(demo_run, "predict")
    proc = run_cli("predict", str(demo_run), "--dataset", "pairs", "--dataset-dir", str(tmp_path), timeout=120)
    assert proc.returncode == 2 and "fits stage dpo or rm" in " ".join(proc.stderr.split()), proc.stderr
    assert list_jobs(demo_run, "predict") == before
