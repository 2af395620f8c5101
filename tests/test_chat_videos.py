"""Chat with videos where no torchvision is needed (the main venv): the refusals said by name
(an image-only family, a text model, no torchvision, a bad file before it is sent), the REPL's
``/video`` attaching a checked file, and the chat screen's one field taking a video (its kind
from its extension or header, its line and first frame previewed). A model answering a video:
tests/test_video_chat.py (marked ``video``)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.repl_input import type_lines
from tests.test_chat import FakeChatWorker, chat_app
from tests.test_tui_pilot import until


def test_families_that_read_no_videos_are_refused_by_name(tmp_path):
    from ftui.presets.vision_families import vision_family
    from ftui.runner.chat_images import TEXT_ONLY
    from ftui.runner.chat_videos import chat_videos

    for name in ("llava", "gemma3", "internvl"):
        videos, why = chat_videos(vision_family(name), [tmp_path], None)
        assert videos is None and f"this {name} model reads images, not videos" in why and "Qwen2-VL" in why
    videos, why = chat_videos(vision_family("qwen2_audio"), [tmp_path], None)
    assert videos is None and "reads audios, not videos" in why
    assert chat_videos(None, [tmp_path], None) == (None, TEXT_ONLY)
    videos, why = chat_videos(vision_family("qwen2_vl"), [tmp_path], None)
    assert why is None and videos is not None


def test_a_qwen_model_without_torchvision_says_to_install_it(tmp_path, lf_data):
    """The main venv cannot load a video processor: the message says what to install."""
    from tests.vlm_models import vlm_dir

    from ftui.presets.vision_families import vision_family
    from ftui.runner.chat_images import ImageRequestError
    from ftui.runner.chat_videos import chat_videos

    try:
        import torchvision  # noqa: F401
        pytest.skip("torchvision is installed here (tests/test_video_chat.py covers it)")
    except ImportError:
        pass
    videos, _why = chat_videos(vision_family("qwen2_vl"), [vlm_dir("qwen2_vl", tmp_path)], None)
    with pytest.raises(ImageRequestError, match="torchvision"):
        videos.expand([{"role": "user", "content": "<video>hi"}], [str(lf_data / "mllm_demo_data" / "1.mp4")])


def test_a_bad_video_is_named_before_it_is_sent(tmp_path, lf_data):
    from ftui.data.video_files import looks_like_video
    from ftui.jobs.chat_client import video_problem

    notes = tmp_path / "notes.mp4"
    notes.write_text("not a video")
    assert video_problem(str(tmp_path / "gone.mp4")) == f"video {tmp_path / 'gone.mp4'}: no such file"
    assert "notes.mp4: not a video FFmpeg can read" in video_problem(str(notes))
    assert video_problem(str(lf_data / "mllm_demo_data" / "1.mp4")) is None
    renamed = tmp_path / "clip"  # no extension: its header says it is a video
    shutil.copy(lf_data / "mllm_demo_data" / "1.mp4", renamed)
    assert looks_like_video(str(renamed)) and looks_like_video(str(notes))
    assert not looks_like_video(str(lf_data / "mllm_demo_data" / "1.jpg"))


class RecordingWorker(FakeChatWorker):
    sent: list = []

    def generate(self, messages, settings):
        RecordingWorker.sent.append(json.loads(json.dumps(messages)))
        return super().generate(messages, settings)


def test_the_repl_attaches_videos_to_the_next_message(lf_data, tmp_path, monkeypatch, capsys):
    import ftui.jobs.chat_client
    from ftui.cli.main import main

    clip, picture = lf_data / "mllm_demo_data" / "1.mp4", lf_data / "mllm_demo_data" / "1.jpg"
    monkeypatch.setattr(ftui.jobs.chat_client, "ChatWorker", RecordingWorker)
    RecordingWorker.sent = []
    type_lines(monkeypatch, ["/video", "/video gone.mp4", f"/video {clip}", f"/image {picture}", "Why is it funny?", "And now?"])
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert main(["chat", "--model", str(model)]) == 0
    err = capsys.readouterr().err
    assert "/video needs a file: /video PATH" in err and "video gone.mp4: no such file" in err
    assert "1 image(s) and 1 video(s) go with your next message" in err
    first, second = RecordingWorker.sent
    assert first == [{"role": "user", "content": "Why is it funny?", "images": [str(picture)], "videos": [str(clip)]}]
    assert second[0] == first[0] and second[-1] == {"role": "user", "content": "And now?"}
    assert main(["chat", "--model", str(model), "--video", "gone.mp4", "--prompt", "hi"]) == 2
    assert "video gone.mp4: no such file" in capsys.readouterr().err


async def test_the_chat_screen_attaches_a_previewed_video(tmp_path, lf_data):
    from textual.widgets import Input

    from tests.test_chat import fake_run
    from ftui.tui.screens.chat_image import ImageField
    from ftui.tui.screens.launch_media import MediaPreview

    clip = lf_data / "mllm_demo_data" / "1.mp4"
    workers: list = []
    app = chat_app(fake_run(tmp_path), workers)
    async with app.run_test(size=(110, 40)) as pilot:
        screen = app.screen
        await until(pilot, lambda: workers and getattr(workers[0], "spec", None) and not screen.loading_panes)
        field = screen.query_one("#chat-image-path", Input)
        field.focus()
        field.value = str(clip)
        await pilot.press("enter")
        files = screen.query_one(ImageField)
        await until(pilot, lambda: files.attached)
        preview = files.query_one(MediaPreview)
        line = str(preview.query_one(".media-lines").render())
        assert "1.mp4" in line and "frames" in line and "(video)" in line
        assert preview.query(".media-picture")  # its first frame
        prompt = screen.query_one("#chat-prompt", Input)
        prompt.focus()
        prompt.value = "Why is it funny?"
        await pilot.press("enter")
        await until(pilot, lambda: not screen.busy and len(screen.conversations["main"].messages) == 2)
        messages, _settings = workers[0].sent[-1]
        assert messages == [{"role": "user", "content": "Why is it funny?", "videos": [str(clip)]}]


def test_predict_over_videos_with_a_model_that_reads_none_is_refused_before_the_job(lf_data):
    from ftui.data.registry import media_job_problem

    for model_type in ("qwen2", "llava", "gemma3"):
        problem = media_job_problem("mllm_video_demo", str(lf_data), "predict", model_type)
        assert f"has videos, but the model (model_type {model_type}) does not read videos" in problem
    assert media_job_problem("mllm_video_demo", str(lf_data), "eval", "qwen2_5_vl") is None
    assert media_job_problem("mllm_demo", str(lf_data), "predict", "llava") is None  # images: LLaVA reads them
