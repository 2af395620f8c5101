"""The launch form with a vision-language model: its image fields show (and reach the config)
only for such a model, and the Data group lists the first record's images with their sizes and
image tokens, and shows the first one in the terminal (textual-image's widget)."""

from pathlib import Path

import pytest
from textual.widgets import Input, Static

from ftui.presets.families import detect_family
from ftui.tui.screens.launch_fields import FORM_DEFAULTS, config_to_form, form_to_config
from ftui.tui.screens.launch_media import MediaPreview, thumbnail
from tests.test_tui_pilot import make_app, open_form, text_of, until
from tests.vlm_models import vlm_dir

DEMO_MODEL = Path(__file__).resolve().parents[1] / "ftui" / "presets" / "demo" / "model"
LF_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "llamafactory"
VISION_KEYS = ("image_max_pixels", "image_min_pixels", "freeze_vision_tower", "freeze_multi_modal_projector", "freeze_language_model")


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_a_vision_model_is_told_apart_from_its_text_sibling(tmp_path):
    assert detect_family("Qwen/Qwen2-VL-7B-Instruct").template == "qwen2_vl"
    assert detect_family("Qwen/Qwen2-VL-7B-Instruct").vision
    assert detect_family("Qwen/Qwen2.5-7B-Instruct").template == "qwen" and not detect_family("Qwen/Qwen2.5-7B-Instruct").vision
    assert detect_family("Qwen/Qwen3-VL-4B-Instruct").template == "qwen3_vl_nothink"  # LLaMA-Factory's model list
    assert detect_family("Qwen/Qwen3-VL-4B-Thinking").template == "qwen3_vl"
    folder = vlm_dir("qwen3_vl", tmp_path)  # by config.json's model_type, whatever the folder is called
    assert detect_family(str(folder)).name == "qwen3_vl" and detect_family(str(folder)).lora_targets == ("all",)


def test_the_image_keys_reach_the_config_only_for_a_vision_model():
    values = config_to_form(dict(FORM_DEFAULTS, freeze_vision_tower=False, image_max_pixels=128 * 128)) | {"method": "lora"}
    assert not any(k in form_to_config(values) for k in VISION_KEYS)
    data = form_to_config(values, vision=True)
    assert data["freeze_vision_tower"] is False and data["image_max_pixels"] == 128 * 128
    assert data["freeze_multi_modal_projector"] is True and data["freeze_language_model"] is False


def test_a_thumbnail_is_small_and_an_unreadable_file_gives_none(tmp_path):
    picture = thumbnail(str(LF_DATA / "mllm_demo_data" / "1.jpg"))
    assert picture is not None and max(picture.size) <= 384 and picture.mode == "RGB"
    (tmp_path / "bad.jpg").write_bytes(b"not an image")
    assert thumbnail(str(tmp_path / "bad.jpg")) is None


async def test_the_form_lists_and_shows_a_vision_datasets_images(tmp_path):
    model = vlm_dir("qwen2_vl", tmp_path / "models")
    app = make_app(tmp_path)
    async with app.run_test(size=(110, 50)) as pilot:
        screen = await open_form(pilot, app)
        assert not screen.query_one("#row-freeze_vision_tower").display  # the demo's text model
        screen.query_one("#f-model_name_or_path", Input).value = str(model)
        screen.query_one("#f-dataset_dir", Input).value = str(LF_DATA)
        screen.query_one("#f-dataset", Input).value = "mllm_demo"
        screen.query_one("#f-cutoff_len", Input).value = "4096"
        await until(pilot, lambda: screen.query_one("#row-freeze_vision_tower").display)
        assert screen.query_one("#row-image_max_pixels").display
        await until(pilot, lambda: screen.query("#media-preview .media-picture"))
        preview = screen.query_one("#media-preview", MediaPreview)
        listed = text_of(preview.query_one(".media-lines", Static))
        assert "mllm_demo_data/1.jpg" in listed and "image tokens" in listed and " x " in listed
        assert preview.display
        await until(pilot, lambda: screen.validated)
        assert screen.current_config_dict()["freeze_vision_tower"] is True  # the vision keys are in the config
        screen.query_one("#f-image_max_pixels", Input).value = "abc"
        await until(pilot, lambda: screen.query("#e-image_max_pixels"))
        # back to a text model: the fields hide, the images stay listed (the dataset still has them)
        screen.query_one("#f-image_max_pixels", Input).value = "65536"
        screen.query_one("#f-model_name_or_path", Input).value = str(DEMO_MODEL)
        await until(pilot, lambda: not screen.query_one("#row-freeze_vision_tower").display)
        assert "freeze_vision_tower" not in screen.current_config_dict()
