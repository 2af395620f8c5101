"""LLaVA-1.5, Gemma 3 and InternVL 3 (issue 42, three more families): records with images encoded
as LLaMA-Factory 0.9.5 encodes them, the family table's module keys against the models
transformers builds, their batches, and what trains.

tests/data/llamafactory_vlm/reference.json holds LLaMA-Factory's own encoding of mllm_demo for
the tiny models of tests/vlm_models.py (make_reference.py --only llava,gemma3,internvl), at
cutoff_len 1024, 80 and with image_max_pixels 128*128: input_ids, labels, pixel_values and
Gemma 3's token_type_ids must equal it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ftui.data.media import record_media
from ftui.data.records import DataFormatError, to_conversation
from test_vl_encode import mllm_demo_spec
from vl_parity import RECORDS, assert_pixels_as_lf, encoder_for, encodings_against_lf
from vlm_models import FAMILIES, loaded_models, vlm_dir

ROOT = Path(__file__).resolve().parents[1]
REF_DIR = ROOT / "tests" / "data" / "llamafactory_vlm"
DATA = REF_DIR / "data"
OTHERS = ("llava", "gemma3", "internvl")
CASES = [c for c in json.loads((REF_DIR / "reference.json").read_text())["cases"] if c["family"] in OTHERS]
PER_IMAGE = {"llava": 16, "gemma3": 4, "internvl": 4}  # (56 / 14)² patches; Gemma 3 and InternVL pool them to 4


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """family -> (model folder, loaded model), built once for the module."""
    return loaded_models(tmp_path_factory.mktemp("vlm-others"))


def _case_id(case: dict) -> str:
    return f"{case['family']}-cutoff{case['cutoff_len']}-maxpix{case['image_max_pixels']}"


def test_the_reference_has_each_family_at_each_setting():
    assert sorted({(c["family"], c["cutoff_len"], c["image_max_pixels"]) for c in CASES}) == sorted(
        (f, cut, pix) for f in OTHERS for cut, pix in ((1024, 768 * 768), (80, 768 * 768), (1024, 128 * 128)))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_encoding_matches_llamafactory(case, models):
    from ftui.runner.media_batch import media_collation, token_types

    family = case["family"]
    model_dir, model = models(family)
    collation = media_collation(model)
    for i, enc, ref, encoder in encodings_against_lf(case, model_dir, mllm_demo_spec()):
        tensors = enc.media.tensors()  # the files kept, processed when collated (ftui.runner.vision.batch_images)
        assert set(tensors) == {"pixel_values"} and ref["image_grid_thw"] is None and ref["position_ids"] is None
        images = len(ref["images"])
        assert enc.media.grids == ((1, 1, 1),) * images
        assert ref["pixel_values"]["shape"] == [images, 3, 56, 56]
        assert_pixels_as_lf(tensors["pixel_values"], ref["pixel_values"])
        kept = sum(1 for t in ref["input_ids"] if t == model.config.image_token_id)
        assert encoder.missing_image_tokens(enc) == PER_IMAGE[family] * images - kept
        types = token_types(torch.tensor([enc.input_ids]), collation)[0].tolist()
        if family == "gemma3":
            assert types == ref["token_type_ids"], f"record {i}: token_type_ids differ"
        else:
            assert ref["token_type_ids"] is None and collation.token_types_key is None


@pytest.mark.parametrize("family", OTHERS)
def test_the_family_tables_keys_name_the_models_parts(family, models):
    """Each key of the family's row (LLaMA-Factory's composite-model keys) names modules of the
    model transformers builds, and the language model's and the tower's layers are found."""
    from ftui.runner.vlm import family_of, language_layers, vision_blocks

    _path, model = models(family)
    row = family_of(model)
    assert row is not None and row.name == family
    names = [name for name, _module in model.named_modules()]
    for key in row.projector_keys + row.vision_model_keys + row.language_model_keys:
        assert any(key in name for name in names), key
    assert len(language_layers(model, row)) == 2 and len(vision_blocks(model)) == 2


@pytest.mark.parametrize("family", OTHERS)
def test_lora_all_covers_the_language_model_unless_the_tower_is_unfrozen(family, models, tmp_path):
    from ftui.runner.vlm import family_of, lora_target_modules, mark_full

    from vl_examples import tiny_vlm_cfg

    _path, model = models(family)
    row = family_of(model)
    frozen = lora_target_modules(model, row, tiny_vlm_cfg(family, tmp_path, lora_target="all"))
    assert frozen and all(".language_model." in name for name in frozen)
    unfrozen = lora_target_modules(model, row, tiny_vlm_cfg(family, tmp_path, lora_target="all", freeze_vision_tower=False))
    assert any(".vision_tower." in name for name in unfrozen) and not any("multi_modal_projector" in n for n in unfrozen)
    mark_full(model, row, tiny_vlm_cfg(family, tmp_path))
    trains = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trains and all(".language_model." in n or n.startswith("lm_head") for n in trains)
    for p in model.parameters():
        p.requires_grad_(True)


@pytest.mark.parametrize("family", OTHERS)
def test_a_batch_of_two_examples_and_a_batch_without_images_run_the_model(family, models):
    """The collated batch (padded rows, the images concatenated, Gemma 3's token_type_ids) runs
    the model to a finite loss; a micro batch without images gets the stand-in image, whose
    tokens the attention mask hides."""
    from ftui.runner.data import Collator, Example, IGNORE
    from ftui.runner.media_batch import media_collation

    model_dir, model = models(family)
    encoder = encoder_for(model_dir, family, 1024, 768 * 768)
    spec = mllm_demo_spec()
    examples = []
    for i in (0, 1):
        paths = record_media(RECORDS[i], spec, i)["images"]
        enc = encoder.encode(to_conversation(RECORDS[i], spec, i), paths, spec, i)
        examples.append(Example(enc.input_ids, enc.labels, real_tokens=len(enc.input_ids), media=enc.media))
    collator = Collator(0, media=media_collation(model))
    batch = collator(examples)
    inputs = batch.model_inputs()
    images = len(RECORDS[0]["images"]) + len(RECORDS[1]["images"])
    assert inputs["pixel_values"].shape[0] == images and "mm_token_type_ids" not in inputs
    assert ("token_type_ids" in inputs) is (family == "gemma3")
    out = model(**inputs, labels=batch.labels)
    assert torch.isfinite(out.loss)
    text = Example(examples[0].input_ids[:20], examples[0].labels[:20], real_tokens=20)
    text.input_ids = [t for t in text.input_ids if t != model.config.image_token_id]
    text.labels = text.labels[: len(text.input_ids)]
    text = Example(text.input_ids, [IGNORE] * (len(text.input_ids) - 3) + text.input_ids[-3:], real_tokens=len(text.input_ids))
    plain = collator([text])
    assert plain.model_inputs()["pixel_values"].shape[0] == 1 and plain.attention_mask[0, -1] == 0
    assert torch.isfinite(model(**plain.model_inputs(), labels=plain.labels).loss)


def test_a_template_of_another_family_is_refused_naming_the_right_one(models):
    from ftui.runner.vision.encode import vision_encoder
    from vl_examples import tiny_vlm_cfg

    model_dir, _model = models("llava")
    renderer = encoder_for(model_dir, "llava", 1024, 768 * 768).renderer
    with pytest.raises(DataFormatError, match="template qwen2_vl encodes them for another family than this llava model; use "
                                              "template: llava"):
        vision_encoder(renderer, "qwen2_vl", "llava", str(model_dir), tiny_vlm_cfg("llava", model_dir.parent))


def test_a_llava_folder_without_its_patch_size_says_which_file(models, tmp_path):
    import shutil

    model_dir, _model = models("llava")
    copy = tmp_path / "llava"
    shutil.copytree(model_dir, copy)
    (copy / "processor_config.json").write_text(json.dumps({"processor_class": "LlavaProcessor"}))
    encoder = encoder_for(copy, "llava", 1024, 768 * 768)
    spec = mllm_demo_spec()
    with pytest.raises(ValueError, match="processor_config.json has no patch_size"):
        encoder.encode(to_conversation(RECORDS[1], spec, 1), record_media(RECORDS[1], spec, 1)["images"], spec, 1)


def test_a_pixtral_checkpoint_of_model_type_llava_is_refused_by_name(models, tmp_path):
    import shutil

    model_dir, _model = models("llava")
    copy = tmp_path / "pixtral"
    shutil.copytree(model_dir, copy)
    (copy / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "PixtralImageProcessor", "patch_size": {"height": 14, "width": 14},
        "size": {"longest_edge": 56}, "image_mean": [0.5] * 3, "image_std": [0.5] * 3}))
    encoder = encoder_for(copy, "llava", 1024, 768 * 768)
    spec = mllm_demo_spec()
    with pytest.raises(DataFormatError, match=r"this llava model is a Pixtral \(its image processor is Pixtral"):
        encoder.encode(to_conversation(RECORDS[0], spec, 0), record_media(RECORDS[0], spec, 0)["images"], spec, 0)


@pytest.mark.parametrize("family, hub_name", [("llava", "llava-hf/llava-1.5-7b-hf"), ("gemma3", "google/gemma-3-4b-it"),
                                              ("internvl", "OpenGVLab/InternVL3-1B-hf")])
def test_the_form_tells_the_family_from_its_folder_and_its_hub_name(family, hub_name, models):
    from ftui.presets.families import detect_family

    model_dir, _model = models(family)
    for given in (str(model_dir), hub_name):
        found = detect_family(given)
        assert found is not None and found.vision and found.name == family, given
        assert found.template == FAMILIES[family]["template"]
    assert not detect_family("google/gemma-3-1b-it").vision  # Gemma 3 1B reads text only


@pytest.mark.parametrize("family", OTHERS)
def test_the_preview_counts_each_image_as_the_encoding_does(family, models):
    """The app side (no torch) reads the same token count from the folder's JSON files as the
    runner's encoding gives: every image, whatever its size, the family's fixed count."""
    from ftui.config.media_checks import read_processor
    from ftui.data.media_tokens import image_tokens

    model_dir, _model = models(family)
    processor = read_processor(str(model_dir))
    assert processor.fixed_tokens == PER_IMAGE[family]
    assert {image_tokens(w, h, processor) for w, h in ((640, 480), (56, 56), (3000, 200))} == {PER_IMAGE[family]}


@pytest.mark.parametrize("family, over", [("llava", {}), ("gemma3", {}), ("internvl", {}),
                                          ("gemma3", {"vision_use_head": True}), ("internvl", {"use_qk_norm": True})])
def test_the_planner_sizes_the_tower_and_projector_as_transformers_builds_them(family, over, tmp_path):
    """ftui.plan.vision_towers from config.json alone, against the parameters of the model
    transformers builds from it (the tiny one, and with the optional parts switched on)."""
    import transformers

    from ftui.plan.vision_shape import vision_shape

    config = json.loads((vlm_dir(family, tmp_path) / "config.json").read_text())
    config["vision_config"].update(over)
    model = transformers.AutoModelForImageTextToText.from_config(transformers.AutoConfig.for_model(**config))
    shape = vision_shape(config)
    count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
    assert shape.tower == count(model.model.vision_tower)
    assert shape.projector == count(model.model.multi_modal_projector)
    layers = getattr(model.model.vision_tower, "encoder", None) or model.model.vision_tower.vision_model.encoder
    blocks = getattr(layers, "layers", None) or layers.layer
    assert (shape.block, shape.depth) == (count(blocks[0]), len(blocks))


@pytest.mark.parametrize("family", OTHERS)
def test_the_planner_counts_each_image_as_the_encoding_does(family, models):
    """The planner's image load (ftui.plan.vision_activations) for the run's first records: the
    family's fixed tokens per image in the language model's rows, the tower's whole square of
    patches per image (CLIP's and InternViT's class token too) through the tower."""
    from ftui.config.load import demo_config
    from ftui.plan.vision_activations import image_load
    from ftui.plan.vision_shape import vision_shape

    model_dir, _model = models(family)
    cfg = demo_config(model_name_or_path=str(model_dir), model_init="pretrained", template=FAMILIES[family]["template"],
                      dataset="mllm_demo", dataset_dir=str(DATA))
    shape = vision_shape(json.loads((model_dir / "config.json").read_text()))
    load = image_load(cfg, shape)
    most = max(len(r["images"]) for r in RECORDS)
    assert (load.images, load.tokens, load.source) == (most, PER_IMAGE[family] * most, "dataset")
    assert load.patches == most * (16 if family == "gemma3" else 17)


def test_the_qwen_families_keep_their_size_dependent_count(tmp_path):
    from ftui.config.media_checks import read_processor
    from ftui.data.media_tokens import image_tokens

    processor = read_processor(str(vlm_dir("qwen2_vl", tmp_path)))
    assert processor.fixed_tokens is None and image_tokens(56, 84, processor) == 6


@pytest.mark.parametrize("family", OTHERS)
def test_dpo_pairs_with_images_run_the_family(family, models):
    """Stage dpo (tests/test_vl_dpo.py's pairs over mllm_demo's images): each pair's rows carry
    the record's images, the batch runs the model to finite log-probabilities."""
    from test_vl_dpo import PAIRS, _no_autocast, encode, make_stage

    from ftui.runner.media_batch import media_collation
    from ftui.runner.stages.preference import forward_logps

    model_dir, model = models(family)
    stage = make_stage(model_dir, FAMILIES[family]["template"], cutoff_len=1024)
    stage.media = media_collation(model)
    pairs = encode(stage, PAIRS[:2])
    batch = stage.collator()(pairs)
    images = sum(len(pair["images"]) for pair in PAIRS[:2])
    assert batch.media.tensors["pixel_values"].shape[0] == 2 * images  # chosen and rejected rows
    with torch.no_grad():
        sums, lengths = forward_logps(model, None, batch, _no_autocast)
    assert torch.isfinite(sums).all() and (lengths > 0).all()


# --- `ftui train` end to end on mllm_demo


@pytest.mark.slow
@pytest.mark.parametrize("family", OTHERS)
def test_ftui_train_on_mllm_demo_trains_the_family_with_lora(family, tmp_path, lf_data):
    """Two LoRA steps from `ftui train` (the preflight, the sft stage's encoding, the batches,
    the adapter saved): the losses are finite and the adapter covers the language model only."""
    from safetensors.torch import load_file

    from tests.conftest import train_sync

    from ftui.config.load import demo_config

    model = vlm_dir(family, tmp_path / "models")
    cfg = demo_config(model_name_or_path=str(model), model_init="pretrained", stage="sft", template=FAMILIES[family]["template"],
                      dataset="mllm_demo", dataset_dir=str(lf_data), finetuning_type="lora", lora_target="all", max_steps=2,
                      per_device_train_batch_size=2, learning_rate=1e-2, image_max_pixels=128 * 128, cutoff_len=512,
                      output_dir=str(tmp_path / "runs"), logging_steps=1, run_name=f"{family}-lora")
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 2 and all(torch.isfinite(torch.tensor(e["loss"])) for e in steps)
    start = next(e for e in events if e["event"] == "run_start")
    assert start["padding_free"] is False and "collated padded, each with its own images" in start["padding_free_why"]
    adapter = load_file(str(run_dir / "final" / "adapter_model.safetensors"))
    assert adapter and all("language_model" in key for key in adapter), sorted(adapter)[:4]
    assert (run_dir / "final" / "processor_config.json").read_bytes() == (model / "processor_config.json").read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gemma3", "llava"])
def test_ftui_train_under_fsdp_trains_the_unfrozen_tower_and_keeps_the_projector(family, tmp_path, lf_data):
    """Full training on 2 gloo ranks under FSDP2 (the tower's blocks its own units, Gemma 3's
    token_type_ids in the batches): the tower and the language model change, the projector
    (freeze_multi_modal_projector) does not."""
    from safetensors.torch import load_file

    from tests.conftest import train_sync

    from ftui.config.load import demo_config

    model = vlm_dir(family, tmp_path / "models")
    cfg = demo_config(model_name_or_path=str(model), model_init="pretrained", stage="sft", template=FAMILIES[family]["template"],
                      dataset="mllm_demo", dataset_dir=str(lf_data), finetuning_type="full", freeze_vision_tower=False,
                      max_steps=2, per_device_train_batch_size=1, learning_rate=1e-2, image_max_pixels=128 * 128, cutoff_len=512,
                      engine="fsdp", nproc_per_node=2, output_dir=str(tmp_path / "runs"), logging_steps=1, run_name=f"{family}-fsdp")
    run_dir, events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 2 and all(torch.isfinite(torch.tensor(e["loss"])) for e in steps)
    before = load_file(str(model / "model.safetensors"))
    after = load_file(str(run_dir / "final" / "model.safetensors"))

    def changed(part: str) -> bool:
        keys = [k for k in before if part in k]
        assert keys, part
        return any(not torch.equal(before[k], after[k]) for k in keys)

    assert changed("vision_tower.") and changed("language_model.") and not changed("multi_modal_projector.")
