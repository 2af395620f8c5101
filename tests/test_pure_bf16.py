"""``pure_bf16`` (LLaMA-Factory's compute type of that name): the weights train in bf16
themselves, without autocast or fp32 master weights. What proves it engaged: AdamW's moments
take the parameters' dtype, so a rank's optimizer state is 4 bytes per trained parameter
instead of 8; final/ holds bf16 tensors; LoRA's adapters stay fp32 (as peft keeps them)."""

from pathlib import Path

import pytest

from ftui.plan.model_shape import ModelShape
from ftui.plan.planner import estimate
from ftui.config.problems import ConfigError
from ftui.config.load import parse_config
from ftui.tui.screens.launch_fields import config_to_form, form_to_config
from tests.conftest import steps_of, tiny_config, train_sync
from tests.test_plan import LLAMA2_7B, P7, close

BASE = {"model_name_or_path": "org/model", "dataset": "x"}


def test_pure_bf16_is_a_bf16_run_and_is_refused_where_it_cannot_be_pure():
    cfg, warnings = parse_config(BASE | {"pure_bf16": True, "device": "cpu"})
    assert (cfg.precision, cfg.precision_label, warnings) == ("bf16", "pure_bf16", [])
    assert parse_config(BASE | {"bf16": True})[0].precision_label == "bf16"
    for over, field, words in (({"fp16": True}, "fp16", "choose one precision"),
                               ({"engine": "zero2", "nproc_per_node": 2}, "pure_bf16", "DeepSpeed keeps fp32 master weights")):
        with pytest.raises(ConfigError) as info:
            parse_config(BASE | {"pure_bf16": True} | over)
        assert [p.field for p in info.value.problems] == [field], over
        assert words in info.value.problems[0].message


def test_the_form_offers_pure_bf16_and_writes_the_key_only_when_chosen():
    values = config_to_form({"pure_bf16": True, "bf16": False})
    assert values["precision"] == "pure_bf16"
    data = form_to_config(values | {"method": "full"})
    assert (data["pure_bf16"], data["bf16"], data["fp16"]) == (True, False, False)
    assert "pure_bf16" not in form_to_config(config_to_form({"bf16": True}) | {"method": "full"})


def test_the_planner_counts_8_bytes_per_trained_parameter_and_no_autocast_copy():
    shape = ModelShape.from_config(LLAMA2_7B)
    pure = estimate(shape, method="full", precision="bf16", engine="ddp", world_size=8, pure_bf16=True)
    mixed = estimate(shape, method="full", precision="bf16", engine="ddp", world_size=8)
    assert close(pure.weights, 2 * P7, 0.01) and close(pure.gradients, 2 * P7, 0.01) and close(pure.optimizer, 4 * P7, 0.01)
    assert close(mixed.weights, 6 * P7, 0.01)  # fp32 master + autocast's bf16 copies
    assert pure.activations < mixed.activations  # the residual stream is bf16 too
    # LoRA: the base is bf16 either way and the adapters stay fp32
    lora = [estimate(shape, method="lora", precision="bf16", engine="single", pure_bf16=p) for p in (True, False)]
    assert lora[0].weights == lora[1].weights and lora[0].optimizer == lora[1].optimizer


def test_memory_advice_for_pure_bf16_names_torch_engines_not_deepspeed(tmp_path):
    import torch

    from ftui.plan.verdict import what_fits
    from ftui.runner.faults import hint_for

    cfg = tiny_config(tmp_path, engine="ddp", nproc_per_node=2, pure_bf16=True)
    hint = hint_for(torch.OutOfMemoryError("CUDA out of memory"), cfg)
    assert "engine fsdp" in hint and "zero" not in hint, hint
    assert "engine zero2" in hint_for(torch.OutOfMemoryError(), cfg.model_copy(update={"pure_bf16": False, "bf16": True}))
    # the planner's what-ifs: a full fine-tuning that cannot fit 1 GB, only sharded and offloaded
    big = ModelShape.from_config(LLAMA2_7B)
    fixes = what_fits(tiny_config(tmp_path, engine="single", finetuning_type="full", pure_bf16=True), big, 60 * 2**30)
    assert fixes and all("zero" not in f for f in fixes), fixes
    assert any("engine fsdp_offload" in f for f in fixes), fixes


def _run(tmp_path, engine, method, nproc):
    cfg = tiny_config(tmp_path, engine=engine, finetuning_type=method, nproc_per_node=nproc, max_steps=8, save_steps=8,
                      pure_bf16=True, learning_rate=5e-3 if method == "full" else 2e-2, run_name=f"{engine}-{method}")
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
    start = next(e for e in events if e["event"] == "run_start")
    assert start["precision"] == "pure_bf16" and events[-1]["status"] == "completed"
    losses = [s["loss"] for s in steps_of(events)]
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2 - 0.05, losses
    return run_dir, start, steps_of(events)[0]["ranks"]


def _final_dtypes(run_dir, name):
    from safetensors import safe_open

    with safe_open(str(run_dir / "final" / name), "pt") as f:
        return {str(f.get_tensor(k).dtype) for k in f.keys()}


@pytest.mark.dist
def test_full_fine_tuning_trains_bf16_weights_sharded_by_fsdp(tmp_path):
    run_dir, start, ranks = _run(tmp_path, "fsdp", "full", 2)
    trainable = start["trainable_params"]
    for r in ranks:  # half the parameters each, and two bf16 moments (2 + 2 bytes) for them
        assert r["param_elements"] == pytest.approx(start["total_params"] / 2, rel=0.02), r
        assert r["optimizer_bytes"] == pytest.approx(4 * trainable / 2, rel=0.02), r
    assert _final_dtypes(run_dir, "model.safetensors") == {"torch.bfloat16"}


@pytest.mark.dist
@pytest.mark.slow  # CI time: pure bf16 under FSDP in the full fine-tuning test above
def test_a_reward_model_trains_purely_in_bf16_under_fsdp(tmp_path, lf_data):
    """The value head takes the trained weights' dtype: FSDP2 shards a group's trained
    parameters in one dtype (an fp32 head beside bf16 embeddings stopped the first step)."""
    from tests.test_stage_preference import pref_config

    cfg = pref_config(tmp_path, lf_data, stage="rm", engine="fsdp", nproc_per_node=2, pure_bf16=True, max_steps=4)
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
    assert events[-1]["status"] == "completed"
    assert _final_dtypes(run_dir, "value_head.safetensors") == {"torch.bfloat16"}


@pytest.mark.slow
@pytest.mark.parametrize("engine,method,nproc", [("single", "full", 1), ("ddp", "full", 2), ("single", "lora", 1)])
def test_pure_bf16_on_the_other_engines_and_with_lora(tmp_path, engine, method, nproc):
    """Full: bf16 moments (4 bytes a parameter) and a bf16 final/. LoRA: what pure_bf16 keeps
    as it is, fp32 adapters and their moments (that autocast is off is the unit test above)."""
    run_dir, start, ranks = _run(tmp_path, engine, method, nproc)
    per_param = 8 if method == "lora" else 4  # LoRA's adapters are fp32 (peft upcasts them) over the bf16 base
    assert all(r["optimizer_bytes"] == per_param * start["trainable_params"] for r in ranks), ranks
    if method == "full":
        assert _final_dtypes(run_dir, "model.safetensors") == {"torch.bfloat16"}
    else:
        assert _final_dtypes(run_dir, "adapter_model.safetensors") == {"torch.float32"}


async def test_a_pure_bf16_yaml_shows_in_the_form_and_saves_back(tmp_path, monkeypatch):
    import yaml

    from tests.test_config import LF_LORA_SFT
    from tests.test_tui_pilot import load_in_form, make_app, until

    monkeypatch.chdir(tmp_path)
    text = LF_LORA_SFT.replace("bf16: true", "pure_bf16: true")
    assert "pure_bf16: true" in text
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await load_in_form(pilot, app, tmp_path / "lf.yaml", text)
        await until(pilot, lambda: screen.query_one("#p-pure_bf16").value)
        assert not screen.query_one("#p-bf16").value and not screen.query_one("#p-fp32").value
        out = tmp_path / "saved.yaml"
        screen.save_yaml(str(out), screen.current_config_dict())
        await until(pilot, lambda: out.exists())
        saved = yaml.safe_load(out.read_text())
        assert (saved["pure_bf16"], saved["bf16"], saved["fp16"]) == (True, False, False)


async def test_a_gpu_without_bf16_disables_pure_bf16_in_the_form_too(tmp_path, monkeypatch):
    from textual.widgets import RadioButton

    from tests.fake_nvml import FakeGpu, use_fake_nvml
    from tests.test_tui_pilot import make_app, text_of, until

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    use_fake_nvml(monkeypatch, [FakeGpu(name="Tesla V100-SXM2-16GB", uuid="GPU-aaaa", capability=(7, 0))])
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = app.screen
        await until(pilot, lambda: "bf16 unavailable" in text_of(screen.query_one("#precision-help")))
        assert screen.query_one("#p-bf16", RadioButton).disabled and screen.query_one("#p-pure_bf16", RadioButton).disabled


def test_the_engines_run_no_autocast_for_pure_bf16():
    import contextlib

    import torch

    from ftui.runner.engines.base import DistInfo, Engine

    cfg = tiny_config(Path("/tmp"), pure_bf16=True)
    assert isinstance(Engine(cfg, DistInfo(), torch.device("cpu")).autocast(), contextlib.nullcontext)
    mixed = Engine(cfg.model_copy(update={"pure_bf16": False, "bf16": True}), DistInfo(), torch.device("cpu")).autocast()
    assert isinstance(mixed, torch.autocast)
