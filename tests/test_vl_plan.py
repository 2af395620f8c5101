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


# --- the images of an example in activation memory (ftui.plan.vision_activations)


def vl_config(tmp_path, dataset_dir, **over):
    from ftui.config.schema import RunConfig

    cfg = tiny_vlm_cfg("qwen2_vl", tmp_path)
    return RunConfig(**{"model_name_or_path": cfg.model_name_or_path, "dataset": "mllm_demo", "dataset_dir": str(dataset_dir),
                        "stage": "sft", "template": "qwen2_vl", **over})


def test_an_examples_images_are_read_from_the_first_records_else_image_max_pixels(tmp_path):
    """mllm_demo's largest example has two images (the tests' data: LLaMA-Factory's own records);
    its load is what the processor would make of them; with no readable dataset, one image of
    image_max_pixels; a dataset whose records hold no image, none."""
    from pathlib import Path

    from ftui.data.media_tokens import VisionProcessor, image_grid
    from ftui.plan.model_shape import ModelShape, read_model_config
    from ftui.plan.vision_activations import image_load

    data = Path(__file__).parent / "data" / "llamafactory_vlm" / "data"
    cfg = vl_config(tmp_path, data)
    vision = ModelShape.from_config(read_model_config(cfg.model_name_or_path)).vision
    load = image_load(cfg, vision)
    records = json.loads((data / "mllm_demo.json").read_text())
    from PIL import Image

    def patches(record):
        sizes = [Image.open(data / p).size for p in record["images"]]
        return sum(t * h * w for t, h, w in (image_grid(w, h, VisionProcessor(min_pixels=3136, max_pixels=12845056)) for w, h in sizes))

    assert load.source == "dataset" and load.patches == max(patches(r) for r in records) and load.tokens == load.patches // 4
    assert load.images == 2
    small = image_load(vl_config(tmp_path, data, image_max_pixels=128 * 128), vision)
    assert small.patches < load.patches
    fallback = image_load(vl_config(tmp_path, tmp_path / "nowhere"), vision)
    assert (fallback.source, fallback.images, fallback.tokens) == ("image_max_pixels", 1, (768 // 28) ** 2)
    text = tmp_path / "text"
    text.mkdir()
    (text / "t.json").write_text(json.dumps([{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}]))
    (text / "dataset_info.json").write_text(json.dumps({"mllm_demo": {"file_name": "t.json", "formatting": "sharegpt",
                                                                      "columns": {"messages": "messages"}}}))
    assert image_load(vl_config(tmp_path, text), vision) is None


def test_a_trained_tower_keeps_activations_a_frozen_one_only_its_pixels(tmp_path):
    from ftui.plan.model_shape import ModelShape, read_model_config
    from ftui.plan.planner import estimate
    from ftui.plan.vision_activations import ImageLoad

    shape = ModelShape.from_config(read_model_config(tiny_vlm_cfg("qwen2_vl", tmp_path).model_name_or_path))
    image = ImageLoad(1, 256, 1024, "dataset")

    def act(frozen=(True, True, False), images=image, **kw):
        return estimate(shape, precision="fp32", micro_batch=2, seq_len=1536, frozen=frozen, images=images, **kw).activations

    text_only = act(images=None)
    pixels = 2 * 1024 * shape.vision.kernel * 4
    assert act() == pytest.approx(text_only + pixels)  # frozen tower and projector: the pixels only
    projector = act(frozen=(True, False, False))
    tower = act(frozen=(False, True, False))
    assert text_only + pixels < projector < tower
    assert act(frozen=(False, True, False), gradient_checkpointing=True) - act(images=None, gradient_checkpointing=True) < tower - text_only
    assert act(frozen=(False, True, False), images=ImageLoad(2, 512, 2048, "dataset")) - text_only == pytest.approx(2 * (tower - text_only))


def test_images_that_fill_cutoff_len_are_said(tmp_path):
    from ftui.plan.model_shape import ModelShape, read_model_config
    from ftui.plan.planner import estimate
    from ftui.plan.vision_activations import ImageLoad

    shape = ModelShape.from_config(read_model_config(tiny_vlm_cfg("qwen2_vl", tmp_path).model_name_or_path))
    notes = estimate(shape, seq_len=512, images=ImageLoad(1, 729, 2916, "image_max_pixels")).notes
    assert any("images take 729 tokens, cutoff_len=512" in n for n in notes) and len(notes) == 2
    [said] = estimate(shape, seq_len=1024, images=ImageLoad(1, 729, 2916, "image_max_pixels")).notes
    assert said == ("images: 729 image tokens an example, within cutoff_len, and 2916 patches through the vision tower; planned "
                    "from one image of image_max_pixels (the dataset's images not read here)")


def test_a_dpo_pair_counts_its_images_on_both_rows(tmp_path):
    """A dpo pair is two rows (prompt + chosen, prompt + rejected), each with the prompt's images
    (ftui.runner.stages.preference_vision; the reference model reads the same batch under no_grad,
    keeping nothing): the example's images are read from the pairs (whose records end with the
    prompt, which sft's reading refused: the plan fell back to image_max_pixels), and the tower's
    pixels and activations count twice an sft example's."""
    from pathlib import Path

    from PIL import Image

    from ftui.data.media_tokens import VisionProcessor, image_grid
    from ftui.plan.model_shape import ModelShape, read_model_config
    from ftui.plan.planner import estimate
    from ftui.plan.vision_activations import image_load

    data = Path(__file__).parent / "data" / "llamafactory_vlm" / "data"
    cfg = vl_config(tmp_path, data, stage="dpo", dataset="mllm_dpo_demo")
    shape = ModelShape.from_config(read_model_config(cfg.model_name_or_path))
    load = image_load(cfg, shape.vision)
    pairs = json.loads((data / "mllm_dpo_demo.json").read_text())
    qwen = VisionProcessor(min_pixels=3136, max_pixels=12845056)
    most = max(sum(t * h * w for t, h, w in (image_grid(*Image.open(data / p).size, qwen) for p in pair["images"]))
               for pair in pairs)
    assert (load.source, load.images, load.patches) == ("dataset", 2, most)

    def vision_part(stage: str, frozen: tuple[bool, bool, bool]) -> float:
        def act(images):
            return estimate(shape, precision="fp32", micro_batch=2, seq_len=1024, frozen=frozen, images=images,
                            training_stage=stage).activations
        return act(load) - act(None)

    for frozen in ((True, True, False), (False, False, False)):
        sft = vision_part("sft", frozen)
        assert sft > 0 and vision_part("dpo", frozen) == pytest.approx(2 * sft)
    assert vision_part("dpo", (True, True, False)) == pytest.approx(2 * 2 * load.patches * shape.vision.kernel * 4)
