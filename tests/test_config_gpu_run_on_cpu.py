"""A run trained on a GPU, read where there is none (issue 40, item 4): its config.yaml says
``fp16: true``, ``device: cuda`` and ``gpus: 0`` (a T4 or V100 run), and this machine has no GPU
(nothing is faked: the test machine shows none). It is chatted with, predicted, evaluated and
exported all the same: its own config is read with its schema only, the job runs on the CPU in
fp32 (what fp16 approximates; the CPU has no fast fp16) and says so once."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import tiny_config, train_sync
from ftui.config.load import read_run_config
from ftui.config.machine_checks import gpu_run_on_cpu
from ftui.machine.gpu import gpu_count
from ftui.rundir.paths import EVAL_RESULTS_FILE, EVENTS_FILE, PREDICTIONS_FILE

pytestmark = pytest.mark.skipif(gpu_count() > 0, reason="a machine without a GPU is what this is about")

FTUI = [sys.executable, "-m", "ftui.cli.main"]
NOTE = "this run was set up for a GPU (device cuda, fp16) and this machine has none: it runs on the CPU in fp32"


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory) -> Path:
    """A tiny run, trained here, whose config.yaml is then made a GPU run's."""
    root = tmp_path_factory.mktemp("gpu-run")
    run_dir, _events, proc = train_sync(tiny_config(root, max_steps=4, save_steps=4, run_name="t4"))
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config | {"fp16": True, "device": "cuda", "gpus": "0"}, sort_keys=False))
    return run_dir


def copy_of(run: Path, tmp_path: Path) -> Path:
    target = tmp_path / run.name
    shutil.copytree(run, target, ignore=shutil.ignore_patterns(".store-*"))
    return target


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*FTUI, *args], capture_output=True, text=True, timeout=600)


def said(proc: subprocess.CompletedProcess) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


def events_of(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / EVENTS_FILE).read_text().splitlines() if line.strip()]


def test_its_config_is_read_with_its_schema_only(gpu_run):
    cfg = read_run_config(gpu_run / "config.yaml")  # no "fp16 needs a CUDA GPU", no "no CUDA GPU was found"
    assert (cfg.fp16, cfg.device, cfg.gpus) == (True, "cuda", "0")
    cpu, note = gpu_run_on_cpu(cfg)
    assert (cpu.precision, cpu.device, cpu.gpus) == ("fp32", "cpu", None) and note == NOTE
    bf16, _note = gpu_run_on_cpu(cfg.model_copy(update={"fp16": False, "bf16": True}))
    assert bf16.precision == "bf16"  # torch computes bf16 on every CPU: kept
    assert gpu_run_on_cpu(cpu) == (cpu, None)  # a CPU run's config is left as it is, without a word


def test_it_is_chatted_with(gpu_run):
    proc = cli("chat", "--run", str(gpu_run), "--prompt", "hello", "--max-new-tokens", "4", "--temperature", "0")
    assert proc.returncode == 0, said(proc)
    assert said(proc).count(NOTE) == 1


def test_it_is_predicted_and_evaluated(gpu_run, tmp_path):
    run = copy_of(gpu_run, tmp_path)
    for kind, extra in (("predict", ["--max-new-tokens", "4", "--temperature", "0"]), ("eval", [])):
        proc = cli(kind, str(run), "--dataset", "ftui_demo", "--max-samples", "4", *extra)
        assert proc.returncode == 0, said(proc)
        assert said(proc).count(NOTE) == 1, said(proc)
        job = Path(proc.stdout.strip().splitlines()[-1].strip())
        assert (job / (PREDICTIONS_FILE if kind == "predict" else EVAL_RESULTS_FILE)).is_file()
        assert [e for e in events_of(job) if e["event"] == "log" and e.get("message") == NOTE]


@pytest.mark.slow  # CI time: predict, eval and chat of the same run check the CPU conversion in every run
def test_it_is_exported(gpu_run, tmp_path):
    run = copy_of(gpu_run, tmp_path)
    proc = cli("export", str(run), "--out", str(tmp_path / "out"), "--dtype", "fp32")
    assert proc.returncode == 0, said(proc)
    assert (tmp_path / "out" / "config.json").is_file()
