"""Engine presets: readable files, 'auto' filled from the RunConfig, impossible combinations
refused with an alternative, and `ftui presets`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ftui.config.preflight import validate_config
from ftui.presets.engine_presets import PRESET_NAMES, PRESET_DIR, describe, fill_deepspeed, load_preset

BASE = dict(model_name_or_path="ftui-demo", model_init="random", cutoff_len=128, dataset="ftui_demo")  # as the demo preset: valid


def problems(**kw):
    return {p.field: p.message for p in validate_config({**BASE, **kw})[1]}


def test_every_preset_is_a_documented_file():
    assert sorted(p.stem for p in PRESET_DIR.glob("*.json")) == sorted(PRESET_NAMES)
    for name in PRESET_NAMES:
        what, when = describe(name)
        assert len(what) > 20 and len(when) > 20
        data = json.loads((PRESET_DIR / f"{name}.json").read_text())
        if name.startswith("zero"):
            assert data["ftui"]["backend"] == "deepspeed" and "stage" in data["zero_optimization"]


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_auto_values_are_filled_from_the_run(precision):
    ds = fill_deepspeed(load_preset("zero3_offload"), micro_batch=4, accumulation=8, world_size=2,
                        max_grad_norm=0.5, precision=precision, hidden_size=64)
    assert "ftui" not in ds
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"], ds["train_batch_size"]) == (4, 8, 64)
    assert ds["gradient_clipping"] == 0.5
    assert ds["bf16"]["enabled"] is (precision == "bf16") and ds["fp16"]["enabled"] is (precision == "fp16")
    assert ds["zero_optimization"]["reduce_bucket_size"] == 64 * 64
    assert "auto" not in json.dumps(ds)


def test_a_users_explicit_values_are_kept():
    user = {"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.3, "zero_optimization": {"stage": 2}}
    ds = fill_deepspeed(user, micro_batch=4, accumulation=1, world_size=2, max_grad_norm=1.0, precision="bf16")
    assert ds["train_micro_batch_size_per_gpu"] == 2 and ds["gradient_clipping"] == 0.3


def test_sharding_presets_need_two_processes_and_say_what_to_use():
    for engine in ("fsdp", "zero1", "zero2", "zero3"):
        msg = problems(engine=engine)["engine"]
        assert "nproc_per_node >= 2" in msg and "single" in msg
    assert problems(engine="zero3_offload") == {}  # offload on one GPU is the point
    assert problems(engine="fsdp", nproc_per_node=2) == {}


def test_impossible_engine_combinations_are_refused_with_an_alternative(monkeypatch):
    from tests.fake_nvml import use_fake_nvml

    # fp16 with FSDP2 works (GradScaler over DTensor gradients, found_inf agreed between ranks)
    assert "fp16" not in problems(engine="fsdp", nproc_per_node=2, fp16=True, device="cuda")
    use_fake_nvml(monkeypatch, [])
    assert "no CUDA GPU was found" in problems(device="cuda")["device"]  # a machine without GPUs
    msg = problems(engine="zero3", nproc_per_node=2, finetuning_type="lora", quantization_bit=4)["engine"]
    assert "QLoRA" in msg and "ddp" in msg


def test_a_users_deepspeed_file_is_checked(tmp_path, monkeypatch):
    from tests.fake_nvml import four_gpus, use_fake_nvml

    use_fake_nvml(monkeypatch, four_gpus())  # fp16 on device cuda needs a GPU
    assert "cannot read" in problems(deepspeed=str(tmp_path / "none.json"))["deepspeed"]
    os.mkfifo(tmp_path / "fifo.json")  # the form checks per keystroke: a FIFO must not hang it
    assert "FIFO" in problems(deepspeed=str(tmp_path / "fifo.json"))["deepspeed"]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert "not valid JSON" in problems(deepspeed=str(bad))["deepspeed"]
    fp16 = tmp_path / "fp16.json"
    fp16.write_text(json.dumps({"fp16": {"enabled": True}, "zero_optimization": {"stage": 2}}))
    assert "fp16" in problems(deepspeed=str(fp16), bf16=True)["deepspeed"]
    assert problems(deepspeed=str(fp16), fp16=True, nproc_per_node=2, device="cuda") == {}
    assert "DeepSpeed engine" in problems(deepspeed=str(fp16), fp16=True, engine="ddp", nproc_per_node=2)["deepspeed"]
    cfg, _ = validate_config({**BASE, "deepspeed": str(fp16), "fp16": True, "device": "cuda"})
    assert cfg.uses_deepspeed and cfg.engine_name == "deepspeed:fp16.json"


def test_cli_presets_lists_each_with_when_to_use_it():
    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "presets"], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == list(PRESET_NAMES)
    assert all("When:" in ln for ln in lines)
    one = subprocess.run([sys.executable, "-m", "ftui.cli.main", "presets", "zero2"], capture_output=True, text=True, check=True).stdout
    assert json.loads(one)["zero_optimization"]["stage"] == 2
    bad = subprocess.run([sys.executable, "-m", "ftui.cli.main", "presets", "zero9"], capture_output=True, text=True)
    assert bad.returncode == 2 and "zero3_offload" in bad.stderr
