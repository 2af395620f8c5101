"""The planner's vision tower and projector (ftui.plan.vision_shape, read from config.json
without torch) against the models transformers builds: the tiny test models and the families'
full-size default configs (built on the meta device), and what the planner says trains against
what the runner marks trainable (LLaMA-Factory's freeze flags)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.vl_examples import tiny_vlm_cfg

FAMILIES = {"qwen2_vl": "Qwen2VLConfig", "qwen2_5_vl": "Qwen2_5_VLConfig", "qwen3_vl": "Qwen3VLConfig"}


def parts(model) -> tuple[int, int]:
    """(vision tower, projector) parameters of a built model."""
    named = list(model.model.visual.named_parameters())
    return (sum(p.numel() for n, p in named if not n.startswith("merger.")),
            sum(p.numel() for n, p in named if n.startswith("merger.")))


@pytest.mark.parametrize("family", FAMILIES)
def test_the_vision_tower_and_projector_are_counted_from_config_json(family, tmp_path):
    import transformers

    from ftui.plan.model_shape import ModelShape
    from ftui.plan.vision_shape import vision_shape
    from ftui.runner.model import load_model

    cfg = tiny_vlm_cfg(family, tmp_path)
    config = json.loads((tmp_path / f"tiny-{family}" / "config.json").read_text())
    model = load_model(cfg, torch.device("cpu"))
    shape = vision_shape(config)
    assert (shape.tower, shape.projector) == parts(model)
    assert shape.depth == 2 and shape.block == sum(p.numel() for p in model.model.visual.blocks[0].parameters())
    total = sum(p.numel() for p in model.parameters())
    assert ModelShape.from_config(config).params == pytest.approx(total, rel=1e-3)  # Qwen3's q/k norms are not counted
    with torch.device("meta"):  # the full-size defaults (Qwen2-VL 7B's tower: 675 M)
        big = transformers.AutoModelForImageTextToText.from_config(getattr(transformers, FAMILIES[family])())
    default = vision_shape({"model_type": family, "vision_config": {}})
    assert (default.tower, default.projector) == parts(big)


def test_what_the_planner_says_trains_is_what_the_runner_trains(tmp_path):
    from ftui.plan.model_shape import ModelShape
    from ftui.plan.planner import trainable_params
    from ftui.runner.model import apply_method, count_params, load_model

    config = None
    for method, flags in [("full", (True, True, False)), ("full", (False, True, False)), ("full", (False, False, True)),
                          ("freeze", (True, True, False)), ("freeze", (False, False, False))]:
        cfg = tiny_vlm_cfg("qwen2_vl", tmp_path, finetuning_type=method, freeze_trainable_layers=1, freeze_vision_tower=flags[0],
                           freeze_multi_modal_projector=flags[1], freeze_language_model=flags[2])
        config = config or json.loads((tmp_path / "tiny-qwen2_vl" / "config.json").read_text())
        _total, trained = count_params(apply_method(load_model(cfg, torch.device("cpu")), cfg))
        planned = trainable_params(ModelShape.from_config(config), method, 8, "all", 1, flags)
        assert planned == trained, (method, flags)
