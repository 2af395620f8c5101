"""Benchmark: a vision-language SFT step (Qwen2-VL), tokens/s and peak memory against the planner.

Each example is one 448 x 448 image (256 image tokens, 1,024 patches for Qwen2-VL's processor)
and about 1,000 text tokens; a small Qwen2-VL is built from a config (random weights: the
language model 4 layers of width 256, the vision tower 4 blocks of width 256) with the tests'
tokenizer and Qwen2-VL's image processor (tests/vlm_models.py). ``ftui train`` runs it for a few
steps, as planner_check.py runs its cases: twice, with this model and with the tests' tiny
Qwen2-VL (same data, settings and image pipeline), and the difference of the two peaks (what
the model's weights, gradients, optimizer state and activations cost, without the process's
own floor) is compared with the difference of the planner's estimates. Cases: the vision tower
frozen (LLaMA-Factory's default) and trained. Tokens/s counts real tokens (the image tokens
with the text), after the first step. ``--collate-only`` times what a micro batch's images
cost the collator (open, regularise, process: ftui.runner.vision.batch_images).

``--video`` (needs torchvision: run it with the video venv, .venv-video) puts one short clip in
each example instead of the image: 448 x 448 noise frames, VIDEO_FRAMES of them at VIDEO_RATE
frames per second, of which LLaMA-Factory's sampling (video_fps 2) keeps 4, i.e. a grid of
2 x 32 x 32 (2,048 patches through the tower, 512 video tokens); recorded as
vl_step_cpu_video.

On a GPU (bench/gpu_session.sh) the same run uses ``device: auto`` and the peak is
torch.cuda.max_memory_allocated.

Run: python bench/vl_step.py [--quick] [--steps N] [--collate-only] [--video]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchlib import WORDS, ftui_steps, machine, record, run_ftui, tokens_per_s, write_config  # noqa: E402

GIB = 2**30
TEXT = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            head_dim=64, max_position_embeddings=4096)
VISION = dict(depth=4, embed_dim=256, num_heads=4, mlp_ratio=4, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
              in_channels=3)
CASES = [("full, vision tower frozen", dict(freeze_vision_tower=True)),
         ("full, vision tower trained", dict(freeze_vision_tower=False))]
TEMPLATE_TOKENS = 24  # the qwen2_vl template's own tokens around a user and an assistant turn (system included), rounded up
VIDEO_FRAMES, VIDEO_RATE = 8, 4  # a 2 s clip: video_fps 2 samples 4 frames, two temporal patches
VIDEO_KEYS = dict(video_fps=2.0, video_maxlen=16, video_max_pixels=448 * 448)  # frames kept at 448 x 448
MMAP_THRESHOLD = 131072  # glibc: freed tensors go back to the system, so peak RSS follows live memory (planner_check.py)


def image_tokens(side: int, patch: int = 14, merge: int = 2) -> int:
    """The tokens of a side x side image whose side is a multiple of patch x merge (no resize)."""
    assert side % (patch * merge) == 0, side
    return (side // patch) ** 2 // merge**2


def words_for(tokens: int, tokens_per_word: float) -> int:
    """How many words make about ``tokens`` text tokens."""
    return max(1, round(tokens / tokens_per_word))


def cutoff_for(text_tokens: int, image_tokens_: int, multiple: int = 8) -> int:
    """A cutoff_len that holds an example whole (its text, its images, the template's tokens)."""
    need = text_tokens + image_tokens_ + TEMPLATE_TOKENS
    return -(-need // multiple) * multiple


def plan_row(measured_peaks: dict[str, float], estimates: dict[str, float]) -> dict[str, float]:
    """The model's cost measured (its peak less the floor's) against the planner's (its estimate
    less the floor's), in GiB, and the planner's error."""
    measured = (measured_peaks["model"] - measured_peaks["floor"]) / GIB
    planned = (estimates["model"] - estimates["floor"]) / GIB
    return {"measured_gib": measured, "estimated_gib": planned, "error": planned / measured - 1}


def vl_model_dir(path: Path, text: dict[str, Any], vision: dict[str, Any]) -> Path:
    """A Qwen2-VL folder: random weights from the config, the tests' tokenizer and processor."""
    import torch
    import transformers

    from tests.vlm_models import FAMILIES, video_processor, write_tokenizer

    path.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer(path)
    half = text["head_dim"] // 2  # M-RoPE's sections share out half the head (Qwen2-VL: 16, 24, 24 of 64)
    section = [half // 4, (half - half // 4) // 2, half - half // 4 - (half - half // 4) // 2]
    config = transformers.Qwen2VLConfig(
        text_config=dict(text, vocab_size=(ids["vocab"] + 63) // 64 * 64,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section}),
        vision_config=dict(vision, hidden_size=text["hidden_size"]), image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.AutoModelForImageTextToText.from_config(config).save_pretrained(str(path))
    (path / "preprocessor_config.json").write_text(json.dumps(FAMILIES["qwen2_vl"]["processor"], indent=1))
    (path / "video_preprocessor_config.json").write_text(json.dumps(video_processor("qwen2_vl"), indent=1))
    return path


def tokens_per_word(model: Path, seed: int = 0) -> float:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    rng = random.Random(seed)
    sample = " ".join(rng.choice(WORDS) for _ in range(2000))
    return len(tok.encode(sample, add_special_tokens=False)) / 2000


def vl_dataset(folder: Path, records: int, side: int, words: int, seed: int = 0) -> Path:
    """``records`` sharegpt records with one side x side PNG each (noise, so no two compress
    alike) and ``words`` words of text, a quarter in the question; the dataset_dir."""
    import numpy as np
    from PIL import Image

    rng, noise = random.Random(seed), np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(records):
        Image.fromarray(noise.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(folder / "images" / f"{i}.png")
        text = [rng.choice(WORDS) for _ in range(words)]
        q = words // 4
        out.append({"messages": [{"role": "user", "content": "<image>" + " ".join(text[:q])},
                                 {"role": "assistant", "content": " ".join(text[q:])}], "images": [f"images/{i}.png"]})
    (folder / "vl.json").write_text(json.dumps(out))
    (folder / "dataset_info.json").write_text(json.dumps({"vl_bench": {
        "file_name": "vl.json", "formatting": "sharegpt", "columns": {"messages": "messages", "images": "images"},
        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}}))
    return folder


def video_tokens(side: int, frames: int = VIDEO_FRAMES // VIDEO_RATE * 2, patch: int = 14, merge: int = 2,
                 temporal: int = 2) -> int:
    """The tokens of a clip of side x side frames, ``frames`` of them sampled (an even count)."""
    return frames // temporal * image_tokens(side, patch, merge)


def write_clip(path: Path, side: int, frames: int, rate: int, seed: int) -> None:
    """A clip of ``frames`` noise frames (side x side) at ``rate`` frames per second (PyAV, MPEG-4)."""
    import av
    import numpy as np

    noise = np.random.default_rng(seed)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=rate)
        stream.width = stream.height = side
        stream.pix_fmt = "yuv420p"
        for _ in range(frames):
            frame = av.VideoFrame.from_ndarray(noise.integers(0, 256, (side, side, 3), dtype=np.uint8), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())


def video_dataset(folder: Path, records: int, side: int, words: int, seed: int = 0) -> Path:
    """``records`` sharegpt records with one clip each (``write_clip``) and ``words`` words of
    text, a quarter in the question; the dataset_dir (dataset vl_bench, as ``vl_dataset``)."""
    rng = random.Random(seed)
    (folder / "videos").mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(records):
        write_clip(folder / "videos" / f"{i}.mp4", side, VIDEO_FRAMES, VIDEO_RATE, seed + i)
        text = [rng.choice(WORDS) for _ in range(words)]
        q = words // 4
        out.append({"messages": [{"role": "user", "content": "<video>" + " ".join(text[:q])},
                                 {"role": "assistant", "content": " ".join(text[q:])}], "videos": [f"videos/{i}.mp4"]})
    (folder / "vl.json").write_text(json.dumps(out))
    (folder / "dataset_info.json").write_text(json.dumps({"vl_bench": {
        "file_name": "vl.json", "formatting": "sharegpt", "columns": {"messages": "messages", "videos": "videos"},
        "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}}}))
    return folder


def collate_seconds(model: Path, data: Path, micro_batch: int, batches: int) -> float:
    """The median time the collator takes to open, regularise and process a micro batch's images."""
    from ftui.presets.vision_families import vision_family
    from ftui.runner.vision.batch_images import ExampleImages, ImageReader
    from ftui.runner.vision.plugins import plugin
    from ftui.runner.vision.processor import ImageSettings, load_image_processor

    reader = ImageReader(plugin(vision_family("qwen2_vl").plugin), load_image_processor(str(model)), ImageSettings())
    paths = sorted(str(p) for p in (data / "images").iterdir())
    times = []
    for b in range(batches):
        rows = [paths[(b * micro_batch + k) % len(paths)] for k in range(micro_batch)]
        began = time.perf_counter()
        for path in rows:
            from PIL import Image

            with Image.open(path) as image:
                grid = reader.grid(image)
            ExampleImages((path,), (grid,), reader).tensors()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="112 x 112 images, 64 text tokens, 3 steps, one case: not recorded")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--collate-only", action="store_true", help="time the collator's image processing only")
    ap.add_argument("--video", action="store_true", help="a short clip per example instead of the image (needs torchvision)")
    ap.add_argument("--device", default="cpu", help="cpu, or auto on a GPU machine")
    ap.add_argument("--tag", default="", help="suffix of the result file")
    ap.add_argument("--out", default=None, help="also write the result JSON here")
    ap.add_argument("--case", choices=("both", "frozen", "trained"), default="both", help="the vision tower frozen, trained, or both")
    ap.add_argument("--no-record", action="store_true", help="leave bench/results as it is (a test's run)")
    args = ap.parse_args()
    side, text_tokens, steps, cases = (112, 64, 3, CASES[:1]) if args.quick else (448, 1000, args.steps, CASES)
    cases = [case for case in cases if args.case in ("both", case[0].rsplit(" ", 1)[-1])]
    text, vision = (dict(TEXT, hidden_size=64, intermediate_size=128, num_hidden_layers=2, head_dim=16),
                    dict(VISION, depth=2, embed_dim=32, num_heads=2)) if args.quick else (TEXT, VISION)
    from ftui.config.load import parse_config
    from ftui.plan.model_shape import ModelShape
    from ftui.plan.planner import estimate_for
    from tests.vlm_models import vlm_dir

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model, floor = vl_model_dir(tmp / "model", text, vision), vlm_dir("qwen2_vl", tmp / "floor")
        words = words_for(text_tokens, tokens_per_word(model))
        make = video_dataset if args.video else vl_dataset
        data = make(tmp / "data", max(8, args.micro_batch * (steps + 1)), side, words)
        image = video_tokens(side) if args.video else image_tokens(side)
        out: dict[str, Any] = {"machine": machine(), "text": text, "vision": vision, "image_side": side, "image_tokens": image,
                               "text_tokens_about": text_tokens, "micro_batch": args.micro_batch, "steps": steps,
                               "malloc_mmap_threshold": MMAP_THRESHOLD, "cases": []}
        if args.video:
            out.update(video=dict(VIDEO_KEYS, frames=VIDEO_FRAMES, rate=VIDEO_RATE))
        else:
            out["collate_s_per_micro_batch"] = collate_seconds(model, data, args.micro_batch, 3 if args.quick else 8)
            print(f"images of a micro batch of {args.micro_batch}: {out['collate_s_per_micro_batch']:.3f} s to open, regularise and "
                  "process", file=sys.stderr, flush=True)
        if not args.collate_only:
            out["cutoff_len"] = cutoff_for(text_tokens, image)
            env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD))
            for name, over in cases:
                row: dict[str, Any] = {"case": name, **over}
                peaks, estimates = {}, {}
                for label, folder in (("model", model), ("floor", floor)):
                    cfg = dict(model_name_or_path=str(folder), model_init="pretrained", stage="sft", template="qwen2_vl",
                               dataset="vl_bench", dataset_dir=str(data), finetuning_type="full", cutoff_len=out["cutoff_len"],
                               per_device_train_batch_size=args.micro_batch, max_steps=steps, logging_steps=1, save_strategy="no",
                               learning_rate=1e-4, device=args.device, output_dir=str(tmp / "runs"),
                               run_name=f"{label}-{name.replace(' ', '-').replace(',', '')}", **over,
                               **(VIDEO_KEYS if args.video else {}))
                    run = run_ftui(write_config(tmp / f"{label}.yaml", cfg), env)
                    times, tokens, events = ftui_steps(run)
                    peaks[label] = max(m["peak"] for ev in events for m in ev.get("mem", []))
                    rc, _ = parse_config(cfg, "bench")
                    estimates[label] = estimate_for(rc, ModelShape.from_config(json.loads((folder / "config.json").read_text()))).total
                    if label == "model":
                        row["tokens_per_s"] = tokens_per_s(times, tokens, warmup=1)
                        row["tokens_per_step"] = statistics.mean(tokens)
                        row["step_s"] = statistics.median(ev["step_time_s"] for ev in events[1:])
                row.update({f"{k}_peak_bytes": v for k, v in peaks.items()}, **{f"{k}_estimate_bytes": v for k, v in estimates.items()})
                row.update(plan_row(peaks, estimates))
                out["cases"].append(row)
                print(f"{name}: {row['tokens_per_s']:.0f} tokens/s; measured {row['measured_gib']:.3f} GiB, planned "
                      f"{row['estimated_gib']:.3f} GiB ({100 * row['error']:+.1f}%)", file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    if not args.quick and not args.no_record:
        record("vl_step_" + ("gpu" if out["machine"].get("gpus") else "cpu") + ("_collate" if args.collate_only else "")
               + ("_video" if args.video else "") + args.tag, out)


if __name__ == "__main__":
    main()
