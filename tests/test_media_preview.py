"""The dataset preview's videos and audios (ftui.data.media_listing, shared by ``ftui data --show``
and the launch form): each video with its frame size, duration, the frames the run samples and
its video tokens (from the header and the run's video keys, the count the planner and the
runner use), each audio with its duration, rate and tokens; the form lists them from its worker."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from textual.widgets import Input, Static

from tests.vlm_models import vlm_dir

av = pytest.importorskip("av", reason="needs PyAV: pip install -e '.[test]'")

AUDIO_DATA = Path(__file__).parent / "data" / "llamafactory_vlm" / "data"


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def tiny_qwen2_vl(tmp_path_factory) -> Path:
    return vlm_dir("qwen2_vl", tmp_path_factory.mktemp("vlm"))


def video_cfg(tmp_path, model, lf_data, **over):
    from ftui.config.schema import RunConfig

    return RunConfig.model_validate({"model_name_or_path": str(model), "dataset": "mllm_video_demo", "dataset_dir": str(lf_data),
                                     "template": "qwen2_vl", "output_dir": str(tmp_path / "runs"), "video_maxlen": 4,
                                     "video_max_pixels": 64 * 64, **over})


def test_each_video_is_listed_with_its_frames_and_tokens(tmp_path, lf_data, tiny_qwen2_vl):
    from rich.console import Console

    from ftui.cli.data import show_images
    from ftui.data.registry import resolve_datasets
    from ftui.data.video_files import video_header
    from ftui.data.video_tokens import VideoSettings, video_tokens
    from ftui.jobs.examples import image_listings
    from ftui.plan.media_load import video_processor_numbers

    cfg = video_cfg(tmp_path, tiny_qwen2_vl, lf_data)
    listings = image_listings(cfg, 2)
    assert [(x.index, x.problem, x.images) for x in listings] == [(0, None, ()), (1, None, ())]
    [spec] = resolve_datasets("mllm_video_demo", str(lf_data))
    record = json.loads((lf_data / "mllm_video_demo.json").read_text())[0]
    info = video_header(str(lf_data / record["videos"][0]), spec, 0)
    [video] = listings[0].videos
    settings = VideoSettings(video_maxlen=4, video_max_pixels=64 * 64)
    assert (video.shown, video.width, video.height, video.frames) == (record["videos"][0], info.width, info.height, 4)
    assert video.seconds == pytest.approx(info.duration) and video.fps == pytest.approx(info.average_fps)
    assert video.tokens == video_tokens(info, video_processor_numbers(str(tiny_qwen2_vl), "qwen2_vl"), settings) > 0
    out = Console(file=io.StringIO(), width=300)
    show_images(out, cfg, 1)  # what ftui data --show prints before the examples
    said = out.file.getvalue()
    assert (f"dataset 'mllm_video_demo' record 0, video 1: {record['videos'][0]}  {info.width} x {info.height}, "
            f"{info.duration:.2f} s at {info.average_fps:.3g} fps, 4 frames sampled, {video.tokens} video tokens") in said
    more = image_listings(video_cfg(tmp_path, tiny_qwen2_vl, lf_data, video_maxlen=8), 1)[0].videos[0]
    assert more.frames == 8 and more.tokens == 2 * video.tokens  # the video keys reach the count


def test_a_model_without_videos_lists_them_without_tokens_and_a_broken_one_names_its_record(tmp_path, lf_data):
    from ftui.data.media_listing import listing_text
    from ftui.jobs.examples import image_listings

    llava = vlm_dir("llava", tmp_path / "models")
    [first] = image_listings(video_cfg(tmp_path, llava, lf_data, template="llava"), 1)
    assert first.videos[0].tokens is None and "video tokens unknown" in listing_text(first).plain
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "bad.mp4").write_bytes(b"not a video")
    record = {"messages": [{"role": "user", "content": "<video>?"}, {"role": "assistant", "content": "!"}], "videos": ["bad.mp4"]}
    (tmp_path / "data" / "v.json").write_text(json.dumps([record]))
    (tmp_path / "data" / "dataset_info.json").write_text(json.dumps({"mllm_video_demo": {
        "file_name": "v.json", "formatting": "sharegpt", "columns": {"messages": "messages", "videos": "videos"},
        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}}))
    [bad] = image_listings(video_cfg(tmp_path, llava, tmp_path / "data", template="llava"), 1)
    assert "bad.mp4" in bad.problem and "not a video FFmpeg can read" in bad.problem and not bad.videos


async def test_the_form_lists_a_records_video_and_an_audio_datasets_audio(tmp_path, lf_data, tiny_qwen2_vl, monkeypatch):
    import sys

    from ftui.config import video_checks

    # the form previews a dataset it would start (no problem left): a video dataset needs
    # torchvision, which this venv lacks (its refusal: tests/test_video_data.py)
    monkeypatch.setattr(video_checks, "has_torchvision", lambda: True)
    from ftui.tui.screens.launch_media import MediaPreview
    from tests.test_tui_pilot import make_app, open_form, text_of, until

    sys.path.insert(0, str(Path(__file__).parent))
    from alm_models import audio_dir

    app = make_app(tmp_path)
    async with app.run_test(size=(140, 50)) as pilot:
        screen = await open_form(pilot, app)
        screen.query_one("#f-model_name_or_path", Input).value = str(tiny_qwen2_vl)
        screen.query_one("#f-dataset_dir", Input).value = str(lf_data)
        screen.query_one("#f-dataset", Input).value = "mllm_video_demo"
        preview = screen.query_one("#media-preview", MediaPreview)
        await until(pilot, lambda: "video tokens" in text_of(preview.query_one(".media-lines", Static)))
        listed = text_of(preview.query_one(".media-lines", Static))
        assert "video 1: mllm_demo_data/" in listed and "frames sampled" in listed and " fps" in listed
        assert preview.display and not preview.query(".media-picture")  # no picture for a video
        screen.query_one("#f-model_name_or_path", Input).value = str(audio_dir(tmp_path / "alm"))
        screen.query_one("#f-dataset_dir", Input).value = str(AUDIO_DATA)
        screen.query_one("#f-dataset", Input).value = "mllm_audio_demo"
        await until(pilot, lambda: "audio tokens" in text_of(preview.query_one(".media-lines", Static)))
        assert " Hz" in text_of(preview.query_one(".media-lines", Static))
