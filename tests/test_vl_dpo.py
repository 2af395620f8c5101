"""Preference stages with images (issue 42, second slice): stage dpo on pairs whose prompt has
images, encoded and collated as LLaMA-Factory 0.9.5 does, the reference model reading the same
pixels. kto and rm are refused with images (LLaMA-Factory 0.9.5 fails on them with these
models: ftui.data.media); kto's encoding of them is checked against LLaMA-Factory's feedback
processor all the same (reference_dpo.json's kto cases), ready for when they are allowed.

tests/data/llamafactory_vlm/reference_dpo.json holds what LLaMA-Factory's pairwise processor
and its PairwiseDataCollatorWithPadding made of data/mllm_dpo_demo.json (4 pairs over
mllm_demo's images, in LLaMA-Factory's rlhf_v layout) for the tiny Qwen2-VL and Qwen3-VL of
tests/vlm_models.py (make_reference.py --dpo, run once in its venv). ftui's pairs, collated by
its PairCollator with the model's media collation, must equal it: input_ids, attention_mask,
labels, image_grid_thw and the M-RoPE position ids exactly, pixel_values to 1e-5.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ftui.data.records import DataFormatError, DatasetSpec
from vlm_models import FAMILIES, loaded_models, vlm_dir

ROOT = Path(__file__).resolve().parents[1]
REF_DIR = ROOT / "tests" / "data" / "llamafactory_vlm"
DATA = REF_DIR / "data"
REFERENCE = json.loads((REF_DIR / "reference_dpo.json").read_text())
PAIRS = json.loads((DATA / "mllm_dpo_demo.json").read_text())


def dpo_spec() -> DatasetSpec:
    entry = json.loads((DATA / "dataset_info.json").read_text())["mllm_dpo_demo"]
    return DatasetSpec(name="mllm_dpo_demo", file_name=str(DATA / entry["file_name"]), formatting=entry["formatting"],
                       columns=entry["columns"], ranking=True, media_dir=str(DATA))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """family -> (model folder, loaded model): built once for the module."""
    return loaded_models(tmp_path_factory.mktemp("vlm"))


def make_stage(model_dir: Path, template: str, stage: str = "dpo", **extra):
    from ftui.config.schema import RunConfig
    from ftui.runner.model import load_tokenizer
    from ftui.runner.stages import make_stage as stage_of

    cfg = RunConfig(model_name_or_path=str(model_dir), template=template, dataset="mllm_dpo_demo", dataset_dir=str(DATA),
                    stage=stage, **extra)
    return stage_of(cfg, load_tokenizer(cfg))


def encode(stage, records: list[dict], spec: DatasetSpec | None = None):
    from ftui.runner.data import Progress, TokenizedData

    return stage.encode([(spec or dpo_spec(), records)], TokenizedData([], []), Progress(None, len(records)))


def _case_id(case: dict) -> str:
    return f"{case['family']}-cutoff{case['cutoff_len']}-maxpix{case['image_max_pixels']}"


def cut_images(ref: dict, image_token_id: int) -> bool:
    """LLaMA-Factory's pair whose image tokens cutoff_len cut (ftui refuses it by name)."""
    expected = sum(t * h * w // 4 for t, h, w in ref["image_grid_thw"]) // 2  # the images are there once per row
    return sum(1 for t in ref["input_ids"][0] if t == image_token_id) != expected


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=_case_id)
def test_pairs_with_images_match_llamafactory(case, models):
    from ftui.runner.media_batch import media_collation

    model_dir, model = models(case["family"])
    stage = make_stage(model_dir, FAMILIES[case["family"]]["template"], cutoff_len=case["cutoff_len"],
                       image_max_pixels=case["image_max_pixels"])
    assert (len(stage.tokenizer), stage.tokenizer.pad_token_id) == (case["vocab"], case["pad"])
    stage.media = media_collation(model)
    collate = stage.collator()
    assert len(case["pairs"]) == len(PAIRS)
    for i, (record, ref) in enumerate(zip(PAIRS, case["pairs"])):
        if cut_images(ref, model.config.image_token_id):
            with pytest.raises(DataFormatError, match=f"record 0: its images take .* tokens and cutoff_len={case['cutoff_len']} cuts"):
                encode(stage, [record])
            continue
        [pair] = encode(stage, [record])
        batch = collate([pair])
        assert batch.input_ids.tolist() == ref["input_ids"], f"pair {i}: input_ids differ"
        assert batch.attention_mask.tolist() == ref["attention_mask"]
        assert batch.labels.tolist() == ref["labels"], f"pair {i}: labels differ"
        media = batch.media
        assert media.tensors["image_grid_thw"].tolist() == ref["image_grid_thw"]
        assert media.position_ids.tolist() == ref["position_ids"], f"pair {i}: M-RoPE positions differ"
        pixels = media.tensors["pixel_values"].float().numpy()
        assert list(pixels.shape) == ref["pixel_values"]["shape"]
        np.testing.assert_allclose(pixels.reshape(-1)[: len(ref["pixel_values"]["first"])], ref["pixel_values"]["first"], atol=1e-5)
        assert float(pixels.astype(np.float64).sum()) == pytest.approx(ref["pixel_values"]["sum"], rel=1e-6, abs=1e-3)
        assert hashlib.sha256(np.round(pixels.astype(np.float32), 4).tobytes()).hexdigest()[:16] == ref["pixel_values"]["digest"]


def test_the_reference_has_a_cut_answer_and_a_cut_image():
    small = next(c for c in REFERENCE["cases"] if c["cutoff_len"] == 64)
    assert any(len(p["input_ids"][0]) == 64 for p in small["pairs"])
    assert any(cut_images(p, 694) for p in small["pairs"])  # <|image_pad|> of the tests' tokenizer
    assert REFERENCE["transformers"] == __import__("transformers").__version__


def test_the_reference_model_reads_the_same_pixels(models):
    """Full DPO keeps a frozen copy as the reference: its forward gets the batch's pixel_values,
    grids and positions, and at the start its log-probabilities equal the policy's."""
    from ftui.runner.media_batch import media_collation
    from ftui.runner.stages.preference import Reference, forward_logps

    model_dir, model = models("qwen2_vl")
    stage = make_stage(model_dir, "qwen2_vl", cutoff_len=1024, finetuning_type="full")
    stage.media = media_collation(model)
    batch = stage.collator()(encode(stage, PAIRS[:2]))
    reference = Reference(stage.cfg)
    reference.keep(model)
    seen = {}
    reference.copy.register_forward_pre_hook(lambda _m, _a, kwargs: seen.update(kwargs), with_kwargs=True)
    model.eval()
    with torch.no_grad():
        ref_sums, _n = reference.logps(model, None, batch, _no_autocast)
        sums, lengths = forward_logps(model, None, batch, _no_autocast)
    assert torch.equal(seen["pixel_values"], batch.media.tensors["pixel_values"])
    assert torch.equal(seen["image_grid_thw"], batch.media.tensors["image_grid_thw"])
    assert torch.equal(seen["position_ids"], batch.media.position_ids)
    assert seen["pixel_values"].shape[0] == 2 * sum(int(p.chosen.media["pixel_values"].shape[0]) for p in encode(stage, PAIRS[:2]))
    torch.testing.assert_close(ref_sums, sums)
    assert (lengths > 0).all()


def _no_autocast():
    import contextlib

    return contextlib.nullcontext()


def test_kto_examples_carry_the_images_on_both_rows(models, tmp_path):
    """kto: the answer's row and the mismatched row (the previous record's answer) each read the
    record's own images, as LLaMA-Factory's feedback processor gives them."""
    model_dir, _model = models("qwen2_vl")
    records = [{"messages": [{"role": "user", "content": "<image>Who are they?"}, {"role": "assistant", "content": answer}],
                "images": ["mllm_demo_data/1.jpg"], "label": tag} for answer, tag in (("Kane and Gretzka.", True), ("Nobody.", False))]
    spec = DatasetSpec(name="kto_images", file_name=str(tmp_path / "k.json"), formatting="sharegpt", media_dir=str(DATA),
                       columns={"messages": "messages", "images": "images", "kto_tag": "label"},
                       tags={"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"})
    stage = make_stage(model_dir, "qwen2_vl", stage="kto", cutoff_len=1024)
    examples = encode(stage, records, spec)
    assert [e.desirable for e in examples] == [True, False]
    for e in examples:
        assert e.target.media is e.kl.media and e.target.media["image_grid_thw"].tolist() == [[1, 12, 22]]
        image_tokens = sum(1 for t in e.kl.input_ids if t == stage.tokenizer.convert_tokens_to_ids("<|image_pad|>"))
        assert image_tokens == 12 * 22 // 4
    assert examples[0].kl.labels[-4:] == examples[1].target.labels[-4:]  # the rotated answer


def kto_spec() -> DatasetSpec:
    entry = json.loads((DATA / "dataset_info.json").read_text())["mllm_kto_demo"]
    return DatasetSpec(name="mllm_kto_demo", file_name=str(DATA / entry["file_name"]), formatting=entry["formatting"],
                       columns=entry["columns"], tags=entry["tags"], media_dir=str(DATA))


@pytest.mark.parametrize("case", REFERENCE["kto_cases"], ids=_case_id)
def test_kto_examples_with_images_match_llamafactory(case, models):
    """kto's answers and mismatched completions with the record's images, as LLaMA-Factory's
    feedback processor and KTODataCollatorWithPadding made them (each example alone)."""
    from ftui.runner.media_batch import media_collation

    model_dir, model = models(case["family"])
    stage = make_stage(model_dir, FAMILIES[case["family"]]["template"], stage="kto", cutoff_len=case["cutoff_len"],
                       image_max_pixels=case["image_max_pixels"])
    stage.media = media_collation(model)
    records = json.loads((DATA / "mllm_kto_demo.json").read_text())
    examples = encode(stage, records, kto_spec())
    assert len(examples) == len(case["examples"])
    for i, (example, ref) in enumerate(zip(examples, case["examples"])):
        assert example.desirable == ref["kto_tag"]
        assert (example.target.input_ids, example.target.labels) == (ref["input_ids"], ref["labels"]), f"example {i}"
        assert (example.kl.input_ids, example.kl.labels) == (ref["kl_input_ids"], ref["kl_labels"]), f"example {i}: mismatched row"
        assert example.kl.media is example.target.media
        batch = stage.collator()([example])
        assert batch.media.tensors["image_grid_thw"].tolist() == ref["image_grid_thw"] * 2  # once per row
        n = len(ref["input_ids"])
        assert batch.media.position_ids[:, 0, :n].tolist() == ref["position_ids"], f"example {i}: M-RoPE positions differ"
        pixels = example.target.media["pixel_values"].float().numpy()
        assert list(pixels.shape) == ref["pixel_values"]["shape"]
        assert hashlib.sha256(np.round(pixels.astype(np.float32), 4).tobytes()).hexdigest()[:16] == ref["pixel_values"]["digest"]


def test_a_pair_whose_answer_has_an_image_placeholder_is_named(models):
    """LLaMA-Factory counts the placeholders over the prompt and each answer: a rejected answer
    with an extra <image> is refused naming the record."""
    model_dir, _model = models("qwen2_vl")
    record = dict(PAIRS[0], rejected={"from": "gpt", "value": "<image>Two players."})
    with pytest.raises(DataFormatError, match=r"'mllm_dpo_demo' record 0: 1 file\(s\) in its images column but 2 <image>"):
        encode(make_stage(model_dir, "qwen2_vl", cutoff_len=1024), [record])


def test_stages_with_images(tmp_path):
    """dpo trains on images; kto and rm are refused by name, as pt (ftui.data.media says why:
    LLaMA-Factory 0.9.5 fails on them with these models)."""
    from ftui.data.media import media_refusal

    spec = dpo_spec()
    for stage in ("sft", "dpo"):
        assert media_refusal(spec, stage) is None
    for stage in ("pt", "kto", "rm"):
        assert f"stage {stage} with images is not supported yet; ftui trains vision-language models with stage sft, dpo" \
            in media_refusal(spec, stage)


def test_preflight_reads_the_pairs_images(models, tmp_path):
    """The preflight opens the first records' images of a ranking dataset (each answer with its
    prompt) and names a missing one; a good dataset passes."""
    from ftui.config.media_checks import first_records_media

    spec = dpo_spec()
    first_records_media(spec, PAIRS)
    bad = [dict(PAIRS[0], images=["mllm_demo_data/missing.jpg"])]
    with pytest.raises(DataFormatError, match="record 0.*missing.jpg: no such file"):
        first_records_media(spec, bad)


def ftui_train(config: dict, folder: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    import yaml

    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run([sys.executable, "-m", "ftui.cli.main", "train", str(path), "--set", "max_steps=2", "--set", "logging_steps=1"],
                          capture_output=True, text=True, cwd=folder, timeout=timeout)


def run_events(folder: Path) -> list[dict]:
    [events] = list(folder.glob("runs/*/events.jsonl"))
    return [json.loads(line) for line in events.read_text().splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("stage, method", [("dpo", "full"), ("dpo", "freeze")])
def test_a_preference_stage_trains_two_steps_on_images(stage, method, tmp_path):
    """Full and freeze DPO (LoRA: the LLaMA-Factory example, tests/test_lf_examples.py), the
    reference a frozen copy placed by the engine."""
    model = vlm_dir("qwen2_vl", tmp_path / "models")
    dataset, data_dir = "mllm_dpo_demo", str(DATA)
    config = dict(model_name_or_path=str(model), stage=stage, finetuning_type=method, template="qwen2_vl", dataset=dataset,
                  dataset_dir=data_dir, cutoff_len=1024, per_device_train_batch_size=2, learning_rate=1e-4,
                  output_dir=str(tmp_path / "runs"))
    proc = ftui_train(config, tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    steps = [e for e in run_events(tmp_path) if e["event"] == "step"]
    assert [e["step"] for e in steps] == [1, 2]
    assert all(np.isfinite(e["loss"]) for e in steps)
    if stage == "dpo":  # the reference read the same images: no reward at the first step
        assert steps[0]["rewards_margin"] == pytest.approx(0.0, abs=1e-5)


def test_the_preview_lists_a_pairs_images():
    from ftui.data.media_listing import list_record

    listing = list_record(PAIRS[2], dpo_spec(), 2, None)
    assert listing.problem is None and [image.shown for image in listing.images] == ["mllm_demo_data/3.jpg", "mllm_demo_data/2.jpg"]
