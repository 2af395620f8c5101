"""Chat, predict and eval with videos on a tiny Qwen2-VL LoRA run (``ftui train`` on a
LLaMA-Factory YAML: two steps on its mllm_video_demo, small frames; the run ends with its
adapter and finite losses): the chat worker's turn with a video (the prompt holds the
video's expanded tokens, as training expands them; an answer comes), ``ftui chat --video`` and
the REPL's ``/video``, predict / eval over mllm_video_demo (generated_predictions.jsonl names each
prompt's videos), and Qwen2.5-VL's generate reading second_per_grid_ts as training does.

Marked ``video``: transformers' video processors need torchvision (``make test-video`` runs
these in .venv-video). The refusals that need no torchvision, ``/video`` with a fake worker and the
chat screen taking a video are in tests/test_chat_videos.py.
"""

from __future__ import annotations

import io
import json
import math
import os
import threading
from pathlib import Path

import pytest

from tests.repl_input import type_lines

pytestmark = pytest.mark.video

VIDEO_KEYS = {"video_maxlen": 4, "video_max_pixels": 64 * 64}


@pytest.fixture(scope="module")
def video_run(tmp_path_factory, lf_data) -> Path:
    """``ftui train`` on a LLaMA-Factory YAML: Qwen2-VL, LoRA, 2 steps on mllm_video_demo."""
    import subprocess
    import sys

    import yaml

    from tests.vlm_models import vlm_dir

    root = tmp_path_factory.mktemp("videochat")
    cfg = {"model_name_or_path": str(vlm_dir("qwen2_vl", root / "models")), "stage": "sft", "do_train": True,
           "finetuning_type": "lora", "dataset": "mllm_video_demo", "dataset_dir": str(lf_data), "template": "qwen2_vl",
           "cutoff_len": 1024, "max_steps": 2, "per_device_train_batch_size": 1, "gradient_accumulation_steps": 1,
           "learning_rate": 1e-3, "output_dir": str(root / "run"), "logging_steps": 1, "report_to": "none",
           "save_strategy": "no", **VIDEO_KEYS}
    path = root / "video.yaml"
    path.write_text(yaml.safe_dump(cfg))
    done = subprocess.run([sys.executable, "-m", "ftui.cli.main", "train", str(path)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [config] = (root / "run").rglob("config.yaml")
    return config.parent


def test_two_lora_steps_on_the_video_demo(video_run):
    """The run ends with its adapter and finite losses."""
    from ftui.rundir.event_reader import read_all
    from ftui.rundir.paths import EVENTS_FILE

    assert any(video_run.rglob("adapter_model.safetensors")), list(video_run.rglob("*"))[:40]
    losses = [e["loss"] for e in read_all(video_run / EVENTS_FILE) if e["event"] == "step"]
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)


def test_a_chat_turn_with_a_video_expands_it_as_training_and_answers(video_run, lf_data):
    from ftui.config.load import read_run_config
    from ftui.data.video_files import checked_video_file
    from ftui.data.video_tokens import VideoSettings, video_grid
    from ftui.runner.chat import ChatError, ChatModel, Out
    from ftui.runner.vision.videos import processor_numbers

    chat = ChatModel()
    chat.load({"run": str(video_run), "device": "cpu"})
    clip = str(lf_data / "mllm_demo_data" / "1.mp4")
    message = {"role": "user", "content": "Why is this video funny?", "videos": [clip]}
    ids, media = chat.prompt_inputs([message], None)
    cfg = read_run_config(video_run / "config.yaml")
    reader = chat.videos.reader()
    assert reader.settings == VideoSettings(cfg.video_fps, 4, 64 * 64, cfg.video_min_pixels)  # the run's video keys
    t, h, w = video_grid(checked_video_file(clip, cfg.video_fps, 4), processor_numbers(reader.video_processor, False), reader.settings)
    text = chat.tokenizer.decode(ids)
    assert text.count("<|video_pad|>") == t * h * w // 4 > 0  # expanded as training expands it (its grid's tokens)
    assert text.index("<|vision_start|><|video_pad|>") < text.index("Why is this video funny?")  # placed at the message's start
    assert media["video_grid_thw"].tolist() == [[t, h, w]] and media["pixel_values_videos"].size(0) == t * h * w
    out = io.StringIO()
    chat.generate({"id": 3, "messages": [message], "temperature": 0, "max_new_tokens": 2}, Out(out), threading.Event())
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert replies[-1]["type"] == "done" and replies[-1]["tokens"] >= 1, replies
    with pytest.raises(ChatError, match=r"notes\.mp4: not a video FFmpeg can read"):
        bad = Path(video_run) / "notes.mp4"
        bad.write_text("not a video")
        chat.prompt_inputs([{"role": "user", "content": "hi", "videos": [str(bad)]}], None)
    with pytest.raises(ChatError, match=r"it has 1 images but 2 <video> placeholders"):
        chat.prompt_inputs([{"role": "user", "content": "<video><video>one?", "videos": [clip]}], None)


def test_ftui_chat_answers_with_videos_from_video_and_the_repls_slash_video(video_run, lf_data, monkeypatch, capsys):
    """``--video`` without ``--prompt`` goes with the first message, ``/video PATH`` with the
    next: both answered by the real worker (a bad file is said and the conversation goes on)."""

    from ftui.cli.main import main

    clip = lf_data / "mllm_demo_data" / "1.mp4"
    type_lines(monkeypatch, ["Why is it funny?", "/video gone.mp4", f"/video {lf_data / 'mllm_demo_data' / '3.mp4'}", "And this one?"])
    code = main(["chat", "--run", str(video_run), "--video", str(clip), "--temperature", "0", "--max-new-tokens", "2",
                 "--device", "cpu"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "0 image(s) and 1 video(s) attached to your next message" in captured.err
    assert "video gone.mp4: no such file" in captured.err and captured.err.count("error:") == 1
    assert captured.out.count("\n") >= 3  # two answers (a line each), then the newline at Ctrl-D


def test_predict_and_eval_over_the_video_demo(video_run, lf_data):
    from ftui.jobs.offline import prepare_job, source_of
    from ftui.rundir.event_writer import EventWriter
    from ftui.rundir.paths import EVAL_RESULTS_FILE, EVENTS_FILE, PREDICTIONS_FILE
    from ftui.runner.engines import DistInfo
    from ftui.runner.evaluate import evaluate
    from ftui.runner.faults import StopRequest
    from ftui.runner.predict import predict

    def run(kind, work, **extra):
        job_dir, cfg = prepare_job(kind, run_dir=video_run, source=source_of(video_run, None, False, None, None),
                                   dataset="mllm_video_demo", dataset_dir=str(lf_data), device="cpu", **extra)
        return job_dir, work(job_dir, cfg, DistInfo(), EventWriter(job_dir / EVENTS_FILE), StopRequest())

    records = json.loads((lf_data / "mllm_video_demo.json").read_text())
    job_dir, (status, message) = run("predict", predict, max_samples=2,
                                     generation={"max_new_tokens": 2, "temperature": 0, "batch_size": 2})
    assert status == "completed", message
    rows = [json.loads(line) for line in (job_dir / PREDICTIONS_FILE).read_text().splitlines()]
    assert len(rows) == 2
    for row, record in zip(rows, records):
        assert row["videos"] == [os.path.abspath(lf_data / p) for p in record["videos"]] and "images" not in row
        assert row["prompt"].count("<|vision_start|>") == 1 and "<|video_pad|>" in row["prompt"]
        assert row["label"].rstrip("\n") == record["messages"][-1]["content"] and isinstance(row["predict"], str)
    job_dir, (status, message) = run("eval", evaluate)
    assert status == "completed", message
    results = json.loads((job_dir / EVAL_RESULTS_FILE).read_text())
    assert results["examples"] == 3 and math.isfinite(results["eval_loss"])


def test_qwen2_5_vl_generates_from_the_positions_training_gives_its_video(tmp_path, lf_data):
    """Qwen2.5-VL: generate's first logits over the backend's arguments (ftui.runner.backends)
    equal the model's forward over the prompt, pixels, grid, second_per_grid_ts and M-RoPE
    positions as training collates them (ftui.runner.media_batch), and differ without the
    seconds: generate reads the video's time scale as training does. The worker answers."""
    from types import SimpleNamespace

    import torch

    from tests.vlm_models import vlm_dir

    from ftui.runner.backends.huggingface import image_inputs
    from ftui.runner.chat import ChatModel, Out
    from ftui.runner.media_batch import collate_media, media_collation

    chat = ChatModel()
    chat.load({"model": str(vlm_dir("qwen2_5_vl", tmp_path)), "device": "cpu"})
    chat.videos.cfg = SimpleNamespace(**VIDEO_KEYS)  # small frames (a model folder alone has LLaMA-Factory's defaults)
    message = {"role": "user", "content": "<video>Why is it funny?", "videos": [str(lf_data / "mllm_demo_data" / "1.mp4")]}
    ids, media = chat.prompt_inputs([message], None)
    assert media["second_per_grid_ts"].dtype == torch.float32 and media["second_per_grid_ts"].item() > 0
    out = io.StringIO()
    chat.generate({"id": 1, "messages": [message], "temperature": 0, "max_new_tokens": 1}, Out(out), threading.Event())
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert replies[-1]["type"] == "done" and replies[-1]["tokens"] == 1, replies
    row = torch.tensor([ids])
    mask = torch.ones_like(row)

    def forward(tensors):
        inputs = collate_media([tensors], row, mask, media_collation(chat.model)).inputs()
        inputs["position_ids"] = inputs["position_ids"][1:]  # the model's own 3 x rows x width
        with torch.no_grad():
            return chat.model(input_ids=row, attention_mask=mask, **inputs).logits[0, -1]

    trained = forward(media)
    with torch.no_grad():
        generated = chat.model.generate(input_ids=row, attention_mask=mask, max_new_tokens=1, do_sample=False, output_logits=True,
                                        return_dict_in_generate=True, **image_inputs(chat.model, row, [media], chat.device))
    torch.testing.assert_close(generated.logits[0][0], trained, atol=1e-5, rtol=0)
    without = forward({k: v for k, v in media.items() if k != "second_per_grid_ts"})
    assert (without - trained).abs().max() > 1e-4  # the seconds change the positions, so the logits
