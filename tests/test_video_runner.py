"""Videos encoded and collated as LLaMA-Factory 0.9.5 does it, for Qwen2-VL, Qwen2.5-VL and
Qwen3-VL on its mllm_video_demo (tests/data/llamafactory_vlm/reference_video.json, made by
make_reference.py --video in a venv with torchvision): input_ids and labels exactly (Qwen3-VL's
timestamps in the text included), video_grid_thw (computed from each header, then checked
against the grid transformers' video processor gives the decoded frames),
second_per_grid_ts, the M-RoPE positions and pixel_values_videos; a batch mixing a record
with an image and a video and a record with an image. The 2-step LoRA sft run on the video demo
is tests/test_video_chat.py's (its chat, predict and eval use it).

Marked ``video``: transformers' video processors need torchvision, which the main venv has
not (its CPU torch 2.13 cannot load one); ``make test-video`` runs these in .venv-video.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.video

ROOT = Path(__file__).resolve().parents[1]
REF_DIR = ROOT / "tests" / "data" / "llamafactory_vlm"
REFERENCE = json.loads((REF_DIR / "reference_video.json").read_text())
SHAREGPT_TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from vlm_models import loaded_models

    return loaded_models(tmp_path_factory.mktemp("vlm"))


def video_spec(lf_data: Path):
    from ftui.data.registry import resolve_datasets

    [spec] = resolve_datasets("mllm_video_demo", str(lf_data))
    return spec


def encoder_for(model_dir: Path, family: str, template: str, keys: dict, cutoff: int = 4096):
    from transformers import AutoTokenizer

    from ftui.config.schema import RunConfig
    from ftui.data.chat_template import fix_tokenizer
    from ftui.data.conversation import EncodeOptions, Renderer
    from ftui.presets.templates import TEMPLATES
    from ftui.presets.vision_families import vision_family
    from ftui.runner.vision.encode import VisionEncoder
    from ftui.runner.vision.processor import ImageSettings, load_image_processor

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    fix_tokenizer(tok, TEMPLATES[template])
    renderer = Renderer(template, tok, EncodeOptions(cutoff_len=cutoff))
    cfg = RunConfig(model_name_or_path=str(model_dir), dataset="mllm_video_demo", **keys)
    return VisionEncoder(renderer, vision_family(family), load_image_processor(str(model_dir)), ImageSettings(), str(model_dir), cfg)


def collated(model, ids, labels, media):
    from ftui.runner.data import Collator, Example
    from ftui.runner.media_batch import media_collation

    batch = Collator(0, media=media_collation(model))([Example(ids, labels, real_tokens=len(ids), media=media)])
    return batch.media.tensors, batch.media.position_ids[:, 0, :].tolist()


def same_decoder() -> bool:
    """PyAV and Pillow as in the reference (its frames' RGB comes from PyAV's FFmpeg)."""
    import av
    import PIL

    return (av.__version__, PIL.__version__) == (REFERENCE["av"], REFERENCE["pillow"])


def _case_id(case: dict) -> str:
    return case["family"] + "".join(f"-{k}{v}" for k, v in case["keys"].items())


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=_case_id)
def test_video_encoding_matches_llamafactory(case, models, lf_data):
    from ftui.data.media import record_media
    from ftui.data.records import to_conversation

    model_dir, model = models(case["family"])
    encoder = encoder_for(model_dir, case["family"], case["template"], case["keys"])
    assert len(encoder.renderer.tokenizer) == case["vocab"]
    spec = video_spec(lf_data)
    records = json.loads((lf_data / "mllm_video_demo.json").read_text())
    for i, (record, ref) in enumerate(zip(records, case["examples"], strict=True)):
        media = record_media(record, spec, i)
        assert [Path(p).name for p in media["videos"]] == ref["videos"]
        enc = encoder.encode(to_conversation(record, spec, i), media["images"], spec, i, media["videos"])
        assert enc.input_ids == ref["input_ids"], f"record {i}: input_ids differ"
        assert enc.labels == ref["labels"], f"record {i}: labels differ"
        assert [list(g) for g in enc.media.video_grids] == ref["video_grid_thw"]  # from the header
        tensors, positions = collated(model, enc.input_ids, enc.labels, enc.media)
        assert tensors["video_grid_thw"].tolist() == ref["video_grid_thw"]  # from the decoded frames
        if ref["second_per_grid_ts"] is None:
            assert "second_per_grid_ts" not in tensors
        else:
            np.testing.assert_allclose(tensors["second_per_grid_ts"].tolist(), ref["second_per_grid_ts"], rtol=1e-6)
        pixels = tensors["pixel_values_videos"].float().numpy()
        summary = ref["pixel_values_videos"]
        assert list(pixels.shape) == summary["shape"]
        if same_decoder():
            np.testing.assert_allclose(pixels.reshape(-1)[: len(summary["first"])], summary["first"], atol=1e-5)
            assert float(pixels.astype(np.float64).sum()) == pytest.approx(summary["sum"], rel=1e-6, abs=1e-3)
            assert hashlib.sha256(np.round(pixels.astype(np.float32), 4).tobytes()).hexdigest()[:16] == summary["digest"]
        else:  # another FFmpeg converts YUV to RGB a level or two apart: the same frames, not the same bytes
            np.testing.assert_allclose(pixels.reshape(-1)[: len(summary["first"])], summary["first"], atol=0.05)
            assert abs(float(pixels.astype(np.float64).mean()) - summary["sum"] / pixels.size) < 0.02
        assert positions == ref["position_ids"], f"record {i}: M-RoPE positions differ"
        assert encoder.missing_video_tokens(enc) == 0


def test_a_batch_mixes_images_and_videos(models, lf_data, tmp_path):
    """One record with an image and a video, one with an image only: one micro batch, the
    model's forward takes both kinds of pixels (token types 1 and 2, M-RoPE over both grids)."""
    import torch

    from ftui.data.media import record_media
    from ftui.data.records import DatasetSpec, to_conversation
    from ftui.runner.data import Collator, Example
    from ftui.runner.media_batch import media_collation

    model_dir, model = models("qwen2_vl")
    encoder = encoder_for(model_dir, "qwen2_vl", "qwen2_vl", {"video_maxlen": 4, "video_max_pixels": 64 * 64})
    spec = DatasetSpec(name="mixed", formatting="sharegpt", columns={"messages": "messages", "images": "images", "videos": "videos"},
                       tags=SHAREGPT_TAGS, media_dir=str(lf_data))
    both = {"messages": [{"role": "user", "content": "<image>Is this<video>the same baby?"}, {"role": "assistant", "content": "Yes."}],
            "images": ["mllm_demo_data/1.jpg"], "videos": ["mllm_demo_data/4.mp4"]}
    image = {"messages": [{"role": "user", "content": "<image>Who?"}, {"role": "assistant", "content": "A baby."}],
             "images": ["mllm_demo_data/2.jpg"]}
    examples = []
    for i, record in enumerate((both, image)):
        media = record_media(record, spec, i)
        enc = encoder.encode(to_conversation(record, spec, i), media["images"], spec, i, media["videos"])
        examples.append(Example(enc.input_ids, enc.labels, real_tokens=len(enc.input_ids), media=enc.media))
    batch = Collator(0, media=media_collation(model))(examples)
    tensors = batch.media.tensors
    assert tensors["image_grid_thw"].size(0) == 2 and tensors["video_grid_thw"].size(0) == 1
    assert batch.media.row_sizes["pixel_values_videos"][1] == 0
    types = batch.media.mm_token_type_ids
    assert int((types[0] == 2).sum()) > 0 and int((types[1] == 2).sum()) == 0 and int((types[1] == 1).sum()) > 0
    with torch.no_grad():
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, labels=batch.labels, **batch.media.inputs())
    assert torch.isfinite(out.loss)
    rows = batch.media.inputs(slice(1, 2))  # the image row alone: no video tensors
    assert "pixel_values_videos" not in rows and rows["image_grid_thw"].size(0) == 1
