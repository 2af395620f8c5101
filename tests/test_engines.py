"""Every engine preset trains for real on 2 CPU processes (gloo), and proves it engaged.

One run per preset in the default suite (the other method is marked slow), 8 steps with a
checkpoint at step 4: the same run is the reference for the resume tests, which continue a
copy from step-4 and must reproduce steps 5..8 exactly. Full fine-tuning in fp32 gives the
same loss curve under every multi-process engine (same data, same averaging), which the
cross-engine test checks: an engine that dropped a gradient or a shard would drift.
"""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import ENGINE_MAX_STEPS as MAX_STEPS, resume_sync, steps_of, tiny_config, train_sync
from ftui.rundir.events import validate_event

pytestmark = pytest.mark.dist

DEFAULT_METHOD = {
    "single": "full", "ddp": "lora", "fsdp": "full", "fsdp_offload": "lora", "zero0": "full", "zero1": "lora",
    "zero2": "full", "zero2_offload": "lora", "zero3": "lora", "zero3_offload": "full",
}
SHARDS_PARAMS = {"fsdp", "fsdp_offload", "zero3", "zero3_offload"}
SHARDS_OPTIMIZER = SHARDS_PARAMS | {"zero1", "zero2", "zero2_offload"}


# CI time: on a CPU the offload presets move nothing beyond zero2 / zero3 / fsdp, zero1 sits
# between zero0 and zero2, and zero0 is DeepSpeed without sharding (all run with -m slow)
SLOW_PRESETS = {"zero2_offload", "fsdp_offload", "zero3_offload", "zero1", "zero0"}  # zero0: DDP's replicas, in DeepSpeed


def matrix():
    for preset, method in DEFAULT_METHOD.items():
        yield pytest.param(preset, method, id=f"{preset}-{method}", marks=[pytest.mark.slow] if preset in SLOW_PRESETS else [])
        other = "lora" if method == "full" else "full"
        yield pytest.param(preset, other, id=f"{preset}-{other}", marks=pytest.mark.slow)


@pytest.mark.parametrize("preset,method", list(matrix()))
def test_preset_trains_engages_and_saves(engine_runs, preset, method):
    run_dir, events = engine_runs(preset, method)
    assert all(validate_event(e) == [] for e in events)
    start = next(e for e in events if e["event"] == "run_start")
    assert start["engine"] == preset and start["world_size"] == (1 if preset == "single" else 2)
    assert start["precision"] == ("bf16" if preset == "ddp" else "fp32")
    end = events[-1]
    assert end["event"] == "run_end" and end["status"] == "completed", end

    losses = [s["loss"] for s in steps_of(events)]
    assert len(losses) == MAX_STEPS
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2 - 0.05, losses

    # Engagement: what each rank holds, written with the first step.
    ranks = steps_of(events)[0]["ranks"]
    total, trainable = start["total_params"], start["trainable_params"]
    full_optimizer = 8 * trainable  # AdamW: two fp32 moments per trainable parameter
    assert len(ranks) == start["world_size"]
    for r in ranks:
        if preset in SHARDS_PARAMS:
            assert r["param_elements"] == pytest.approx(total / 2, rel=0.02), r
        else:
            assert r["param_elements"] == total, r
        if preset in SHARDS_OPTIMIZER:
            assert r["optimizer_bytes"] == pytest.approx(full_optimizer / 2, rel=0.02), r
        else:
            assert r["optimizer_bytes"] == full_optimizer, r

    # Checkpoints every save_steps and at the end, complete (renamed) ones only.
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-4", "step-8"]
    assert [e["step"] for e in events if e["event"] == "checkpoint"] == [4, 8]

    # final/ loads with plain transformers / peft, gathered from shards, and was trained.
    import torch
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(run_dir / "base_model")
    if method == "full":
        model = AutoModelForCausalLM.from_pretrained(run_dir / "final")
        assert json.loads((run_dir / "final" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
        changed = [n for n, p in model.named_parameters() if not torch.equal(p, base.get_parameter(n))]
        assert len(changed) == len(list(model.parameters())), "every weight trains in full fine-tuning"
    else:
        from peft import PeftModel

        model = PeftModel.from_pretrained(base, run_dir / "final")
        lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
        assert lora_b and all(p.abs().sum() > 0 for p in lora_b)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    assert torch.isfinite(model(input_ids=ids).logits).all()


def test_engines_agree_with_each_other(engine_runs):
    """fp32 full fine-tuning on 2 ranks: FSDP, ZeRO-2 and ZeRO-3 with offload give one curve.
    (ZeRO-0, DeepSpeed without sharding, trains in test_preset_trains_engages_and_saves with
    -m slow; it left this comparison for CI time.)"""
    curves = {p: [s["loss"] for s in steps_of(engine_runs(p, "full")[1])] for p in ("fsdp", "zero2", "zero3_offload")}
    reference = curves.pop("fsdp")
    for preset, curve in curves.items():
        assert curve == pytest.approx(reference, rel=1e-5), preset


# CI time: single and ddp (the exact resume of one process: test_preference_runs_resume_exactly;
# of DDP: test_stop_resume.py's SIGTERM test) and zero2 (DeepSpeed's checkpoint: zero3) run with -m slow
@pytest.mark.parametrize("preset", [pytest.param("single", marks=pytest.mark.slow), pytest.param("ddp", marks=pytest.mark.slow), "fsdp",
                                    pytest.param("zero2", marks=pytest.mark.slow), "zero3"])
def test_resume_continues_exactly(engine_runs, tmp_path, preset):
    run_dir, events = engine_runs(preset, DEFAULT_METHOD[preset])
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    resumed, proc = resume_sync(copy, copy / "checkpoints" / "step-4")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert resumed[0]["resumed_from_step"] == 4
    assert resumed[0]["model"] == next(e for e in events if e["event"] == "run_start")["model"] == "ftui-demo"  # not base_model/
    reference = {s["step"]: s["loss"] for s in steps_of(events)}
    again = {s["step"]: s["loss"] for s in steps_of(resumed)}
    assert sorted(again) == [5, 6, 7, 8]
    assert [again[k] for k in (5, 6, 7)] == [reference[k] for k in (5, 6, 7)]  # exact on CPU
    assert resumed[-1]["status"] == "completed"


def test_resume_refuses_a_changed_batch(engine_runs, tmp_path):
    run_dir, _ = engine_runs("single", "full")
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    cfg_path = copy / "config.yaml"
    cfg_path.write_text(cfg_path.read_text().replace("per_device_train_batch_size: 4", "per_device_train_batch_size: 2"))
    resumed, proc = resume_sync(copy, copy / "checkpoints" / "step-4")
    assert proc.returncode != 0
    end = resumed[-1]
    # the hint asks for the settings back: every checkpoint of the run was saved with them, so another one fails alike
    assert end["status"] == "failed" and "micro batch 4" in end["reason"] and "--set" in end["hint"] and "--checkpoint" not in end["hint"]


@pytest.mark.slow  # CI time: the presets are DeepSpeed files read the same way; the checks of a user's file: test_engine_presets.py
def test_a_users_deepspeed_file_trains(tmp_path):
    """LLaMA-Factory's ZeRO-2 file as users have it: every value 'auto', no engine key."""
    ds = {
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto", "zero_allow_untested_optimizer": True,
        "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1},
        "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 2, "allgather_partitions": True, "allgather_bucket_size": 5e8, "overlap_comm": False,
                              "reduce_scatter": True, "reduce_bucket_size": 5e8, "contiguous_gradients": True, "round_robin_gradients": True},
    }
    path = tmp_path / "ds_z2_config.json"
    path.write_text(json.dumps(ds))
    cfg = tiny_config(tmp_path, deepspeed=str(path), nproc_per_node=2, max_steps=4, gradient_accumulation_steps=2)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
    start = next(e for e in events if e["event"] == "run_start")
    assert start["engine"] == "deepspeed:ds_z2_config.json"
    ranks = steps_of(events)[0]["ranks"]
    assert all(r["optimizer_bytes"] == pytest.approx(4 * start["trainable_params"], rel=0.02) for r in ranks)
    assert events[-1]["status"] == "completed"


@pytest.mark.parametrize("preset", ["single", "ddp", "fsdp", "zero2", "zero3"])
def test_last_checkpoint_loads_as_the_final_weights(engine_runs, preset):
    """ftui.runner.weights reads any engine's checkpoint (DCP shards, DeepSpeed partitions of
    any stage, full model or adapter) onto one process: at the last step it holds exactly
    what final/ holds."""
    import torch

    from ftui.config.load import load_config
    from ftui.runner.weights import load_weights, locate

    run_dir, _ = engine_runs(preset, DEFAULT_METHOD[preset])
    cfg, _ = load_config(run_dir / "config.yaml")
    last = locate(run_dir, cfg, f"step-{MAX_STEPS}")
    final = locate(run_dir, cfg)
    assert last.kind == ("checkpoint-deepspeed" if preset.startswith("zero") else "checkpoint")
    assert final.kind == ("final-adapter" if DEFAULT_METHOD[preset] == "lora" else "final")
    ids = torch.tensor([[1, 5, 9, 13, 17, 21]])
    with torch.no_grad():
        a = load_weights(last, cfg, torch.float32)(input_ids=ids).logits
        b = load_weights(final, cfg, torch.float32)(input_ids=ids).logits
        base = load_weights(locate(run_dir, cfg, "base"), cfg, torch.float32)(input_ids=ids).logits
    assert not torch.allclose(base, b, atol=1e-3)  # training moved the weights ...
    # ... and the last checkpoint holds the same weights
    assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
