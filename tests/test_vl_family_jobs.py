"""Predict, eval and export for LLaVA-1.5, Gemma 3 and InternVL 3 (the Qwen families' are in
test_vl_predict.py and test_vl_export.py): a tiny LoRA run of each, trained 2 steps on a
2-record image set the test makes; predict writes generated_predictions.jsonl naming each
prompt's files; the merged export loads in AutoModelForImageTextToText, its chat template
renders an image part as the text the family's transformers Processor expands (LLaVA's
<image>, Gemma 3's <start_of_image>, InternVL's <IMG_CONTEXT>), and it gives the logits of
base + adapter on an input with an image.

Each family's run costs a training process: one test per family runs in the default suite
(export, the end of the chain), the rest are ``slow``."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from tests.test_export import export_in_process
from tests.test_vl_export import logits, tensors, trained
from tests.vlm_models import FAMILIES, vlm_dir

OTHERS = ("llava", "gemma3", "internvl")
CLASSES = {"llava": "LlavaForConditionalGeneration", "gemma3": "Gemma3ForConditionalGeneration",
           "internvl": "InternVLForConditionalGeneration"}
# What each family's transformers Processor expands into an image's tokens (its chat template's image part)
PROCESSOR_IMAGE_TEXT = {"llava": "<image>", "gemma3": "<start_of_image>", "internvl": "<IMG_CONTEXT>"}
# An image's tokens in a prompt, as LLaMA-Factory's plugin writes them for the tiny models: (56 / 14)²
# patches, pooled to 4 by Gemma 3 and InternVL (tests/test_vl_families.py PER_IMAGE)
IMAGE_TOKENS = {"llava": ("<image>", 16), "gemma3": ("<image_soft_token>", 4), "internvl": ("<IMG_CONTEXT>", 4)}
QUESTION = "What colour is it?"


@pytest.fixture(scope="module")
def picture_set(tmp_path_factory) -> Path:
    """A 2-record sharegpt image set (LLaMA-Factory's mllm_demo columns): one image, then two."""
    from PIL import Image

    root = tmp_path_factory.mktemp("pictures")
    Image.new("RGB", (56, 84), (120, 30, 200)).save(root / "purple.png")
    Image.new("RGB", (64, 48), (200, 10, 10)).save(root / "red.png")
    records = [
        {"messages": [{"role": "user", "content": "<image>" + QUESTION}, {"role": "assistant", "content": "Purple."}],
         "images": ["purple.png"]},
        {"messages": [{"role": "user", "content": "<image><image>Which is red?"}, {"role": "assistant", "content": "The second."}],
         "images": ["purple.png", "red.png"]},
    ]
    (root / "pictures.json").write_text(json.dumps(records))
    (root / "dataset_info.json").write_text(json.dumps({"pictures": {
        "file_name": "pictures.json", "formatting": "sharegpt", "columns": {"messages": "messages", "images": "images"},
        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}}))
    return root


@pytest.fixture(scope="module")
def family_runs(tmp_path_factory, picture_set):
    """family -> (its tiny base model, a finished 2-step LoRA run on picture_set), trained once per module."""
    from ftui.config.load import demo_config
    from tests.conftest import train_sync

    root = tmp_path_factory.mktemp("vl-family-runs")
    made: dict[str, tuple[Path, Path]] = {}

    def run(family: str) -> tuple[Path, Path]:
        if family not in made:
            model = vlm_dir(family, root / "models")
            cfg = demo_config(model_name_or_path=str(model), model_init="pretrained", stage="sft",
                              template=FAMILIES[family]["template"], dataset="pictures", dataset_dir=str(picture_set),
                              finetuning_type="lora", max_steps=2, save_steps=2, per_device_train_batch_size=2,
                              learning_rate=1e-2, cutoff_len=512, engine="single", nproc_per_node=1,
                              output_dir=str(root / "runs"), logging_steps=1, run_name=f"vl-{family}", device="cpu")
            run_dir, _events, proc = train_sync(cfg)
            assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
            made[family] = (model, run_dir)
        return made[family]

    return run


def run_job(kind: str, run: Path, data: Path, **extra):
    from ftui.jobs.offline import prepare_job, source_of
    from ftui.rundir.event_writer import EventWriter
    from ftui.rundir.paths import EVENTS_FILE
    from ftui.runner.engines import DistInfo
    from ftui.runner.evaluate import evaluate
    from ftui.runner.faults import StopRequest
    from ftui.runner.predict import predict

    job_dir, cfg = prepare_job(kind, run_dir=run, source=source_of(run, None, False, None, None), dataset="pictures",
                               dataset_dir=str(data), device="cpu", **extra)
    work = predict if kind == "predict" else evaluate
    return job_dir, work(job_dir, cfg, DistInfo(), EventWriter(job_dir / EVENTS_FILE), StopRequest())


@pytest.mark.slow
@pytest.mark.dist
@pytest.mark.parametrize("family", OTHERS)
def test_predict_and_eval_over_an_image_set(family, family_runs, picture_set):
    from ftui.rundir.paths import EVAL_RESULTS_FILE, PREDICTIONS_FILE

    _model, run_dir = family_runs(family)
    records = json.loads((picture_set / "pictures.json").read_text())
    job_dir, (status, message) = run_job("predict", run_dir, picture_set,
                                         generation={"max_new_tokens": 3, "temperature": 0, "batch_size": 2})
    assert status == "completed", message
    rows = [json.loads(line) for line in (job_dir / PREDICTIONS_FILE).read_text().splitlines()]
    assert len(rows) == 2
    for row, record in zip(rows, records):
        assert row["images"] == [os.path.abspath(picture_set / p) for p in record["images"]]
        token, per_image = IMAGE_TOKENS[family]
        assert row["prompt"].count(token) == per_image * len(record["images"])
        assert row["label"].strip().startswith(record["messages"][-1]["content"])
        assert isinstance(row["predict"], str)
    job_dir, (status, message) = run_job("eval", run_dir, picture_set)
    assert status == "completed", message
    results = json.loads((job_dir / EVAL_RESULTS_FILE).read_text())
    assert results["examples"] == 2 and math.isfinite(results["eval_loss"]) and results["eval_tokens"] > 0


def plain_inputs(out: Path, family: str, image: Path) -> dict[str, torch.Tensor]:
    """What a user of plain transformers feeds the export: its chat template over a message with
    an image part, then the family's AutoProcessor (LLaVA, Gemma 3). InternVL's needs torchvision
    (its video processor): its image text is expanded by hand with the export's
    processor_config.json, as its Processor does, and the pixels are its image processor's. The
    hand-made ids are checked against the Processor's where it loads."""
    from PIL import Image
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    text = tok.apply_chat_template([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}],
                                   tokenize=False, add_generation_prompt=True)
    part = PROCESSOR_IMAGE_TEXT[family]
    assert text.count(part) == 1, text
    picture = Image.open(image).convert("RGB")
    pixels = AutoImageProcessor.from_pretrained(out)(images=[picture], return_tensors="pt")["pixel_values"]
    numbers = json.loads((out / "processor_config.json").read_text())
    numbers = {**numbers, **numbers.get("processor", {})}
    if family == "llava":  # (side / patch)², less the CLS feature the "default" strategy drops
        expanded = "<image>" * ((pixels.shape[-1] // numbers["patch_size"]) ** 2 + numbers.get("num_additional_image_tokens", 0) - 1)
    elif family == "gemma3":
        expanded = "\n\n<start_of_image>" + "<image_soft_token>" * numbers["image_seq_length"] + "<end_of_image>\n\n"
    else:
        expanded = "<img>" + "<IMG_CONTEXT>" * numbers["image_seq_length"] + "</img>"
    ids = tok(text.replace(part, expanded), add_special_tokens=False, return_tensors="pt")
    if family == "internvl":
        return {"input_ids": ids["input_ids"], "attention_mask": ids["attention_mask"], "pixel_values": pixels}
    own = AutoProcessor.from_pretrained(out)(text=[text], images=[picture], return_tensors="pt")
    assert own["input_ids"].tolist() == ids["input_ids"].tolist() and torch.allclose(own["pixel_values"], pixels)
    return dict(own)


@pytest.mark.dist
@pytest.mark.parametrize("family", OTHERS)
def test_a_merged_lora_export_runs_in_plain_transformers_with_base_plus_adapter_logits(family, family_runs, picture_set, tmp_path):
    from transformers import AutoModelForImageTextToText

    base, run_dir = family_runs(family)
    want = trained(run_dir)  # base + adapter, through peft
    assert hasattr(want, "peft_config")
    out = tmp_path / family
    result = export_in_process(run_dir, out)
    assert result["vision"] is True
    files = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "preprocessor_config.json", "processor_config.json", "chat_template.jinja",
            "tokenizer.json", "ftui_export.json"} <= files, files
    assert not any(name.startswith("adapter") for name in files)
    exported, original = tensors(out), tensors(base)
    assert exported.keys() == original.keys()  # transformers' checkpoint names, the base's
    model = AutoModelForImageTextToText.from_pretrained(out)
    assert type(model).__name__ == CLASSES[family] and not hasattr(model, "peft_config")
    inputs = plain_inputs(out, family, picture_set / "purple.png")
    got, wanted = logits(model, inputs), logits(want, inputs)
    assert torch.allclose(got, wanted, atol=1e-5), (got - wanted).abs().max()
    untouched = logits(AutoModelForImageTextToText.from_pretrained(base), inputs)
    assert not torch.allclose(got, untouched, atol=1e-3)  # the adapter is in the merged weights
    assert json.loads((out / "ftui_export.json").read_text())["vision_family"] == family
