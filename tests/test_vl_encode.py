"""Records with images encoded as LLaMA-Factory 0.9.5 encodes them (issue 42, first slice):
Qwen2-VL, Qwen2.5-VL and Qwen3-VL, stage sft, on LLaMA-Factory's mllm_demo.

tests/data/llamafactory_vlm/reference.json holds what LLaMA-Factory's own preprocessing and
collator made of the 6 records (make_reference.py there, run once in its venv with
transformers 5.24.0) for the tiny models of tests/vlm_models.py, at cutoff_len 1024, at 80
(which cuts image tokens) and with image_max_pixels 128*128 (which shrinks the images first).
ftui's encoding of the same records must equal it field by field: input_ids, labels and
image_grid_thw exactly, pixel_values to 1e-5, and the M-RoPE position ids that the model's
get_rope_index computes from them (as LLaMA-Factory's collator calls it) exactly.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ftui.data.chat_template import fix_tokenizer
from ftui.data.conversation import EncodeOptions, Renderer
from ftui.data.records import DataFormatError, DatasetSpec, to_conversation
from ftui.presets.templates import TEMPLATES
from ftui.presets.vision_families import vision_family
from ftui.runner.vision.encode import VisionEncoder
from ftui.runner.vision.images import regularize_qwen
from ftui.data.media import record_media
from ftui.runner.vision.processor import ImageSettings, load_image_processor
from vlm_models import FAMILIES, vlm_dir

ROOT = Path(__file__).resolve().parents[1]
REF_DIR = ROOT / "tests" / "data" / "llamafactory_vlm"
DATA = REF_DIR / "data"
REFERENCE = json.loads((REF_DIR / "reference.json").read_text())
CASES = [c for c in REFERENCE["cases"] if c["family"] in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")]  # the others: test_vl_families.py
RECORDS = json.loads((DATA / "mllm_demo.json").read_text())


def mllm_demo_spec() -> DatasetSpec:
    entry = json.loads((DATA / "dataset_info.json").read_text())["mllm_demo"]
    return DatasetSpec(name="mllm_demo", file_name=str(DATA / entry["file_name"]), formatting=entry["formatting"],
                       columns=entry["columns"], tags=entry["tags"], media_dir=str(DATA))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """family -> (model folder, loaded model): built once for the module."""
    import transformers

    root = tmp_path_factory.mktemp("vlm")
    cache = {}

    def get(family: str):
        if family not in cache:
            path = vlm_dir(family, root)
            cache[family] = (path, transformers.AutoModelForImageTextToText.from_pretrained(str(path)))
        return cache[family]

    return get


def encoder_for(model_dir: Path, family: str, template: str, cutoff: int, max_pixels: int) -> VisionEncoder:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    fix_tokenizer(tok, TEMPLATES[template])
    renderer = Renderer(template, tok, EncodeOptions(cutoff_len=cutoff))
    return VisionEncoder(renderer, vision_family(family), load_image_processor(str(model_dir)), ImageSettings(max_pixels=max_pixels))


def rope_positions(model, ids: list[int], grid: torch.Tensor) -> list[list[int]]:
    """The M-RoPE position ids of one example as LLaMA-Factory's collator gets them: the model's
    get_rope_index with image token types, the text row put in front (4 x length)."""
    config = model.config
    input_ids = torch.tensor([ids])
    types = torch.zeros_like(input_ids)
    types[input_ids == config.image_token_id] = 1
    types[input_ids == config.video_token_id] = 2
    positions, _deltas = model.model.get_rope_index(input_ids=input_ids, mm_token_type_ids=types, image_grid_thw=grid,
                                                   attention_mask=torch.ones_like(input_ids))
    return torch.cat([positions[:1], positions], dim=0)[:, 0, :].tolist()


def _case_id(case: dict) -> str:
    return f"{case['family']}-cutoff{case['cutoff_len']}-maxpix{case['image_max_pixels']}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_encoding_matches_llamafactory(case, models):
    model_dir, model = models(case["family"])
    assert case["template"] == FAMILIES[case["family"]]["template"]
    encoder = encoder_for(model_dir, case["family"], case["template"], case["cutoff_len"], case["image_max_pixels"])
    tok = encoder.renderer.tokenizer
    assert (len(tok), tok.eos_token) == (case["vocab"], case["eos"])
    spec = mllm_demo_spec()
    assert len(case["examples"]) == len(RECORDS)
    for i, (record, ref) in enumerate(zip(RECORDS, case["examples"])):
        paths = record_media(record, spec, i)["images"]
        assert [Path(p).name for p in paths] == ref["images"]
        enc = encoder.encode(to_conversation(record, spec, i), paths, spec, i)
        assert enc.input_ids == ref["input_ids"], f"record {i}: input_ids differ"
        assert enc.labels == ref["labels"], f"record {i}: labels differ"
        grid = enc.media["image_grid_thw"]
        assert grid.tolist() == ref["image_grid_thw"]
        pixels = enc.media["pixel_values"].float().numpy()
        assert list(pixels.shape) == ref["pixel_values"]["shape"]
        np.testing.assert_allclose(pixels.reshape(-1)[: len(ref["pixel_values"]["first"])], ref["pixel_values"]["first"], atol=1e-5)
        assert float(pixels.astype(np.float64).sum()) == pytest.approx(ref["pixel_values"]["sum"], rel=1e-6, abs=1e-3)
        assert hashlib.sha256(np.round(pixels.astype(np.float32), 4).tobytes()).hexdigest()[:16] == ref["pixel_values"]["digest"]
        # the image tokens LLaMA-Factory's ids keep, against what the grids expand to
        kept = sum(1 for t in ref["input_ids"] if t == model.config.image_token_id)
        assert encoder.missing_image_tokens(enc) == sum(t * h * w // 4 for t, h, w in ref["image_grid_thw"]) - kept
        if ref["position_ids"] is not None:
            assert rope_positions(model, enc.input_ids, grid) == ref["position_ids"], f"record {i}: M-RoPE positions differ"


def test_the_reference_covers_every_family_and_a_cut():
    assert {c["family"] for c in REFERENCE["cases"]} == set(FAMILIES)
    assert REFERENCE["transformers"] == __import__("transformers").__version__
    cut = [e for c in CASES for e in c["examples"] if e["position_ids"] is None]
    assert cut, "a case must cut image tokens (cutoff_len 80)"


def stage_for(model_dir: Path, template: str, cutoff: int, **extra):
    from ftui.config.schema import RunConfig
    from ftui.runner.model import load_tokenizer
    from ftui.runner.stages import make_stage

    cfg = RunConfig(model_name_or_path=str(model_dir), template=template, dataset="mllm_demo", dataset_dir=str(DATA),
                    cutoff_len=cutoff, stage="sft", **extra)
    return make_stage(cfg, load_tokenizer(cfg))


def stage_encode(stage, records: list[dict], spec: DatasetSpec | None = None):
    from ftui.runner.data import Progress, TokenizedData

    return stage.encode([(spec or mllm_demo_spec(), records)], TokenizedData([], []), Progress(None, len(records)))


def test_sft_stage_gives_examples_with_their_images(models):
    model_dir, _model = models("qwen2_vl")
    ref = next(c for c in CASES if c["family"] == "qwen2_vl" and c["cutoff_len"] == 1024 and c["image_max_pixels"] == 768 * 768)
    examples = stage_encode(stage_for(model_dir, "qwen2_vl", 1024), RECORDS)
    assert [e.input_ids for e in examples] == [r["input_ids"] for r in ref["examples"]]
    assert [e.media["image_grid_thw"].tolist() for e in examples] == [r["image_grid_thw"] for r in ref["examples"]]
    assert examples[0].media["pixel_values"].shape[0] == int(examples[0].media["image_grid_thw"].prod(dim=1).sum())


def test_text_records_of_a_vision_run_are_encoded_as_text(models):
    model_dir, _model = models("qwen2_vl")
    stage = stage_for(model_dir, "qwen2_vl", 1024)
    text = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    [example] = stage_encode(stage, [text])
    assert example.media is None
    conv = to_conversation(text, mllm_demo_spec(), 0)
    assert example.input_ids == Renderer("qwen2_vl", stage.tokenizer, EncodeOptions(cutoff_len=1024)).encode(conv).input_ids


def test_cut_image_tokens_are_refused_naming_the_record(models):
    model_dir, _model = models("qwen2_vl")
    with pytest.raises(DataFormatError, match=r"record 0: its images take 132 tokens and cutoff_len=80 cuts \d+ of them"):
        stage_encode(stage_for(model_dir, "qwen2_vl", 80), RECORDS)


def test_image_max_pixels_is_read_from_the_config(models):
    model_dir, _model = models("qwen2_vl")
    [example] = stage_encode(stage_for(model_dir, "qwen2_vl", 1024, image_max_pixels=128 * 128), RECORDS[1:2])
    ref = next(c for c in CASES if c["family"] == "qwen2_vl" and c["image_max_pixels"] == 128 * 128)
    assert example.media["image_grid_thw"].tolist() == ref["examples"][1]["image_grid_thw"]


@pytest.mark.parametrize("content, images, match", [
    ("<image><image>Who?", ["mllm_demo_data/1.jpg"], r"1 file\(s\) in its images column but 2 <image> placeholder"),
    ("Who?", ["mllm_demo_data/1.jpg"], r"1 file\(s\) in its images column but 0 <image> placeholder"),
    ("<image>Who?", ["mllm_demo_data/missing.jpg"], "file mllm_demo_data/missing.jpg: no such file"),
])
def test_a_bad_record_is_named(models, content, images, match):
    model_dir, _model = models("qwen2_vl")
    record = {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": "Kane."}], "images": images}
    with pytest.raises(DataFormatError, match=f"'mllm_demo' record 0.*{match}"):
        stage_encode(stage_for(model_dir, "qwen2_vl", 1024), [record])


def test_an_image_that_cannot_be_decoded_is_named(models, tmp_path):
    model_dir, _model = models("qwen2_vl")
    (tmp_path / "bad.jpg").write_bytes((DATA / "mllm_demo_data" / "1.jpg").read_bytes()[:600])  # truncated
    record = {"messages": [{"role": "user", "content": "<image>Who?"}, {"role": "assistant", "content": "Kane."}],
              "images": [str(tmp_path / "bad.jpg")]}
    with pytest.raises(DataFormatError, match=r"record 0: the image .*bad\.jpg cannot be read"):
        stage_encode(stage_for(model_dir, "qwen2_vl", 1024), [record])


def test_images_need_a_vision_model_and_an_image_template(models, tmp_path):
    model_dir, _model = models("qwen2_vl")
    with pytest.raises(DataFormatError, match="template qwen has no image encoding; use template: qwen2_vl"):
        stage_encode(stage_for(model_dir, "qwen", 1024), RECORDS[:1])
    demo = ROOT / "ftui" / "presets" / "demo" / "model"
    with pytest.raises(DataFormatError, match=r"\(model_type llama\) reads text only"):
        stage_encode(stage_for(demo, "qwen2_vl", 1024), RECORDS[:1])


def test_videos_are_refused_by_name(models):
    model_dir, _model = models("qwen2_vl")
    spec = mllm_demo_spec()
    spec.columns = dict(spec.columns, videos="videos")
    record = {"messages": [{"role": "user", "content": "<video>Hi"}, {"role": "assistant", "content": "Hello."}], "videos": ["a.mp4"]}
    with pytest.raises(DataFormatError, match="videos are not supported yet"):
        stage_encode(stage_for(model_dir, "qwen2_vl", 1024), [record], spec)


# (size, mode, image_max_pixels) -> size: what LLaMA-Factory 0.9.5's Qwen2VLPlugin._preprocess_image gave
@pytest.mark.parametrize("size, mode, max_pixels, expected", [
    ((300, 168), "RGB", 768 * 768, (300, 168)),  # kept
    ((300, 168), "RGB", 128 * 128, (171, 95)),  # scaled down to about max_pixels
    ((20, 10), "L", 768 * 768, (45, 28)),  # scaled up to about min_pixels (32*32), the 28-pixel side, RGB
    ((30, 10), "RGB", 768 * 768, (55, 28)),
    ((9000, 30), "RGB", 768 * 768, (5400, 30)),  # an aspect ratio over 200 cut to 180
    ((10, 3000), "RGB", 768 * 768, (28, 3000)),  # the 28-pixel side first, then the ratio is under 200
])
def test_images_are_regularised_as_llamafactory_does(size, mode, max_pixels, expected):
    from PIL import Image

    image = regularize_qwen(Image.new(mode, size), max_pixels, 32 * 32)
    assert (image.size, image.mode) == (expected, "RGB")


def test_the_rendered_example_shows_where_the_image_tokens_sit(models):
    from ftui.runner.examples import collapse_repeats, masked_segments

    model_dir, _model = models("qwen2_vl")
    [example] = stage_encode(stage_for(model_dir, "qwen2_vl", 1024), RECORDS[:1])
    segments = masked_segments(load_tokenizer_of(model_dir, "qwen2_vl"), example.input_ids, example.labels)
    prompt, masked = segments[0]
    assert masked and "<|image_pad|><|image_pad|>" not in prompt
    assert "user\n<|vision_start|><|image_pad|> x 66 <|vision_end|>Who are they?<|im_end|>" in prompt
    assert "What are they doing?<|vision_start|><|image_pad|> x 66 <|vision_end|>" in segments[2][0]
    assert collapse_repeats("a<|x|><|x|>") == "a<|x|> x 2" and collapse_repeats("<|x|>b") == "<|x|>b"


def load_tokenizer_of(model_dir: Path, template: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    fix_tokenizer(tok, TEMPLATES[template])
    return tok
