"""The planner's videos and audios (ftui.plan.media_load, vision_activations): the example a run
is planned with reads its first records' videos and audios from their headers, their tokens go
into the language model's rows and their patches (a video's t*h*w, an audio's 30 s of encoder
positions) through the tower. Arithmetic only, in the main venv (no torchvision); the measured
peak of a video run is tests/test_video_plan.py (marked ``video``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.vl_examples import tiny_vlm_cfg

av = pytest.importorskip("av", reason="needs PyAV: pip install -e '.[test]'")

VIDEO_KEYS = dict(video_maxlen=4, video_max_pixels=64 * 64)


def run_config(model: str, dataset: str, dataset_dir, **over):
    from ftui.config.schema import RunConfig

    return RunConfig(**{"model_name_or_path": model, "dataset": dataset, "dataset_dir": str(dataset_dir), "stage": "sft",
                        "template": "qwen2_vl", "cutoff_len": 1024, **over})


@pytest.fixture(scope="module")
def qwen2_vl(tmp_path_factory):
    from ftui.plan.model_shape import ModelShape, read_model_config

    model = tiny_vlm_cfg("qwen2_vl", tmp_path_factory.mktemp("vlm")).model_name_or_path
    return model, ModelShape.from_config(read_model_config(model))


def test_a_video_examples_tokens_and_patches_are_its_grids(qwen2_vl, lf_data):
    """mllm_video_demo's heaviest example: each video's grid from its header (the grid the video
    processor makes: tests/test_video_runner.py), its patches through the tower, / 4 tokens."""
    from ftui.data.registry import resolve_datasets
    from ftui.data.video_files import video_header
    from ftui.data.video_tokens import VideoSettings, video_grid
    from ftui.plan.media_load import video_processor_numbers
    from ftui.plan.vision_activations import image_load
    from tests.vlm_models import video_processor

    model, shape = qwen2_vl
    load = image_load(run_config(model, "mllm_video_demo", lf_data, **VIDEO_KEYS), shape.vision)
    numbers = video_processor_numbers(model, "qwen2_vl")
    assert (numbers.patch_size, numbers.min_pixels) == (14, video_processor("qwen2_vl")["size"]["shortest_edge"])
    [spec] = resolve_datasets("mllm_video_demo", str(lf_data))
    records = json.loads((lf_data / "mllm_video_demo.json").read_text())
    settings = VideoSettings(video_maxlen=4, video_max_pixels=64 * 64)
    grids = [video_grid(video_header(str(lf_data / r["videos"][0]), spec, i), numbers, settings) for i, r in enumerate(records)]
    most = max(t * h * w for t, h, w in grids)
    assert (load.source, load.images, load.videos, load.patches) == ("dataset", 0, 1, most)
    assert load.tokens == load.video_tokens == most // 4 and load.image_tokens == 0
    bigger = image_load(run_config(model, "mllm_video_demo", lf_data, video_maxlen=8, video_max_pixels=128 * 128), shape.vision)
    assert bigger.patches > 4 * load.patches  # twice the frames, four times the pixels


def test_a_record_with_an_image_and_a_video_counts_both(qwen2_vl, lf_data, tmp_path):
    from PIL import Image

    from ftui.data.media_tokens import VisionProcessor, image_tokens
    from ftui.plan.vision_activations import image_load

    model, shape = qwen2_vl
    demo = lf_data / "mllm_demo_data"
    record = {"messages": [{"role": "user", "content": "<image><video>What is shown?"}, {"role": "assistant", "content": "A baby."}],
              "images": [str(demo / "1.jpg")], "videos": [str(demo / "1.mp4")]}
    (tmp_path / "mixed.json").write_text(json.dumps([record]))
    (tmp_path / "dataset_info.json").write_text(json.dumps({"mixed": {
        "file_name": "mixed.json", "formatting": "sharegpt", "columns": {"messages": "messages", "images": "images", "videos": "videos"},
        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}}))
    videos_only = image_load(run_config(model, "mllm_video_demo", lf_data, **VIDEO_KEYS), shape.vision)
    mixed = image_load(run_config(model, "mixed", tmp_path, **VIDEO_KEYS), shape.vision)
    with Image.open(demo / "1.jpg") as image:
        image_part = image_tokens(*image.size, VisionProcessor(min_pixels=3136, max_pixels=12845056))
    assert (mixed.images, mixed.videos) == (1, 1)
    assert mixed.image_tokens == image_part and mixed.tokens == image_part + mixed.video_tokens
    assert mixed.patches == 4 * mixed.tokens and mixed.video_tokens <= videos_only.video_tokens


def test_a_videos_pixels_and_tower_activations_count_as_an_images(qwen2_vl):
    """A video's patches are rows of pixel_values_videos (the image's kernel wide) and run
    through the same blocks: a video of N patches costs what images of N patches cost."""
    from ftui.plan.planner import estimate
    from ftui.plan.vision_activations import ImageLoad

    _model, shape = qwen2_vl
    video = ImageLoad(0, 512, 2048, "dataset", videos=1, video_tokens=512)
    images = ImageLoad(2, 512, 2048, "dataset")

    def act(load, frozen=(True, True, False)):
        return estimate(shape, precision="fp32", micro_batch=2, seq_len=1536, frozen=frozen, images=load).activations

    text = act(None)
    assert act(video) - text == pytest.approx(2 * 2048 * shape.vision.kernel * 4)
    assert act(video, (False, False, False)) == pytest.approx(act(images, (False, False, False)))
    notes = estimate(shape, seq_len=1536, images=video).notes
    assert notes == ["videos: 1 video(s), 512 video tokens an example (0 image tokens beside them), within cutoff_len, and 2048 "
                     "patches through the vision tower; planned from the largest of the dataset's first records"]
    assert any("media take 512 tokens, cutoff_len=500" in n for n in estimate(shape, seq_len=500, images=video).notes)


def test_packing_plans_a_row_of_the_heaviest_video_example(qwen2_vl, lf_data):
    from ftui.plan.vision_activations import image_load

    model, shape = qwen2_vl
    one = image_load(run_config(model, "mllm_video_demo", lf_data, **VIDEO_KEYS), shape.vision)
    packed = image_load(run_config(model, "mllm_video_demo", lf_data, packing=True, **VIDEO_KEYS), shape.vision)
    n = 1024 // one.tokens
    assert (packed.videos, packed.video_tokens, packed.patches) == (n * one.videos, n * one.video_tokens, n * one.patches)


def test_qwen3_vls_video_numbers_bound_the_whole_clip(tmp_path):
    from ftui.plan.media_load import video_processor_numbers
    from tests.vlm_models import video_processor, vlm_dir

    numbers = video_processor_numbers(str(vlm_dir("qwen3_vl", tmp_path)), "qwen3_vl")
    assert numbers.whole_clip and (numbers.patch_size, numbers.max_pixels) == (16, video_processor("qwen3_vl")["size"]["longest_edge"])
    assert video_processor_numbers(str(tmp_path / "nowhere"), "qwen2_vl").patch_size == 14  # no file: the class defaults


# --- audios (Qwen2-Audio)


@pytest.fixture(scope="module")
def qwen2_audio(tmp_path_factory):
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from alm_models import audio_dir

    from ftui.plan.model_shape import ModelShape, read_model_config

    model = str(audio_dir(tmp_path_factory.mktemp("alm")))
    return model, ModelShape.from_config(read_model_config(model))


def test_an_audio_examples_tokens_come_from_its_length_and_its_tower_runs_30_s(qwen2_audio):
    from ftui.data.audio_files import audio_tokens, probe_audio
    from ftui.plan.media_load import AUDIO_FRAMES, AUDIO_POSITIONS
    from ftui.plan.planner import estimate
    from ftui.plan.vision_activations import image_load

    data = Path(__file__).parent / "data" / "llamafactory_vlm" / "data"
    model, shape = qwen2_audio
    assert shape.vision.mels == 128 and shape.vision.kernel == 0
    load = image_load(run_config(model, "mllm_audio_demo", data, template="qwen2_audio"), shape.vision)
    records = json.loads((data / "mllm_audio_demo.json").read_text())
    most = max(sum(audio_tokens(probe_audio(str(data / a)).samples_at(16000)) for a in r["audios"]) for r in records)
    assert (load.source, load.audios, load.images, load.tokens) == ("dataset", 1, 0, most)
    assert load.patches == AUDIO_POSITIONS and load.inputs == 128 * AUDIO_FRAMES

    def act(frozen, images=load):
        return estimate(shape, precision="fp32", micro_batch=2, seq_len=1024, frozen=frozen, images=images).activations

    text = act((True, True, False), None)
    assert act((True, True, False)) - text == pytest.approx(2 * 128 * AUDIO_FRAMES * 4)  # a frozen tower: its input features
    assert act((True, True, False)) < act((True, False, False)) < act((False, False, False))
    [note] = estimate(shape, seq_len=1024, images=load).notes
    assert note.startswith(f"audios: 1 audio(s), {most} audio tokens an example") and "1500 positions" in note


def test_an_audio_run_whose_data_is_elsewhere_is_planned_with_30_s(qwen2_audio, tmp_path):
    from ftui.plan.vision_activations import image_load

    model, shape = qwen2_audio
    load = image_load(run_config(model, "mllm_audio_demo", tmp_path / "elsewhere", template="qwen2_audio"), shape.vision)
    assert (load.source, load.audios, load.tokens) == ("audio_max_length", 1, 750)  # 3000 frames -> 1500 -> 750


def test_eager_attention_in_the_tower_scores_a_videos_frames_apart(qwen2_vl):
    """Qwen2-VL's tower attends within each temporal patch of a video (h*w patches), within each
    image (all its patches): a clip of two 1,024-patch frames keeps what two 1,024-patch images
    keep with eager attention, less than one image of 2,048 patches."""
    from ftui.plan.planner import estimate
    from ftui.plan.vision_activations import ImageLoad

    _model, shape = qwen2_vl
    video = ImageLoad(0, 512, 2048, "dataset", videos=1, video_tokens=512, attended=2 * 1024 ** 2)
    images = ImageLoad(2, 512, 2048, "dataset", attended=2 * 1024 ** 2)
    one = ImageLoad(1, 512, 2048, "dataset", attended=2048 ** 2)

    def act(load):
        return estimate(shape, precision="fp32", micro_batch=1, seq_len=1536, frozen=(False, False, False), images=load,
                        attention="eager").activations

    assert act(video) == pytest.approx(act(images)) and act(video) < act(one)
    assert act(one) == pytest.approx(act(ImageLoad(1, 512, 2048, "dataset")))  # without the pairs: patches / images each


def test_the_loads_attended_pairs_follow_the_grids(qwen2_vl, lf_data):
    from ftui.plan.vision_activations import image_load

    model, shape = qwen2_vl
    load = image_load(run_config(model, "mllm_video_demo", lf_data, **VIDEO_KEYS), shape.vision)
    frames = 2  # video_maxlen 4: two temporal patches
    assert load.attended == frames * (load.patches // frames) ** 2
