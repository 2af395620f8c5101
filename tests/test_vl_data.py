"""Records with images on the app side (issue 42, first slice), torch-free: LLaMA-Factory's media
columns resolved and checked (ftui.data.media, ftui.data.media_files), its placeholder rule,
the tokens an image expands to (ftui.data.media_tokens, against LLaMA-Factory's own
regularisation and transformers' image processor), the VL config keys and the preflight of a
dataset with images against the model, the stage, the template, packing and tokenized_path."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from PIL import Image

from ftui.config.preflight import preflight
from ftui.data.media import (MediaFileError, MediaNotSupported, MediaPathError, PlaceholderMismatch, media_refusal, record_images,
                             record_media)
from ftui.data.media_files import IMAGE_PIXEL_LIMIT, load_image, verify_image
from ftui.data.media_tokens import VisionProcessor, image_grid, image_tokens, processor_from_config, regularized_size
from ftui.data.records import DataFormatError, DatasetSpec
from ftui.data.registry import dataset_path_problem, resolve_datasets
from tests.vlm_models import FAMILIES, vlm_dir

SHAREGPT_TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
LF_PYTHON = Path("/work/lfvenv/bin/python")


def sharegpt(root: Path, **columns) -> DatasetSpec:
    return DatasetSpec(name="pics", formatting="sharegpt", columns={"messages": "messages", "images": "images", **columns},
                       tags=SHAREGPT_TAGS, media_dir=str(root))


def alpaca(root: Path) -> DatasetSpec:
    return DatasetSpec(name="pics", formatting="alpaca", columns={"prompt": "instruction", "query": "input", "response": "output",
                                                                  "images": "images"}, media_dir=str(root))


def talk(*user: str, images=None, **extra) -> dict:
    messages = []
    for text in user:
        messages += [{"role": "user", "content": text}, {"role": "assistant", "content": "an answer"}]
    return {"messages": messages, "images": images, **extra}


def png(path: Path, size=(64, 48)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (200, 30, 30)).save(path)
    return path


def png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG whose header claims width x height, with almost no pixel data: cheap to write, and
    a decompression bomb to whatever decodes it."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b""))
    return path


# --- columns, paths and placeholders


def test_sharegpt_and_alpaca_records_give_absolute_paths_of_their_images(tmp_path):
    png(tmp_path / "pics" / "a.png")
    elsewhere = png(tmp_path / "outside" / "b.png")
    got = record_media(talk("<image>Who?", "And <image>?", images=["pics/a.png", str(elsewhere)]), sharegpt(tmp_path), 0)
    assert got == {"images": [str(tmp_path / "pics" / "a.png"), str(elsewhere)], "videos": [], "audios": []}
    one = {"instruction": "<image>What is it?", "input": "", "output": "red", "images": "pics/a.png"}  # one path: a list of one
    assert record_media(one, alpaca(tmp_path), 3)["images"] == [str(tmp_path / "pics" / "a.png")]
    assert [(i.width, i.height) for i in record_images(one, alpaca(tmp_path), 3)] == [(64, 48)]
    none = {"instruction": "What is it?", "output": "red", "images": []}  # LLaMA-Factory: an empty list is no media
    assert record_media(none, alpaca(tmp_path), 4) == {"images": [], "videos": [], "audios": []}


def test_a_file_given_by_path_reads_its_images_key(tmp_path):
    png(tmp_path / "a.png")
    data = tmp_path / "mine.json"
    data.write_text(json.dumps([talk("<image>Hi", images=["a.png"])]))
    [spec] = resolve_datasets(str(data), str(tmp_path))
    record = json.loads(data.read_text())[0]
    spec.formatting = "sharegpt"
    assert record_media(record, spec, 0)["images"] == [str(tmp_path / "a.png")]


@pytest.mark.parametrize("url", ["http://example.com/a.png", "https://x.org/b.jpg", "s3://bucket/c.png"])
def test_a_url_is_refused_naming_it(tmp_path, url):
    with pytest.raises(MediaPathError) as err:
        record_media(talk("<image>Hi", images=[url]), sharegpt(tmp_path), 7)
    assert "'pics' record 7" in str(err.value) and url in str(err.value) and "URL" in str(err.value)


def test_embedded_image_data_is_refused_by_name(tmp_path):
    with pytest.raises(MediaPathError, match="embedded data, not a file path"):
        record_media(talk("<image>Hi", images=[{"bytes": b"\x89PNG", "path": None}]), sharegpt(tmp_path), 1)


def test_placeholders_must_match_the_images_both_ways(tmp_path):
    png(tmp_path / "a.png")
    with pytest.raises(PlaceholderMismatch, match="record 2: 2 file.s. in its images column but 1 <image> placeholder"):
        record_media(talk("<image>Hi", images=["a.png", "a.png"]), sharegpt(tmp_path), 2)
    with pytest.raises(PlaceholderMismatch, match="record 2: 1 file.s. in its images column but 2 <image>"):
        record_media(talk("<image>Hi<image>", images=["a.png"]), sharegpt(tmp_path), 2)
    with pytest.raises(PlaceholderMismatch, match="0 file.s. in its images column but 1 <image>.*names no images file"):
        record_media(talk("<image>Hi", images=None), sharegpt(tmp_path), 2)
    with pytest.raises(PlaceholderMismatch, match="0 file.s. in its videos column but 1 <video>"):  # LLaMA-Factory counts every medium
        record_media(talk("<image>Hi<video>", images=["a.png"]), sharegpt(tmp_path), 2)


def test_images_without_any_placeholder_are_refused_as_llamafactory_training_refuses_them(tmp_path):
    """LLaMA-Factory 0.9.5: the supervised processor calls mm_plugin.process_messages, whose
    _validate_messages raises "The number of images does not match the number of <image>
    tokens"; only its chat engines add the placeholders. The system prompt is not counted."""
    png(tmp_path / "a.png")
    record = talk("What is it?", images=["a.png"], system="<image>")
    with pytest.raises(PlaceholderMismatch) as err:
        record_media(record, sharegpt(tmp_path, system="system"), 5)
    assert "1 file(s) in its images column but 0 <image>" in str(err.value) and "LLaMA-Factory 0.9.5 refuses such a record" in str(err.value)


@pytest.mark.slow  # CI time (30 s: LLaMA-Factory's venv starts): ftui's refusal is test_images_without_any_placeholder_...
def test_llamafactory_refuses_a_record_with_images_and_no_placeholder(tmp_path):
    """The rule above, checked against LLaMA-Factory's own plugin (its venv, when here)."""
    if not LF_PYTHON.is_file():
        pytest.skip(f"LLaMA-Factory's venv is not at {LF_PYTHON}")
    png(tmp_path / "a.png")
    code = ("from llamafactory.data.mm_plugin import get_mm_plugin\n"
            "p = get_mm_plugin('qwen2_vl', image_token='<|image_pad|>', video_token='<|video_pad|>')\n"
            f"p._validate_messages([{{'role': 'user', 'content': 'What?'}}, {{'role': 'assistant', 'content': 'red'}}], "
            f"[{str(tmp_path / 'a.png')!r}], [], [])\n")
    proc = subprocess.run([str(LF_PYTHON), "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "The number of images does not match the number of <image> tokens" in proc.stderr


# --- the files


def test_a_missing_image_is_named_with_its_record_and_where_it_was_looked_for(tmp_path):
    with pytest.raises(MediaFileError) as err:
        record_media(talk("<image>Hi", images=["gone.png"]), sharegpt(tmp_path), 4)
    said = str(err.value)
    assert "'pics' record 4" in said and "gone.png" in said and str(tmp_path / "gone.png") in said and "dataset_dir" in said


def test_not_an_image_truncated_and_corrupt_files_are_named(tmp_path):
    spec = sharegpt(tmp_path)
    (tmp_path / "notes.png").write_text("hello, I am text")
    with pytest.raises(MediaFileError, match="record 1: file .*notes.png: not an image"):
        record_media(talk("<image>Hi", images=["notes.png"]), spec, 1)
    noise = Image.frombytes("RGB", (64, 64), os.urandom(64 * 64 * 3))
    noise.save(tmp_path / "good.png")
    whole = (tmp_path / "good.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(whole[: len(whole) // 2])
    broken = bytearray(whole)
    broken[len(broken) // 2: len(broken) // 2 + 64] = b"\xff" * 64
    (tmp_path / "broken.png").write_bytes(bytes(broken))
    for name in ("cut.png", "broken.png"):  # the header reads: only decoding finds them
        assert record_media(talk("<image>Hi", images=[name]), spec, 1)["images"]
        with pytest.raises(MediaFileError, match=f"record 1: file .*{name}: the image data is truncated or corrupt"):
            verify_image(str(tmp_path / name), spec, 1)
        with pytest.raises(MediaFileError, match="truncated or corrupt"):
            load_image(str(tmp_path / name), spec, 1)
    assert verify_image(str(tmp_path / "good.png"), spec, 1).width == 64
    assert load_image(str(tmp_path / "good.png"), spec, 1).size == (64, 64)


@pytest.mark.parametrize("side", [20_000, 10_000])  # 400 M pixels: PIL's bomb error; 100 M: its warning, ftui's limit
def test_a_huge_png_is_refused_from_its_header_without_decoding(tmp_path, side):
    png_header_only(tmp_path / "bomb.png", side, side)
    assert (tmp_path / "bomb.png").stat().st_size < 200
    spec = sharegpt(tmp_path)
    for check in (lambda: record_media(talk("<image>Hi", images=["bomb.png"]), spec, 9),
                  lambda: verify_image(str(tmp_path / "bomb.png"), spec, 9)):
        with pytest.raises(MediaFileError) as err:
            check()
        said = str(err.value)
        assert "record 9" in said and "bomb.png" in said and f"{IMAGE_PIXEL_LIMIT:,}" in said
        assert f"{side} x {side}" in said or "400000000 pixels" in said


def test_video_and_audio_datasets_train_with_sft_and_other_stages_are_refused_by_name(lf_data):
    for name, medium in (("mllm_video_demo", "videos"), ("mllm_audio_demo", "audios")):
        assert dataset_path_problem(name, str(lf_data), "sft") is None  # tests/test_video_*.py, tests/test_audio.py
        assert f"stage dpo with {medium} is not supported yet" in dataset_path_problem(name, str(lf_data), "dpo")


def test_images_train_with_the_stages_llamafactory_trains_on_them(lf_data):
    """sft and dpo train on images; pt, kto and rm are refused by name (ftui.data.media:
    LLaMA-Factory 0.9.5 drops pt's images and fails on kto's and rm's; tests/test_vl_dpo.py)."""
    [spec] = resolve_datasets("mllm_demo", str(lf_data))
    for stage in ("sft", "dpo"):
        assert media_refusal(spec, stage) is None
    for stage in ("pt", "kto", "rm"):
        assert f"stage {stage} with images is not supported yet" in media_refusal(spec, stage)
    assert dataset_path_problem("rlhf_v", str(lf_data), "dpo") is None


def test_every_mllm_demo_record_resolves_with_its_images(lf_data):
    from ftui.data.dataset_files import read_records

    [spec] = resolve_datasets("mllm_demo", str(lf_data))
    records = read_records(spec)
    images = [record_media(r, spec, i)["images"] for i, r in enumerate(records)]
    assert all(images) and all(p.startswith(str(lf_data / "mllm_demo_data")) for paths in images for p in paths)
    assert sum(len(p) for p in images) == sum(len(r["images"]) for r in records)


# --- tokens an image expands to


SIZES = [(300, 200), (640, 480), (4000, 3000), (5000, 20), (10, 10), (1, 1), (12000, 50), (100000, 1), (27, 900)]
PIXEL_BOUNDS = [(768 * 768, 32 * 32), (262144, 1024), (4096, 1024)]  # LLaMA-Factory's default, its Qwen3-VL examples', a small one


# LLaMA-Factory 0.9.5's sizes for SIZES x PIXEL_BOUNDS, recorded from its venv (how: the file's
# made_by): CI compares with the record, -m slow asks LLaMA-Factory again (its venv takes 25 s to start)
RECORDED_SIZES = Path(__file__).parent / "data" / "llamafactory_vlm" / "regularized_sizes.json"


def _cases() -> list[tuple[tuple[int, int], int, int]]:
    return [(s, hi, lo) for s in SIZES for hi, lo in PIXEL_BOUNDS]


def _recorded() -> list[tuple[int, int] | None]:
    rows = json.loads(RECORDED_SIZES.read_text())["cases"]
    assert [(tuple(r["size"]), r["image_max_pixels"], r["image_min_pixels"]) for r in rows] == _cases()
    return [tuple(r["llamafactory"]) if r["llamafactory"] else None for r in rows]


def test_the_regularised_size_is_llamafactorys():
    """regularized_size against LLaMA-Factory's Qwen2VLPlugin._preprocess_image (recorded)."""
    theirs = _recorded()
    assert None in theirs  # 100000 x 1 scaled to 4096 pixels: 0 pixels high

    def ours(width, height, hi, lo):
        try:
            return regularized_size(width, height, hi, lo)
        except ValueError:
            return None

    assert [ours(w, h, hi, lo) for (w, h), hi, lo in _cases()] == theirs


@pytest.mark.slow  # CI time: test_the_regularised_size_is_llamafactorys compares with this record
def test_llamafactory_still_gives_the_recorded_sizes():
    if not LF_PYTHON.is_file():
        pytest.skip(f"LLaMA-Factory's venv is not at {LF_PYTHON}")
    code = ("import json, sys\nfrom PIL import Image\nfrom llamafactory.data.mm_plugin import get_mm_plugin\n"
            "p = get_mm_plugin('qwen2_vl', image_token='<|image_pad|>', video_token='<|video_pad|>')\n"
            "def size(s, hi, lo):\n"
            "    try:\n"
            "        return p._preprocess_image(Image.new('RGB', tuple(s)), image_max_pixels=hi, image_min_pixels=lo).size\n"
            "    except ValueError:\n"  # a side scaled to 0 pixels: PIL cannot resize to it
            "        return None\n"
            "print(json.dumps([size(*case) for case in json.loads(sys.argv[1])]))\n")
    proc = subprocess.run([str(LF_PYTHON), "-c", code, json.dumps(_cases())], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = [tuple(s) if s else None for s in json.loads(proc.stdout.strip().splitlines()[-1])]
    assert theirs == _recorded()


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])  # patch 14 and 16
def test_image_grid_and_tokens_match_transformers_image_processor(tmp_path, family):
    """The grid of an image regularised as LLaMA-Factory does, against transformers' own
    Qwen2-VL image processor (its PIL implementation) on an image of that size."""
    from transformers import AutoImageProcessor

    config = FAMILIES[family]["processor"]
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(config))
    theirs = AutoImageProcessor.from_pretrained(str(tmp_path))
    ours = processor_from_config(config)
    assert (ours.patch_size, ours.merge_size, ours.min_pixels, ours.max_pixels) == (
        theirs.patch_size, theirs.merge_size, theirs.size["shortest_edge"], theirs.size["longest_edge"])
    for width, height in SIZES:
        for hi, lo in PIXEL_BOUNDS:
            if width * height > hi and min(width, height) * (hi / (width * height)) ** 0.5 < 1:
                continue  # LLaMA-Factory cannot resize it either (test_the_regularised_size_is_llamafactorys)
            resized = Image.new("RGB", regularized_size(width, height, hi, lo))
            grid = theirs([resized], return_tensors="np")["image_grid_thw"][0].tolist()
            assert list(image_grid(width, height, ours, hi, lo)) == grid, (width, height, hi, lo)
            assert image_tokens(width, height, ours, hi, lo) == grid[0] * grid[1] * grid[2] // ours.merge_size ** 2


def test_a_processor_config_reads_as_transformers_reads_it():
    assert processor_from_config({}) == VisionProcessor()
    sized = processor_from_config({"size": {"shortest_edge": 100, "longest_edge": 5000}, "max_pixels": 7000, "patch_size": 16})
    assert (sized.min_pixels, sized.max_pixels, sized.patch_size) == (100, 7000, 16)
    with pytest.raises(ValueError, match="merge_size"):
        processor_from_config({"merge_size": 0})


# --- the config keys


def cfg_problems(**data) -> dict[str, str]:
    from ftui.config.preflight import validate_config

    base = {"model_name_or_path": "ftui-demo", "model_init": "random", "dataset": "ftui_demo"}
    return {p.field: p.message for p in validate_config(base | data)[1]}


def test_the_vl_keys_take_llamafactorys_names_and_defaults():
    from ftui.config.schema import RunConfig
    from ftui.presets.lf_keys import LF_DEFAULTS, NO_EFFECT, REFUSED

    keys = ("image_max_pixels image_min_pixels image_do_pan_and_scan crop_to_patches video_max_pixels video_min_pixels video_fps "
            "video_maxlen use_audio_in_video audio_sampling_rate freeze_vision_tower freeze_multi_modal_projector "
            "freeze_language_model").split()
    cfg = RunConfig(model_name_or_path="m", dataset="d")
    for key in keys:
        assert getattr(cfg, key) == LF_DEFAULTS[key], key
        assert key not in NO_EFFECT and key not in REFUSED
        assert RunConfig.model_fields[key].description


def test_the_vl_keys_rules():
    assert cfg_problems(image_max_pixels=262144, video_max_pixels=16384, video_fps=1.0, freeze_vision_tower=False) == {}
    assert "above image_max_pixels" in cfg_problems(image_min_pixels=5000, image_max_pixels=4096)["image_min_pixels"]
    assert "above video_max_pixels" in cfg_problems(video_min_pixels=5000, video_max_pixels=4096)["video_min_pixels"]
    assert "greater than 0" in cfg_problems(image_max_pixels=0)["image_max_pixels"]
    assert "Gemma 3" in cfg_problems(image_do_pan_and_scan=True)["image_do_pan_and_scan"]
    assert "InternVL" in cfg_problems(crop_to_patches=True)["crop_to_patches"]
    assert "dataset_dir" in cfg_problems(media_dir="/elsewhere")["media_dir"]
    assert cfg_problems(media_dir=None) == {}
    assert "multimodal" in cfg_problems(template="pixtral")["template"]
    assert "qwen2_vl" in cfg_problems(template="pixtral")["template"] and "LLaVA-1.5" in cfg_problems(template="pixtral")["template"]
    for template in ("llava", "intern_vl"):  # trained now: refused only for the demo's text model
        assert "multimodal" not in cfg_problems(template=template)["template"]
        assert "reads text only" in cfg_problems(template=template)["template"]


# --- preflight against the model


@pytest.fixture(scope="module")
def tiny_qwen2_vl(tmp_path_factory) -> Path:
    return vlm_dir("qwen2_vl", tmp_path_factory.mktemp("vlm"))


def run_config(tmp_path: Path, model: Path | str, **extra) -> dict:
    return {"model_name_or_path": str(model), "dataset": "mllm_demo", "template": "qwen2_vl", "device": "cpu",
            "output_dir": str(tmp_path / "runs")} | extra


def test_preflight_accepts_mllm_demo_for_a_tiny_qwen2_vl(tmp_path, lf_data, tiny_qwen2_vl):
    verdict = preflight(run_config(tmp_path, tiny_qwen2_vl, dataset_dir=str(lf_data)))
    assert verdict.ready, [str(p) for p in verdict.problems]
    verdict = preflight(run_config(tmp_path, tiny_qwen2_vl, dataset_dir=str(lf_data), dataset="mllm_demo,identity"))
    assert verdict.ready, [str(p) for p in verdict.problems]


def test_preflight_refuses_images_for_a_text_model(tmp_path, lf_data):
    from ftui.rundir.paths import DEMO_MODEL

    problems = {p.field: p.message for p in preflight(run_config(tmp_path, DEMO_MODEL, dataset_dir=str(lf_data), template=None,
                                                                 model_init="random")).problems}
    assert "the dataset mllm_demo has images, but ftui-demo (model_type llama) reads text only" in problems["dataset"]
    assert "template" not in problems  # the model is what to change
    problems = {p.field: p.message for p in preflight(run_config(tmp_path, DEMO_MODEL, dataset_dir=str(lf_data),
                                                                 model_init="random")).problems}
    assert "template qwen2_vl encodes images" in problems["template"] and "reads text only" in problems["template"]


def test_preflight_wants_an_image_template_and_no_tokenized_path(tmp_path, lf_data, tiny_qwen2_vl):
    def problems(**extra) -> dict[str, str]:
        return {p.field: p.message for p in preflight(run_config(tmp_path, tiny_qwen2_vl, dataset_dir=str(lf_data), **extra)).problems}

    assert "set template: qwen2_vl" in problems(template=None)["template"]
    assert "template qwen encodes text only" in problems(template="qwen")["template"]
    assert "packing" not in problems(packing=True) and "neat_packing" not in problems(neat_packing=True)  # Qwen2-VL packs
    assert "tokenized_path" in problems(tokenized_path=str(tmp_path / "enc"))["tokenized_path"]
    assert "stage pt with images is not supported yet" in problems(stage="pt")["dataset"]


def test_preflight_names_a_vision_model_without_its_processor(tmp_path, lf_data, tiny_qwen2_vl):
    folder = shutil.copytree(tiny_qwen2_vl, tmp_path / "no-processor")
    (folder / "preprocessor_config.json").unlink()
    problems = {p.field: p.message for p in preflight(run_config(tmp_path, folder, dataset_dir=str(lf_data))).problems}
    assert "no preprocessor_config.json" in problems["model_name_or_path"]


def test_preflight_names_the_first_bad_image_and_its_record(tmp_path, tiny_qwen2_vl):
    data = tmp_path / "data"
    png(data / "ok.png")
    Image.frombytes("RGB", (64, 64), os.urandom(64 * 64 * 3)).save(data / "noise.png")
    (data / "bad.png").write_bytes((data / "noise.png").read_bytes()[:6000])  # its header whole, its pixels cut
    records = [talk("<image>Hi", images=["ok.png"]), talk("<image>Hi", images=["bad.png"])]
    (data / "pics.json").write_text(json.dumps(records))
    (data / "dataset_info.json").write_text(json.dumps({"pics": {"file_name": "pics.json", "formatting": "sharegpt",
                                                                 "columns": {"messages": "messages", "images": "images"},
                                                                 "tags": SHAREGPT_TAGS}}))
    verdict = preflight(run_config(tmp_path, tiny_qwen2_vl, dataset="pics", dataset_dir=str(data)))
    [problem] = verdict.problems
    assert problem.field == "dataset"
    assert "'pics' record 1" in problem.message and "bad.png" in problem.message and "truncated or corrupt" in problem.message
    records[1]["images"] = None
    (data / "pics.json").write_text(json.dumps(records))
    [problem] = preflight(run_config(tmp_path, tiny_qwen2_vl, dataset="pics", dataset_dir=str(data))).problems
    assert "record 1: 0 file(s) in its images column but 1 <image>" in problem.message


def test_a_data_format_error_is_what_every_media_error_is():
    for error in (MediaFileError, MediaPathError, MediaNotSupported, PlaceholderMismatch):
        assert issubclass(error, DataFormatError)


# --- the preview (ftui data --show)


def test_the_preview_lists_each_records_images_with_size_and_tokens(tmp_path, lf_data, tiny_qwen2_vl):
    from ftui.config.schema import RunConfig
    from ftui.data.media_listing import listing_text
    from ftui.jobs.examples import image_listings

    cfg = RunConfig.model_validate(run_config(tmp_path, tiny_qwen2_vl, dataset_dir=str(lf_data), image_max_pixels=4096))
    listings = image_listings(cfg, 2)
    assert [(x.dataset, x.index, x.problem) for x in listings] == [("mllm_demo", 0, None), ("mllm_demo", 1, None)]
    first = listings[0].images[0]
    with Image.open(lf_data / "mllm_demo_data" / "1.jpg") as image:
        assert (first.shown, first.width, first.height) == ("mllm_demo_data/1.jpg", *image.size)
    processor = processor_from_config(FAMILIES["qwen2_vl"]["processor"])
    assert first.tokens == image_tokens(first.width, first.height, processor, 4096, 32 * 32) > 0
    text = listing_text(listings[0]).plain
    assert f"dataset 'mllm_demo' record 0, image 2: mllm_demo_data/1.jpg  {first.width} x {first.height}, {first.tokens} image tokens" in text
    assert image_listings(cfg.model_copy(update={"dataset": "identity"}), 2) == []


def test_the_preview_names_a_records_problem_in_its_place(tmp_path, tiny_qwen2_vl):
    from ftui.config.schema import RunConfig
    from ftui.data.media_listing import listing_text
    from ftui.jobs.examples import image_listings

    png(tmp_path / "ok.png")
    data = tmp_path / "pics.json"
    data.write_text(json.dumps([talk("<image>Hi", images=["ok.png"]), talk("<image>Hi", images=["gone.png"])]))
    cfg = RunConfig.model_validate(run_config(tmp_path, tiny_qwen2_vl, dataset=str(data), dataset_dir=str(tmp_path)))
    ok, gone = image_listings(cfg, 5)
    assert ok.images[0].shown == "ok.png" and ok.images[0].tokens is not None
    assert "record 1: file gone.png: no such file" in listing_text(gone).plain


def test_predict_and_eval_jobs_over_images_need_a_vision_language_model(tmp_path, lf_data):
    from ftui.data.registry import media_job_problem
    from ftui.jobs.offline import JobError, prepare_job

    refused = media_job_problem("identity,mllm_demo", str(lf_data), "predict", "qwen2")
    assert "dataset 'mllm_demo' has images" in refused and "ftui predict over images needs a vision-language model" in refused
    assert media_job_problem("identity,mllm_demo", str(lf_data), "predict", "qwen2_vl") is None  # a family ftui trains
    assert media_job_problem("identity", str(lf_data), "eval", "qwen2") is None
    base = {"model_name_or_path": "ftui-demo", "dataset": "identity", "dataset_dir": str(lf_data)}
    from ftui.config.schema import RunConfig

    with pytest.raises(JobError, match="ftui eval over images needs a vision-language model"):
        prepare_job("eval", run_dir=None, source={"model": "ftui-demo"}, dataset="mllm_demo", dataset_dir=str(lf_data),
                    model_config=RunConfig.model_validate(base), root=tmp_path)
    assert not any(tmp_path.iterdir())  # refused before the job's directory exists


def test_a_vision_model_with_every_part_frozen_is_refused(tmp_path, lf_data, tiny_qwen2_vl):
    def problems(**extra) -> dict[str, str]:
        return {p.field: p.message for p in preflight(run_config(tmp_path, tiny_qwen2_vl, dataset_dir=str(lf_data), **extra)).problems}

    assert "no part of the model would train" in problems(freeze_language_model=True)["freeze_language_model"]
    assert problems(freeze_language_model=True, freeze_vision_tower=False) == {}
    assert cfg_problems(freeze_language_model=True) == {}  # a text model: the key has no effect, as in LLaMA-Factory


def test_a_path_not_under_dataset_dir_is_read_as_written_as_llamafactory_does(tmp_path, monkeypatch):
    """LLaMA-Factory's _find_medias: "Media ... does not exist in `media_dir`. Use original path."
    (a path relative to the current directory, which a run keeps)."""
    png(tmp_path / "work" / "data" / "pics" / "a.png")
    monkeypatch.chdir(tmp_path / "work")
    spec = sharegpt(tmp_path / "work" / "data")
    got = record_media(talk("<image>Hi", images=["data/pics/a.png"]), spec, 0)["images"]  # data/data/pics/a.png is not there
    assert got == [str(tmp_path / "work" / "data" / "pics" / "a.png")]
    assert record_media(talk("<image>Hi", images=["pics/a.png"]), spec, 0)["images"] == got
