"""The LF-parity loop over mllm_demo that tests/test_vl_encode.py (the Qwen families) and
tests/test_vl_families.py (LLaVA, Gemma 3, InternVL) share: each record encoded by ftui's
VisionEncoder as a case of tests/data/llamafactory_vlm/reference.json says (template,
cutoff_len, image_max_pixels), its ids, labels and image names held to LLaMA-Factory's, then
handed to the family's own checks; and the pixel comparison every family makes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from tests.vlm_models import FAMILIES

DATA = Path(__file__).resolve().parent / "data" / "llamafactory_vlm" / "data"
RECORDS = json.loads((DATA / "mllm_demo.json").read_text())


def encoder_for(model_dir: Path, family: str, cutoff: int, max_pixels: int, template: str | None = None):
    """ftui's VisionEncoder for the tiny ``family`` model in ``model_dir`` (its template unless given)."""
    from transformers import AutoTokenizer

    from ftui.data.chat_template import fix_tokenizer
    from ftui.data.conversation import EncodeOptions, Renderer
    from ftui.presets.templates import TEMPLATES
    from ftui.presets.vision_families import vision_family
    from ftui.runner.vision.encode import VisionEncoder
    from ftui.runner.vision.processor import ImageSettings, load_image_processor

    template = template or FAMILIES[family]["template"]
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    fix_tokenizer(tok, TEMPLATES[template])
    renderer = Renderer(template, tok, EncodeOptions(cutoff_len=cutoff))
    return VisionEncoder(renderer, vision_family(family), load_image_processor(str(model_dir)), ImageSettings(max_pixels=max_pixels))


def encodings_against_lf(case: dict[str, Any], model_dir: Path, spec) -> Iterator[tuple[int, Any, dict[str, Any], Any]]:
    """(index, ftui's encoding, LF's example, the encoder) of each mllm_demo record under
    ``case``, after the parts every family shares were found equal: the case's template and
    tokenizer, the images' names, input_ids and labels."""
    from ftui.data.media import record_media
    from ftui.data.records import to_conversation

    assert case["template"] == FAMILIES[case["family"]]["template"]
    encoder = encoder_for(model_dir, case["family"], case["cutoff_len"], case["image_max_pixels"], case["template"])
    tok = encoder.renderer.tokenizer
    assert (len(tok), tok.eos_token) == (case["vocab"], case["eos"])
    assert len(case["examples"]) == len(RECORDS)
    for i, (record, ref) in enumerate(zip(RECORDS, case["examples"])):
        paths = record_media(record, spec, i)["images"]
        assert [Path(p).name for p in paths] == ref["images"]
        enc = encoder.encode(to_conversation(record, spec, i), paths, spec, i)
        assert enc.input_ids == ref["input_ids"], f"record {i}: input_ids differ"
        assert enc.labels == ref["labels"], f"record {i}: labels differ"
        yield i, enc, ref, encoder


def assert_pixels_as_lf(pixel_values, ref: dict[str, Any]) -> None:
    """pixel_values against LF's record of them: shape, first values (1e-5), sum and a digest
    of the values rounded to 4 decimals."""
    pixels = pixel_values.float().numpy()
    assert list(pixels.shape) == ref["shape"]
    np.testing.assert_allclose(pixels.reshape(-1)[: len(ref["first"])], ref["first"], atol=1e-5)
    assert float(pixels.astype(np.float64).sum()) == pytest.approx(ref["sum"], rel=1e-6, abs=1e-3)
    assert hashlib.sha256(np.round(pixels.astype(np.float32), 4).tobytes()).hexdigest()[:16] == ref["digest"]
