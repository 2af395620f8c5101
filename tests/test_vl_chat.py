"""Chat with images: a tiny Qwen2-VL run (trained one step on mllm_demo) through the worker
protocol, the CLI's one-shot ``--image`` and the REPL's ``/image``, and the chat screen's image
field (a fake worker: the pilot tests the screen, not the model)."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import pytest
import torch

from tests.repl_input import type_lines
from tests.test_chat import FakeChatWorker, chat_app
from tests.test_tui_pilot import until

from ftui.jobs.chat_client import ChatWorker, GenerationSettings

GREEDY = GenerationSettings(temperature=0.0, max_new_tokens=4)


def train_vl_run(root: Path, lf_data: Path) -> Path:
    """A LoRA run of a tiny Qwen2-VL trained one step on mllm_demo (its final/ is an adapter: the
    image processor is found with the base model)."""
    from tests.conftest import train_sync
    from tests.vlm_models import vlm_dir

    from ftui.config.load import demo_config

    model = vlm_dir("qwen2_vl", root / "models")
    cfg = demo_config(model_name_or_path=str(model), model_init="pretrained", stage="sft", template="qwen2_vl",
                      dataset="mllm_demo", dataset_dir=str(lf_data), finetuning_type="lora", max_steps=1,
                      per_device_train_batch_size=2, image_max_pixels=128 * 128, cutoff_len=512, engine="single",
                      output_dir=str(root / "runs"), logging_steps=1, run_name="vl-chat", device="cpu")
    run_dir, _events, proc = train_sync(cfg)
    assert proc.returncode == 0, (run_dir / "train.log").read_text()[-4000:]
    return run_dir


@pytest.fixture(scope="module")
def vl_run(tmp_path_factory, lf_data) -> Path:
    return train_vl_run(tmp_path_factory.mktemp("vlchat"), lf_data)


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> dict[str, Path]:
    from PIL import Image

    root = tmp_path_factory.mktemp("pictures")
    red, blue = root / "red.png", root / "blue.png"
    Image.new("RGB", (64, 48), (200, 10, 10)).save(red)
    Image.new("RGB", (40, 40), (10, 10, 200)).save(blue)
    (root / "notes.png").write_text("not an image")
    return {"red": red, "blue": blue, "notes": root / "notes.png"}


def reply_to(worker: ChatWorker, messages: list[dict], **extra) -> tuple[str, dict]:
    rid = worker.next_id + 1
    worker.next_id = rid
    worker.send("generate", id=rid, messages=messages, **GREEDY.request(), **extra)
    text = []
    while True:
        reply = worker.get(timeout=120)
        assert reply is not None, "the worker stopped answering"
        if reply["type"] == "token":
            text.append(reply["text"])
        else:
            return "".join(text), reply


@pytest.mark.dist
def test_the_worker_answers_with_images_and_says_what_is_wrong_with_bad_ones(vl_run, pictures):
    worker = ChatWorker()
    try:
        loaded = worker.load(run=str(vl_run), device="cpu")
        assert loaded["type"] == "loaded", loaded
        _text, done = reply_to(worker, [{"role": "user", "content": "What colour?", "images": [str(pictures["red"])]}])
        assert done["type"] == "done" and done["tokens"] >= 1, done
        # LLaMA-Factory's form: the request's images (two, in front of the first message)
        _text, done = reply_to(worker, [{"role": "user", "content": "Compare them."}],
                               images=[str(pictures["red"]), str(pictures["blue"])])
        assert done["type"] == "done", done
        _text, bad = reply_to(worker, [{"role": "user", "content": "<image><image>one?", "images": [str(pictures["red"])]}])
        assert bad["type"] == "error" and "1 images but 2 <image> placeholders" in bad["message"]
        _text, bad = reply_to(worker, [{"role": "user", "content": "hi", "images": [str(pictures["notes"])]}])
        assert bad["type"] == "error" and "notes.png" in bad["message"] and "not an image" in bad["message"]
        _text, bad = reply_to(worker, [{"role": "user", "content": "hi", "images": [str(pictures["red"].parent / "gone.png")]}])
        assert bad["type"] == "error" and "gone.png: no such file" in bad["message"]
        _text, bad = reply_to(worker, [{"role": "user", "content": "hi", "videos": ["clip.mp4"]}])
        assert bad["type"] == "error" and "torchvision" in bad["message"]  # the main venv has none (videos: test_video_chat.py)
        _text, done = reply_to(worker, [{"role": "user", "content": "still there?"}])  # the worker stayed up
        assert done["type"] == "done"
    finally:
        worker.close()


@pytest.mark.dist
def test_the_image_reaches_the_model_and_generation_continues_its_forward(vl_run, pictures):
    """The first greedy token is the argmax of the model's forward over the same prompt, pixels,
    grid, token types and M-RoPE positions: the image is read, placed as LLaMA-Factory's chat
    engine places it (at the message's start), and generate computes the same positions."""
    from ftui.runner.chat import ChatModel, Out
    from ftui.runner.media_batch import collate_media, media_collation

    chat = ChatModel()
    chat.load({"run": str(vl_run), "device": "cpu"})
    message = {"role": "user", "content": "What colour?", "images": [str(pictures["red"])]}
    ids, media = chat.prompt_inputs([message], None)
    text = chat.tokenizer.decode(ids)
    start = text.index("<|vision_start|>")
    assert text.index("What colour?") > start and text.count("<|image_pad|>") == int(media["image_grid_thw"].prod()) // 4
    out = io.StringIO()
    chat.generate({"id": 7, "messages": [message], "temperature": 0, "max_new_tokens": 1}, Out(out), threading.Event())
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert replies[-1]["type"] == "done" and replies[-1]["tokens"] == 1
    row = torch.tensor([ids])
    mask = torch.ones_like(row)
    batch = collate_media([media], row, mask, media_collation(chat.model))
    with torch.no_grad():
        inputs = batch.inputs()
        inputs["position_ids"] = inputs["position_ids"][1:]  # the model's own 3 x rows x width
        logits = chat.model(input_ids=row, attention_mask=mask, **inputs).logits[0, -1]
        plain = chat.model(input_ids=torch.tensor([chat.prompt_ids([{"role": "user", "content": "What colour?"}], None)])).logits[0, -1]
    first = next(r["text"] for r in replies if r["type"] == "token") if replies[0]["type"] == "token" else ""
    assert chat.tokenizer.decode([int(logits.argmax())], skip_special_tokens=True) == first
    assert not torch.allclose(logits, plain, atol=1e-4)  # the image changed the answer's logits


def tiny_text_model(root: Path) -> Path:
    """A tiny Qwen2 (text only) with the tests' families tokenizer."""
    import transformers

    from tests.vlm_models import TEXT, write_tokenizer

    out = root / "tiny-qwen2"
    if not (out / "config.json").is_file():
        vocab = write_tokenizer(out)["vocab"]
        torch.manual_seed(0)
        transformers.Qwen2ForCausalLM(transformers.Qwen2Config(vocab_size=vocab, **TEXT)).save_pretrained(out)
    return out


def test_a_text_model_given_an_image_says_so_and_keeps_answering(pictures):
    worker = ChatWorker()
    try:
        loaded = worker.load(model=str(tiny_text_model(pictures["red"].parent)), device="cpu")
        assert loaded["type"] == "loaded", loaded
        _text, bad = reply_to(worker, [{"role": "user", "content": "hi", "images": [str(pictures["red"])]}])
        assert bad["type"] == "error" and "reads text only, so it cannot take images" in bad["message"]
        _text, done = reply_to(worker, [{"role": "user", "content": "hi"}])
        assert done["type"] == "done", done
    finally:
        worker.close()


@pytest.mark.parametrize("family", ["llava", "gemma3", "internvl"])
def test_the_fixed_token_families_answer_with_an_image(family, pictures, tmp_path):
    """LLaVA, Gemma 3 and InternVL: their plugin's token counts and token types (Gemma 3's
    token_type_ids, none for the others) reach generate, as in training."""
    from tests.vlm_models import vlm_dir

    worker = ChatWorker()
    try:
        loaded = worker.load(model=str(vlm_dir(family, tmp_path)), device="cpu")
        assert loaded["type"] == "loaded", loaded
        _text, done = reply_to(worker, [{"role": "user", "content": "what is it?", "images": [str(pictures["red"])]}])
        assert done["type"] == "done" and done["tokens"] > 0, done
    finally:
        worker.close()


@pytest.mark.dist
def test_ftui_chat_answers_one_prompt_with_an_image(vl_run, pictures, capsys):
    from ftui.cli.main import main

    code = main(["chat", "--run", str(vl_run), "--image", str(pictures["red"]), "--prompt", "What colour?",
                 "--temperature", "0", "--max-new-tokens", "3", "--device", "cpu"])
    assert code == 0, capsys.readouterr().err


def test_ftui_chat_refuses_a_bad_image_before_loading_a_model(pictures, monkeypatch, capsys):
    import ftui.jobs.chat_client
    from ftui.cli.main import main

    monkeypatch.setattr(ftui.jobs.chat_client, "ChatWorker", lambda: pytest.fail("no model is loaded for a bad image"))
    model = pictures["red"].parent / "m"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    assert main(["chat", "--model", str(model), "--image", "gone.png", "--prompt", "hi"]) == 2
    assert "image gone.png: no such file" in capsys.readouterr().err
    assert main(["chat", "--model", str(model), "--image", str(pictures["notes"]), "--prompt", "hi"]) == 2
    assert "not an image" in capsys.readouterr().err


class RecordingWorker(FakeChatWorker):
    sent: list = []

    def generate(self, messages, settings):
        RecordingWorker.sent.append(json.loads(json.dumps(messages)))
        return super().generate(messages, settings)


def test_the_repl_attaches_images_to_the_next_message(pictures, monkeypatch, capsys):
    import ftui.jobs.chat_client
    from ftui.cli.main import main

    monkeypatch.setattr(ftui.jobs.chat_client, "ChatWorker", RecordingWorker)
    RecordingWorker.sent = []
    type_lines(monkeypatch, [f"/image {pictures['red']}", "/image gone.png", f"/image {pictures['blue']}", "/video clip.mp4",
                  "What are these?", "And now?", f"/image {pictures['red']}", "/clear", "Plain?"])
    model = pictures["red"].parent / "m"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    assert main(["chat", "--model", str(model)]) == 0
    err = capsys.readouterr().err
    assert "image gone.png: no such file" in err and "video clip.mp4: no such file" in err
    assert "/image PATH or /video PATH attaches a file" in err
    first, second, third = RecordingWorker.sent
    assert first == [{"role": "user", "content": "What are these?", "images": [str(pictures["red"]), str(pictures["blue"])]}]
    assert second[-1] == {"role": "user", "content": "And now?"} and second[0] == first[0]  # the images stay with their turn
    assert third == [{"role": "user", "content": "Plain?"}]  # /clear dropped the attached image too


def test_image_paths_complete_from_their_directory(pictures, tmp_path):
    from ftui.tui.screens.chat_image import complete_path

    folder = str(pictures["red"].parent)
    assert complete_path(folder + "/re") == folder + "/red.png"
    assert complete_path(folder + "/bl") == folder + "/blue.png"
    assert complete_path(folder + "/zz") is None
    # a directory, with its / (in a folder of this test's own: the pictures' parent is shared
    # with other tests' numbered folders, pictures0, pictures1 ..., which a prefix would match)
    (tmp_path / "albums").mkdir()
    assert complete_path(str(tmp_path / "alb")) == str(tmp_path / "albums") + "/"


async def test_the_chat_screen_attaches_a_previewed_image_to_the_next_message(tmp_path, pictures):
    from textual.widgets import Input

    from tests.test_chat import fake_run
    from ftui.tui.screens.chat_image import ImageField
    from ftui.tui.screens.launch_media import MediaPreview

    run = fake_run(tmp_path)
    workers: list = []
    app = chat_app(run, workers)
    async with app.run_test(size=(110, 40)) as pilot:
        screen = app.screen
        await until(pilot, lambda: workers and getattr(workers[0], "spec", None) and not screen.loading_panes)
        field = screen.query_one("#chat-image-path", Input)
        field.focus()
        await pilot.pause()
        field.value = str(pictures["red"].parent / "r")
        await pilot.press("end", "e")
        await until(pilot, lambda: field._suggestion == str(pictures["red"]))  # completed in a thread
        await pilot.press("right")  # Right at the end takes the completion
        assert field.value == str(pictures["red"])
        await pilot.press("enter")
        images = screen.query_one(ImageField)
        await until(pilot, lambda: images.attached)
        preview = images.query_one(MediaPreview)
        assert preview.has_class("-shown") and "red.png  64 x 48" in str(preview.query_one(".media-lines").render())
        field.value = str(pictures["notes"])
        await pilot.press("enter")
        await until(pilot, lambda: "not an image" in str(preview.query_one(".media-lines").render()))
        assert len(images.attached) == 1
        prompt = screen.query_one("#chat-prompt", Input)
        prompt.focus()
        prompt.value = "What colour?"
        await pilot.press("enter")
        await until(pilot, lambda: not screen.busy and len(screen.conversations["main"].messages) == 2)
        messages, _settings = workers[0].sent[-1]
        assert messages == [{"role": "user", "content": "What colour?", "images": [str(pictures["red"])]}]
        assert images.attached == [] and not preview.has_class("-shown")  # sent: the field is empty again
        prompt.value = "And now?"
        await pilot.press("enter")
        await until(pilot, lambda: not screen.busy and len(screen.conversations["main"].messages) == 4)
        assert "images" not in workers[0].sent[-1][0][-1]


def huge_png(path: Path, width: int = 20_000, height: int = 20_000) -> Path:
    """A PNG whose header says width x height (its data a few bytes): a decompression bomb's shape."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))
    return path


def test_a_huge_or_truncated_image_is_refused_by_name_before_it_is_sent(pictures, tmp_path):
    from ftui.data.media_files import MediaFileError, load_image_file
    from ftui.jobs.chat_client import image_problem

    bomb = huge_png(tmp_path / "bomb.png")
    problem = image_problem(str(bomb))
    assert problem.startswith(f"image {bomb}: ") and "larger than ftui decodes" in problem and "scale it down" in problem
    cut = tmp_path / "cut.png"
    cut.write_bytes(pictures["red"].read_bytes()[:-30])
    with pytest.raises(MediaFileError, match="cut.png: the image data is truncated or corrupt"):
        load_image_file(str(cut))  # the worker decodes it whole before the processor sees it
    assert image_problem(str(pictures["red"])) is None
