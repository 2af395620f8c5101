"""Records with images encoded as LLaMA-Factory 0.9.5 encodes them (issue 42, first slice):
Qwen2-VL, Qwen2.5-VL and Qwen3-VL, stage sft, on LLaMA-Factory's mllm_demo.

tests/data/llamafactory_vlm/reference.json holds what LLaMA-Factory's own preprocessing and
collator made of the 6 records (make_reference.py there, run once in its venv with
transformers 5.24.0) for the tiny models of tests/vlm_models.py, at cutoff_len 1024, at 80
(which cuts image tokens) and with image_max_pixels 128*128 (which shrinks the images first).
ftui's encoding of the same records must equal it field by field: input_ids, labels and
image_grid_thw exactly, pixel_values to 1e-5, and the M-RoPE position ids that the model's
get_rope_index computes from them (as LLaMA-Factory's collator calls it) exactly. As in
LLaMA-Factory, an example keeps its image files and grids and the collator processes the
pixels (ftui.runner.vision.batch_images): the pixels compared are the collated ones.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from ftui.data.chat_template import fix_tokenizer
from ftui.data.conversation import EncodeOptions, Renderer
from ftui.data.records import DataFormatError, DatasetSpec, to_conversation
from ftui.presets.templates import TEMPLATES
from ftui.presets.vision_families import vision_family
from ftui.runner.vision.images import regularize_qwen
from ftui.runner.vision.processor import ImageSettings, load_image_processor
from vl_parity import RECORDS, assert_pixels_as_lf, encodings_against_lf
from vlm_models import FAMILIES, loaded_models

ROOT = Path(__file__).resolve().parents[1]
REF_DIR = ROOT / "tests" / "data" / "llamafactory_vlm"
DATA = REF_DIR / "data"
REFERENCE = json.loads((REF_DIR / "reference.json").read_text())
CASES = [c for c in REFERENCE["cases"] if c["family"] in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")]  # the others: test_vl_families.py


def mllm_demo_spec() -> DatasetSpec:
    entry = json.loads((DATA / "dataset_info.json").read_text())["mllm_demo"]
    return DatasetSpec(name="mllm_demo", file_name=str(DATA / entry["file_name"]), formatting=entry["formatting"],
                       columns=entry["columns"], tags=entry["tags"], media_dir=str(DATA))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """family -> (model folder, loaded model): built once for the module."""
    return loaded_models(tmp_path_factory.mktemp("vlm"))


def collated(model, ids: list[int], labels: list[int], media) -> tuple[dict, list[list[int]]]:
    """One example through ftui's collator, as LLaMA-Factory's reference ran each example alone:
    its images' tensors (the files opened and processed there, ftui.runner.media_batch) and its
    M-RoPE position ids (the model's get_rope_index, the text row in front: 4 x length)."""
    from ftui.runner.data import Collator, Example
    from ftui.runner.media_batch import media_collation

    batch = Collator(0, media=media_collation(model))([Example(ids, labels, real_tokens=len(ids), media=media)])
    return batch.media.tensors, batch.media.position_ids[:, 0, :].tolist()


def _case_id(case: dict) -> str:
    return f"{case['family']}-cutoff{case['cutoff_len']}-maxpix{case['image_max_pixels']}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_encoding_matches_llamafactory(case, models):
    model_dir, model = models(case["family"])
    for i, enc, ref, encoder in encodings_against_lf(case, model_dir, mllm_demo_spec()):
        assert [list(g) for g in enc.media.grids] == ref["image_grid_thw"]  # computed from the images' sizes
        kept = sum(1 for t in ref["input_ids"] if t == model.config.image_token_id)
        # no positions: LLaMA-Factory's collator failed on the example (cutoff_len cut its image
        # tokens, which the stage refuses), so only its images are processed
        alone = ref["position_ids"] is None
        tensors, positions = (enc.media.tensors(), None) if alone else collated(model, enc.input_ids, enc.labels, enc.media)
        assert tensors["image_grid_thw"].tolist() == ref["image_grid_thw"]
        assert_pixels_as_lf(tensors["pixel_values"], ref["pixel_values"])
        # the image tokens LLaMA-Factory's ids keep, against what the grids expand to
        assert encoder.missing_image_tokens(enc) == sum(t * h * w // 4 for t, h, w in ref["image_grid_thw"]) - kept
        if not alone:
            assert positions == ref["position_ids"], f"record {i}: M-RoPE positions differ"


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
    assert [[list(g) for g in e.media.grids] for e in examples] == [r["image_grid_thw"] for r in ref["examples"]]
    assert [Path(p).name for p in examples[1].media.paths] == ref["examples"][1]["images"]
    assert examples[0].media.tensors()["pixel_values"].shape[0] == examples[0].media.patches


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
    assert [list(g) for g in example.media.grids] == ref["examples"][1]["image_grid_thw"]
    assert example.media.tensors()["image_grid_thw"].tolist() == ref["examples"][1]["image_grid_thw"]


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


def test_videos_without_torchvision_or_on_an_image_family_are_refused_by_name(models, lf_data):
    """Videos need transformers' video processors, hence torchvision (tests/test_video_runner.py
    runs them where it is installed); LLaVA, Gemma 3 and InternVL train on images only."""
    pytest.importorskip("av", reason="needs PyAV: pip install -e '.[test]'")
    spec = mllm_demo_spec()
    spec.columns = dict(spec.columns, videos="videos")
    clip = str(lf_data / "mllm_demo_data" / "4.mp4")
    record = {"messages": [{"role": "user", "content": "<video>Hi"}, {"role": "assistant", "content": "Hello."}], "videos": [clip]}
    llava_dir, _model = models("llava")
    with pytest.raises(DataFormatError, match="ftui trains llava on images only; videos train with Qwen2-VL"):
        stage_encode(stage_for(llava_dir, "llava", 1024), [record], spec)
    if importlib.util.find_spec("torchvision") is None:
        model_dir, _model = models("qwen2_vl")
        with pytest.raises(DataFormatError, match=r"need torchvision: install ftui\[vision\]"):
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


# --- images kept as files until their batch is collated (ftui.runner.vision.batch_images)


def image_record(path: Path) -> dict:
    return {"messages": [{"role": "user", "content": "<image>What colour?"}, {"role": "assistant", "content": "Blue."}],
            "images": [str(path)]}


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_an_images_grid_from_its_size_is_the_processors(family, models):
    """The grid encoding computes from the size alone equals what the processor gives the
    regularised image: sizes around the processors' factors, tiny, long and huge ones."""
    from PIL import Image

    from ftui.runner.vision.batch_images import ImageReader
    from ftui.runner.vision.plugins import plugin

    model_dir, _model = models(family)
    processor = load_image_processor(str(model_dir))
    for max_pixels in (768 * 768, 128 * 128):
        reader = ImageReader(plugin(vision_family(family).plugin), processor, ImageSettings(max_pixels=max_pixels))
        for size in [(448, 448), (300, 168), (1000, 999), (27, 500), (20, 10), (5000, 40), (56, 8000), (1920, 1080), (111, 113)]:
            image = Image.new("RGB", size, (10, 200, 30))
            got = reader.plugin.image_inputs([image], processor, reader.settings)["image_grid_thw"].tolist()
            assert [list(reader.grid(image))] == got, (size, max_pixels)


def test_an_example_holds_its_image_files_not_their_pixels(models):
    import dataclasses

    model_dir, _model = models("qwen2_vl")
    [example] = stage_encode(stage_for(model_dir, "qwen2_vl", 1024), RECORDS[:1])
    fields = {f.name: getattr(example.media, f.name) for f in dataclasses.fields(example.media)}
    assert set(fields) == {"paths", "grids", "reader", "videos", "video_grids", "video_reader"}
    assert fields["videos"] == () and fields["video_grids"] == () and fields["video_reader"] is None  # no video: none read
    assert all(isinstance(p, str) for p in fields["paths"]) and len(fields["paths"]) == 2
    assert not any(isinstance(x, torch.Tensor) for x in (*fields["grids"], *vars(fields["reader"]).values()))


def test_a_batch_processes_its_rows_images_in_row_order(models):
    """Two examples with images and one without, collated: each key concatenated over the rows,
    each row's share kept, the pixels those of each example's images processed alone."""
    model_dir, model = models("qwen2_vl")
    stage = stage_for(model_dir, "qwen2_vl", 1024)
    text = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    examples = stage_encode(stage, [RECORDS[0], text, RECORDS[1]])
    from ftui.runner.data import Collator
    from ftui.runner.media_batch import media_collation

    batch = Collator(0, media=media_collation(model))(examples)
    alone = [examples[0].media.tensors(), examples[2].media.tensors()]
    for key in ("pixel_values", "image_grid_thw"):
        assert torch.equal(batch.media.tensors[key], torch.cat([a[key] for a in alone]))
    assert batch.media.row_sizes["image_grid_thw"] == [2, 0, 1]
    assert batch.media.row_sizes["pixel_values"] == [examples[0].media.patches, 0, examples[2].media.patches]


def test_an_image_changed_or_gone_since_encoding_is_named_when_its_batch_is_collated(models, tmp_path):
    from PIL import Image

    from ftui.runner.data import Collator
    from ftui.runner.media_batch import media_collation

    model_dir, model = models("qwen2_vl")
    picture = tmp_path / "picture.png"
    Image.new("RGB", (112, 56), (0, 0, 255)).save(picture)
    [example] = stage_encode(stage_for(model_dir, "qwen2_vl", 1024), [image_record(picture)])
    collate = Collator(0, media=media_collation(model))
    assert collate([example]).media.tensors["image_grid_thw"].tolist() == [[1, 4, 8]]
    Image.new("RGB", (56, 112), (0, 0, 255)).save(picture)  # same pixels count, another grid
    with pytest.raises(DataFormatError, match=r"the image .*picture\.png changed since the dataset was encoded: its grid of "
                                              r"patches is now 1x8x4, not 1x4x8"):
        collate([example])
    picture.unlink()
    with pytest.raises(DataFormatError, match=r"the image .*picture\.png could be read when the dataset was encoded but not now"):
        collate([example])
