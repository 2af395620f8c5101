"""The runner speaks the user's language (issue 19): it is started with the app's FTUI_LANG,
so failure hints, the errors that end a job and the chat worker's replies come out in
Chinese when the interface is in Chinese. Fast: no training, no model is loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import tiny_config
from ftui.rundir.event_reader import read_all
from ftui.i18n import set_language
from ftui.rundir.paths import CONFIG_FILE, EVENTS_FILE

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def chinese():
    set_language("zh", export=False)
    yield
    set_language("en", export=False)


def zh_env() -> dict[str, str]:
    return dict(os.environ, FTUI_LANG="zh", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")


def test_failure_hints_are_in_chinese_with_the_yaml_keys_kept(chinese, tmp_path):
    from ftui.runner.faults import NonFiniteLoss, hint_for

    # fp16 needs a GPU to validate: the hint only reads the settings
    cfg = tiny_config(Path("/tmp")).model_copy(update={"fp16": True, "bf16": False, "max_grad_norm": 0.0})
    run = tmp_path / "run-1"
    for step in (4, 8):
        (run / "checkpoints" / f"step-{step}").mkdir(parents=True)
    hint = hint_for(NonFiniteLoss("the loss was NaN/inf", first_step=6), cfg, run_dir=run)
    assert "调低 learning_rate" in hint and "bf16" in hint and "max_grad_norm: 1.0" in hint
    assert "ftui train --resume run-1 --checkpoint 4" in hint  # commands stay as they are typed; the checkpoint before the NaNs
    assert "--checkpoint" not in hint_for(NonFiniteLoss("x", first_step=3), cfg, run_dir=run)  # none saved before step 3
    assert "lower learning_rate" not in hint

    import torch

    oom = hint_for(torch.OutOfMemoryError("CUDA out of memory"),
                   tiny_config(Path("/tmp"), engine="ddp", nproc_per_node=2, per_device_train_batch_size=8,
                               gradient_accumulation_steps=2))
    assert oom.startswith("GPU 显存不足") and "per_device_train_batch_size=4" in oom and "引擎 zero2" in oom


def test_the_chat_worker_answers_a_bad_model_path_in_chinese(tmp_path):
    """The app starts ``python -m ftui.runner chat`` with FTUI_LANG in its environment."""
    request = json.dumps({"op": "load", "model": str(tmp_path / "no-such-model"), "device": "cpu"})
    proc = subprocess.run([sys.executable, "-m", "ftui.runner", "chat"], input=request + "\n", capture_output=True,
                          text=True, encoding="utf-8", env=zh_env(), cwd=ROOT, timeout=600)
    replies = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    errors = [r for r in replies if r["type"] == "error"]
    assert errors, (proc.stdout, proc.stderr[-2000:])
    assert "不是模型目录" in errors[0]["message"] and "config.json" in errors[0]["message"], errors[0]


def test_a_job_that_cannot_read_its_config_ends_with_a_chinese_hint(tmp_path):
    """run_end's hint (shown by the dashboard, ftui runs and ftui watch) in the job's language."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / CONFIG_FILE).write_text("stage: [not, a, stage\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "ftui.runner", "eval", str(run_dir)], capture_output=True, text=True,
                          encoding="utf-8", env=zh_env(), cwd=ROOT, timeout=600)
    assert proc.returncode == 1, proc.stderr[-2000:]
    end = read_all(run_dir / EVENTS_FILE)[-1]
    assert end["event"] == "run_end" and end["status"] == "failed"
    assert end["hint"] == "无法读取配置", end
