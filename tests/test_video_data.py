"""Records with videos on the app side, torch-free: LLaMA-Factory's ``videos`` column and
``<video>`` placeholder (ftui.data.media), each file's header and decode checked with PyAV
(ftui.data.video_files, against real broken files cut from LLaMA-Factory's demo videos), the
frames LLaMA-Factory samples, and the tokens a video becomes (ftui.data.video_tokens; checked
against transformers' video processors in tests/test_video_runner.py, which needs torchvision)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from ftui.data.media import PlaceholderMismatch, media_refusal, record_media
from ftui.data.media_files import MediaFileError
from ftui.data.records import DatasetSpec
from ftui.data.registry import dataset_path_problem, resolve_datasets

av = pytest.importorskip("av", reason="needs PyAV: pip install -e '.[test]'")

from ftui.data.video_files import VideoDecoderMissing, VideoInfo, video_header, verify_video  # noqa: E402
from ftui.data.video_tokens import (QWEN2_VIDEO, QWEN3_VIDEO, VideoProcessorNumbers, VideoSettings, qwen3_video_text, video_grid,  # noqa: E402
                                    video_timestamps, video_tokens)

SHAREGPT_TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}


def clips(root: Path) -> DatasetSpec:
    return DatasetSpec(name="clips", formatting="sharegpt", columns={"messages": "messages", "videos": "videos"},
                       tags=SHAREGPT_TAGS, media_dir=str(root))


def talk(text: str, videos) -> dict:
    return {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "an answer"}], "videos": videos}


@pytest.fixture
def demo(lf_data) -> Path:
    return lf_data / "mllm_demo_data"


def test_the_video_demo_resolves_and_its_headers_read(lf_data):
    [spec] = resolve_datasets("mllm_video_demo", str(lf_data))
    assert media_refusal(spec, "sft") is None and dataset_path_problem("mllm_video_demo", str(lf_data), "sft") is None
    assert dataset_path_problem("mllm_audio_demo", str(lf_data), "sft") is None  # audios train too (tests/test_audio.py)
    import json
    records = json.loads((lf_data / "mllm_video_demo.json").read_text())
    got = [record_media(r, spec, i)["videos"] for i, r in enumerate(records)]
    assert got == [[str(lf_data / r["videos"][0])] for r in records]
    one = video_header(got[0][0], spec, 0)
    assert (one.width, one.height, one.frames, one.average_fps) == (640, 360, 243, 25.0) and one.duration == pytest.approx(9.72)


def test_alpaca_records_take_videos_and_the_placeholder_rule_holds(tmp_path, demo):
    spec = DatasetSpec(name="clips", formatting="alpaca", columns={"prompt": "instruction", "response": "output", "videos": "videos"},
                       media_dir=str(demo))
    record = {"instruction": "<video>What happens?", "output": "A baby reads.", "videos": "4.mp4"}  # one path: a list of one
    assert record_media(record, spec, 0)["videos"] == [str(demo / "4.mp4")]
    with pytest.raises(PlaceholderMismatch, match="1 file.s. in its videos column but 0 <video>"):
        record_media(talk("What happens?", ["4.mp4"]), clips(demo), 1)


def test_sample_indices_are_llamafactorys_linspace():
    np = pytest.importorskip("numpy", reason="needs numpy, which the test extra installs with torch")
    rng = random.Random(3)
    for _ in range(300):
        frames, duration = rng.randint(1, 2000), rng.uniform(0.01, 120)
        fps, maxlen = rng.choice([0.5, 1.0, 2.0, 3.7]), rng.randint(1, 200)
        info = VideoInfo("x", 64, 48, frames, duration, 25.0)
        count = min(frames, maxlen, max(1, int(np.floor(duration * fps))))
        assert info.sample_indices(fps, maxlen) == np.linspace(0, frames - 1, count).astype(np.int32).tolist()
        assert info.sampled_frames(fps, maxlen) == count + count % 2


def test_broken_videos_are_named_with_their_record(tmp_path, demo):
    """Real broken files: a truncated MP4 (its index at the end is gone), a truncated AVI (its
    header promises frames that are not there), an MP4 with bytes overwritten, an audio file,
    a text file, a missing file and a stream without a frame count."""
    whole = (demo / "1.mp4").read_bytes()
    (tmp_path / "cut.mp4").write_bytes(whole[:240_000])
    (tmp_path / "cut.avi").write_bytes((demo / "2.avi").read_bytes()[:200_000])
    noisy = bytearray((demo / "3.mp4").read_bytes())
    rng = random.Random(1)
    for i in range(50_000, len(noisy), 997):
        noisy[i] = rng.randrange(256)
    (tmp_path / "noise.mp4").write_bytes(bytes(noisy))
    (tmp_path / "song.mp3").write_bytes((demo / "1.mp3").read_bytes())
    (tmp_path / "notes.mp4").write_text("not a video at all\n")
    remux(demo / "4.mp4", tmp_path / "nocount.mkv")
    spec = clips(tmp_path)
    header = {"cut.mp4": "not a video FFmpeg can read", "song.mp3": "no video stream (its streams: audio)",
              "notes.mp4": "not a video FFmpeg can read", "gone.mp4": "no such file",
              "nocount.mkv": "does not say how many frames"}
    for name, said in header.items():
        with pytest.raises(MediaFileError) as err:
            record_media(talk("<video>Hi", [name]), spec, 7)
        assert "record 7" in str(err.value) and name in str(err.value) and said in str(err.value), str(err.value)
    for name in ("cut.avi", "noise.mp4"):  # their headers read; their frames do not all decode
        assert record_media(talk("<video>Hi", [name]), spec, 8)["videos"] == [str(tmp_path / name)]
        with pytest.raises(MediaFileError, match=f"record 8: file .*{name}: the video cannot be decoded after \\d+ frame"):
            verify_video(str(tmp_path / name), spec, 8)
    assert verify_video(str(demo / "4.mp4"), spec, 0).frames == 150


def remux(src: Path, dst: Path) -> None:
    """The same packets in a Matroska container, whose header gives no frame count."""
    with av.open(str(src)) as inp, av.open(str(dst), "w") as out:
        stream = inp.streams.video[0]
        copy = out.add_stream_from_template(stream)
        for packet in inp.demux(stream):
            if packet.dts is not None:
                packet.stream = copy
                out.mux(packet)


def test_a_missing_pyav_names_the_extra(tmp_path, demo, monkeypatch):
    from ftui.data import video_files

    video_files._header_cached.cache_clear()
    monkeypatch.setitem(sys.modules, "av", None)
    with pytest.raises(VideoDecoderMissing, match=r"pip install 'ftui\[vision\]'"):
        record_media(talk("<video>Hi", ["4.mp4"]), clips(demo), 0)


def test_video_tokens_follow_the_video_keys(demo, lf_data):
    spec = clips(demo)
    info = video_header(str(demo / "1.mp4"), spec, 0)  # 640 x 360, 9.72 s, 243 frames
    assert info.sampled_frames() == 20 and info.sampled_frames(video_maxlen=7) == 8 and info.sampled_frames(video_fps=0.5) == 4
    # 640 x 360 scaled to 256 * 256 pixels: 341 x 191; Qwen2-VL's video processor scales that up to its
    # min_pixels (128 * 28 * 28) in multiples of 28; the tests' tiny models allow 56 * 56
    assert video_grid(info, QWEN2_VIDEO) == (10, 18, 32) and video_tokens(info, QWEN2_VIDEO) == 10 * 18 * 32 // 4
    tiny = VideoProcessorNumbers(min_pixels=56 * 56, max_pixels=28 * 28 * 1280)
    assert video_grid(info, tiny) == (10, 14, 24)
    small = VideoSettings(video_fps=1.0, video_maxlen=6, video_max_pixels=128 * 128, video_min_pixels=16 * 16)
    assert video_grid(info, tiny, small) == (3, 6, 12)
    assert video_grid(info, QWEN3_VIDEO) != video_grid(info, QWEN2_VIDEO)
    stamps = video_timestamps(info, QWEN3_VIDEO)
    assert len(stamps) == 10 and stamps[0] == pytest.approx((0 + 13 / 25) / 2) and stamps == sorted(stamps)
    text = qwen3_video_text(info, QWEN3_VIDEO)
    t, h, w = video_grid(info, QWEN3_VIDEO)
    assert text.count("<|video_pad|>") == video_tokens(info, QWEN3_VIDEO) and text.count("seconds>") == t
    assert text.startswith(f"<{stamps[0]:.1f} seconds><|vision_start|>")


def test_use_audio_in_video_is_refused_by_name():
    from ftui.config.preflight import validate_config

    base = {"model_name_or_path": "ftui-demo", "model_init": "random", "dataset": "ftui_demo"}
    said = {p.field: p.message for p in validate_config(base | {"use_audio_in_video": True})[1]}
    assert "needs an Omni model" in said["use_audio_in_video"] and "remove it" in said["use_audio_in_video"]
    assert "use_audio_in_video" not in {p.field for p in validate_config(base | {"video_fps": 1.0, "video_maxlen": 8})[1]}


def test_preflight_of_the_video_demo(tmp_path, lf_data, monkeypatch):
    """The video demo passes preflight for a tiny Qwen2-VL where torchvision is installed, and
    is refused by name where it is not; stages other than sft are refused by name."""
    pytest.importorskip("torch", reason="needs torch to build the tiny Qwen2-VL folder (the test extra)")
    from ftui.config import video_checks
    from ftui.config.preflight import preflight
    from tests.vlm_models import vlm_dir

    model = vlm_dir("qwen2_vl", tmp_path / "vlm")
    cfg = {"model_name_or_path": str(model), "dataset": "mllm_video_demo", "dataset_dir": str(lf_data), "template": "qwen2_vl",
           "device": "cpu", "output_dir": str(tmp_path / "runs")}
    monkeypatch.setattr(video_checks, "has_torchvision", lambda: True)
    verdict = preflight(cfg)
    assert verdict.ready, [str(p) for p in verdict.problems]
    monkeypatch.setattr(video_checks, "has_torchvision", lambda: False)
    said = {p.field: p.message for p in preflight(cfg).problems}
    assert "has videos, which need" in said["dataset"] and "install ftui[vision]" in said["dataset"]
    [spec] = resolve_datasets("mllm_video_demo", str(lf_data))
    assert "stage dpo with videos is not supported yet" in media_refusal(spec, "dpo")
