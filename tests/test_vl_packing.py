"""Packing examples with images (ftui.runner.media_packing): a packed row carries its examples'
images in order, each example's M-RoPE positions are those of the example alone (as
LLaMA-Factory's neat_packing computes them per sub-sequence), and no token attends across
examples: an example's logits in a packed row equal its logits alone, whatever the other
example's image is. And LLaMA-Factory's own packed encoding of mllm_demo
(reference_packed.json), row by row: ids, labels, segment ids, grids, pixels and, for
neat_packing, every position id of the padded row."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from ftui.runner.data import Example
from tests.test_vl_encode import REF_DIR, mllm_demo_spec
from tests.vl_parity import RECORDS, encoder_for

from tests.vl_examples import ImageExamples
from tests.vlm_models import loaded_models

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return loaded_models(tmp_path_factory.mktemp("vlm"))


def _examples(folder, colour=(120, 30, 200)):
    make = ImageExamples(folder)
    one = make.example("What is this?", " A box.", sizes=[(56, 84), (84, 56)], colour=colour)
    two = make.example("And this one?", " A square, very blue.", sizes=[(56, 56)], colour=(10, 200, 40))
    return one, two


def _collate(model, examples, **kw):
    from ftui.runner.data import Collator
    from ftui.runner.media_batch import media_collation

    return Collator(0, media=media_collation(model), **kw)(examples)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_packed_row_carries_its_examples_images_and_their_own_positions(family, models):
    from ftui.runner.data import pack_examples
    from ftui.runner.data import join_media_row
    from ftui.runner.media_packing import PackedMedia

    folder, model = models(family)
    one, two = _examples(folder)
    rows = pack_examples([one, two], 10_000, join_media_row)
    assert len(rows) == 1 and isinstance(rows[0].media, PackedMedia)
    row = rows[0]
    first = row.media.parts[0] is one.media  # first-fit decreasing puts the longer first
    order = [one, two] if first else [two, one]
    packed = _collate(model, [row])
    alone = [_collate(model, [ex]) for ex in order]
    assert torch.equal(packed.media.tensors["image_grid_thw"],
                       torch.cat([a.media.tensors["image_grid_thw"] for a in alone]))
    assert torch.allclose(packed.media.tensors["pixel_values"],
                          torch.cat([a.media.tensors["pixel_values"] for a in alone]))
    n = len(order[0].input_ids)
    assert torch.equal(packed.media.position_ids[:, 0, :n], alone[0].media.position_ids[:, 0])
    assert torch.equal(packed.media.position_ids[:, 0, n:], alone[1].media.position_ids[:, 0])
    assert packed.attention_mask.shape == (1, 1, len(row.input_ids), len(row.input_ids))
    assert not packed.attention_mask[0, 0, n:, :n].any()  # the second example sees nothing of the first
    assert packed.attention_mask[0, 0, n:, n:].sum() == (len(row.input_ids) - n) * (len(row.input_ids) - n + 1) // 2


def _logits(model, batch):
    with torch.no_grad():
        return model(**batch.model_inputs()).logits


@pytest.mark.parametrize("family", FAMILIES)
def test_no_token_of_a_packed_row_attends_across_its_examples(family, models):
    """The second example's logits in the row equal its logits alone, and changing the first
    example's image changes the first example's logits only."""
    from ftui.runner.data import join_media_row

    folder, model = models(family)
    model.eval()
    one, two = _examples(folder)
    other, _two = _examples(folder, colour=(250, 250, 0))
    row, row_other = join_media_row([one, two]), join_media_row([other, two])
    n = len(one.input_ids)
    packed, packed_other = _logits(model, _collate(model, [row])), _logits(model, _collate(model, [row_other]))
    assert not torch.allclose(packed[0, :n], packed_other[0, :n], atol=1e-4)  # the image does reach its own example
    assert torch.allclose(packed[0, n:], packed_other[0, n:], atol=1e-5)
    alone = _logits(model, _collate(model, [two]))
    assert torch.allclose(packed[0, n:], alone[0], atol=1e-4)


def test_padding_after_packed_rows_is_a_segment_of_its_own(models):
    """Two packed rows of different lengths in one micro batch: the shorter row's padding
    attends to itself alone and no real token attends to it; its positions count 0, 1, ..."""
    from ftui.runner.data import join_media_row

    folder, model = models("qwen2_vl")
    one, two = _examples(folder)
    rows = [join_media_row([one, two]), join_media_row([two])]
    batch = _collate(model, rows)
    width, n = batch.input_ids.size(1), len(two.input_ids)
    assert width > n
    mask = batch.attention_mask[1, 0]
    assert not mask[:n, n:].any() and not mask[n:, :n].any() and mask[n:, n:].diagonal().all()
    assert batch.media.position_ids[1:, 1, n:].tolist() == [list(range(width - n))] * 3
    assert batch.media.row_sizes["image_grid_thw"] == [3, 1]
    alone = _logits(model, _collate(model, [two]))
    assert torch.allclose(_logits(model, batch)[1, :n], alone[0], atol=1e-4)


def test_eager_attention_gets_an_additive_mask(models):
    import dataclasses

    from ftui.runner.media_batch import media_collation
    from ftui.runner.data import Collator
    from ftui.runner.data import join_media_row

    folder, model = models("qwen2_vl")
    one, two = _examples(folder)
    collation = dataclasses.replace(media_collation(model), eager_attention=True)
    batch = Collator(0, media=collation)([join_media_row([one, two])])
    n = len(one.input_ids)
    assert batch.attention_mask.dtype == torch.float32
    assert batch.attention_mask[0, 0, n, n - 1] == torch.finfo(torch.float32).min and batch.attention_mask[0, 0, n, n] == 0


# LLaMA-Factory's own packed encoding (tests/data/llamafactory_vlm/reference_packed.json, made by
# make_reference.py --packed): the rows it packed, each compared with ftui's row of the same
# examples in the same order (ftui's own rows are first-fit decreasing, README: neat_packing).
PACKED = json.loads((REF_DIR / "reference_packed.json").read_text())


def _packed_id(case: dict) -> str:
    return f"{case['family']}-{'neat_packing' if case['neat_packing'] else 'packing'}"


def _ftui_rows(case: dict, models):
    """ftui's encoding of mllm_demo's records, joined as each of LLaMA-Factory's rows holds
    them, each collated alone and padded to LLaMA-Factory's row length (cutoff_len)."""
    from ftui.data.media import record_media
    from ftui.data.records import to_conversation
    from ftui.runner.data import Collator
    from ftui.runner.media_batch import media_collation
    from ftui.runner.data import join_media_row, row_sequence_lengths
    from ftui.runner.media_packing import segment_ids

    model_dir, model = models(case["family"])
    encoder = encoder_for(model_dir, case["family"], case["cutoff_len"], case["image_max_pixels"], template=case["template"])
    spec = mllm_demo_spec()
    examples = []
    for i, record in enumerate(RECORDS):
        enc = encoder.encode(to_conversation(record, spec, i), record_media(record, spec, i)["images"], spec, i)
        examples.append(Example(enc.input_ids, enc.labels, real_tokens=len(enc.input_ids), media=enc.media))
    collate = Collator(encoder.renderer.tokenizer.pad_token_id, pad_to_multiple=case["cutoff_len"], media=media_collation(model))
    for ref in case["rows"]:
        row = join_media_row([examples[i] for i in ref["examples"]])
        yield ref, row, collate([row]), segment_ids([row_sequence_lengths(row, case["cutoff_len"])], case["cutoff_len"])[0]


@pytest.mark.parametrize("case", PACKED["cases"], ids=_packed_id)
def test_packed_rows_match_llamafactory(case, models):
    assert len(case["rows"]) >= 2 and any(len(r["examples"]) >= 2 for r in case["rows"])
    assert sorted(i for r in case["rows"] for i in r["examples"]) == list(range(len(RECORDS)))
    for ref, row, batch, segments in _ftui_rows(case, models):
        n = ref["length"]
        assert len(row.input_ids) == n
        assert batch.input_ids[0].tolist() == ref["input_ids"]
        assert batch.labels[0].tolist() == ref["labels"]
        tensors = batch.media.tensors
        assert tensors["image_grid_thw"].tolist() == ref["image_grid_thw"]
        pixels = tensors["pixel_values"].float().numpy()
        assert list(pixels.shape) == ref["pixel_values"]["shape"]
        np.testing.assert_allclose(pixels.reshape(-1)[: len(ref["pixel_values"]["first"])], ref["pixel_values"]["first"], atol=1e-5)
        assert float(pixels.astype(np.float64).sum()) == pytest.approx(ref["pixel_values"]["sum"], rel=1e-6, abs=1e-3)
        assert hashlib.sha256(np.round(pixels.astype(np.float32), 4).tobytes()).hexdigest()[:16] == ref["pixel_values"]["digest"]
        positions = batch.media.position_ids[:, 0, :].tolist()
        if case["neat_packing"]:
            # segment ids: LLaMA-Factory's padding is 0 (masked whole), ftui's a segment of its own
            assert segments[:n].tolist() == ref["attention_mask"][:n] and set(ref["attention_mask"][n:]) <= {0}
            assert positions == ref["position_ids"], "M-RoPE positions differ from LLaMA-Factory's neat_packing"
        else:
            # LLaMA-Factory's plain packing lets a row's examples attend to each other and runs M-RoPE
            # over the row as one sequence; ftui keeps them apart as neat_packing does (module doc of
            # ftui.runner.media_packing): the first example's positions agree, the next ones' restart.
            m = len(_first_example(ref, case))
            assert [p[:m] for p in positions] == [p[:m] for p in ref["position_ids"]]
            assert set(ref["attention_mask"]) == {1}
            if len(ref["examples"]) > 1:
                assert positions[0][m] == 0 and ref["position_ids"][0][m] > 0


def _first_example(ref: dict, case: dict) -> list[int]:
    neat = next(c for c in PACKED["cases"] if c["family"] == case["family"] and c["neat_packing"])
    twin = next(r for r in neat["rows"] if r["examples"] == ref["examples"])
    return [t for t, s in zip(twin["input_ids"], twin["attention_mask"]) if s == 1]


def _demo_examples(family: str, models) -> list[Example]:
    from ftui.data.media import record_media
    from ftui.data.records import to_conversation
    from test_vl_families import encoder_for as family_encoder

    model_dir, _model = models(family)
    encoder = family_encoder(model_dir, family, 1024, 128 * 128)
    spec = mllm_demo_spec()
    out = []
    for i, record in enumerate(RECORDS[:3]):
        enc = encoder.encode(to_conversation(record, spec, i), record_media(record, spec, i)["images"], spec, i)
        out.append(Example(enc.input_ids, enc.labels, real_tokens=len(enc.input_ids), media=enc.media))
    return out


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl", "llava", "internvl"])
def test_an_example_packed_after_another_gives_its_logits_alone(family, models):
    """mllm_demo's record 0 packed after record 1 and after record 2 (other texts, other images):
    its logits are its logits alone, in every family that packs."""
    from ftui.runner.data import join_media_row

    _folder, model = models(family)
    model.eval()
    ex0, ex1, ex2 = _demo_examples(family, models)
    alone = _logits(model, _collate(model, [ex0]))[0]
    for first in (ex1, ex2):
        n = len(first.input_ids)
        packed = _logits(model, _collate(model, [join_media_row([first, ex0])]))[0]
        assert torch.allclose(packed[n:], alone, atol=1e-4), f"after an example of {n} tokens"


def test_gemma3_is_not_packed_since_a_packed_rows_mask_would_change_its_logits(models):
    """Why packing is refused for Gemma 3 (ftui.config.media_checks.vision_packing_problem): its
    image tokens attend to each other both ways through the mask the model builds, which the
    packed row's mask replaces, so an example packed after another is not itself any more."""
    from ftui.runner.data import join_media_row

    _folder, model = models("gemma3")
    model.eval()
    ex0, ex1, _ex2 = _demo_examples("gemma3", models)
    alone = _logits(model, _collate(model, [ex0]))[0]
    packed = _logits(model, _collate(model, [join_media_row([ex1, ex0])]))[0]
    assert not torch.allclose(packed[len(ex1.input_ids):], alone, atol=1e-4)


# --- the config's keys, and a run


def test_preflight_packs_images_for_qwen_and_refuses_gemma3_by_name(tmp_path, lf_data):
    from ftui.config.preflight import preflight
    from tests.vlm_models import vlm_dir

    def problems(family: str, template: str, **extra) -> dict[str, str]:
        cfg = {"model_name_or_path": str(vlm_dir(family, tmp_path / "models")), "dataset": "mllm_demo", "template": template,
               "device": "cpu", "dataset_dir": str(lf_data), "output_dir": str(tmp_path / "runs")} | extra
        return {p.field: p.message for p in preflight(cfg).problems}

    for key in ("packing", "neat_packing"):
        assert problems("qwen2_vl", "qwen2_vl", **{key: True}) == {}
        assert "Gemma 3 builds its own attention mask" in problems("gemma3", "gemma3", **{key: True})[key]
        assert key not in problems("gemma3", "gemma3")


@pytest.mark.slow
@pytest.mark.parametrize("key,engine", [("packing", "single"), ("neat_packing", "single"), ("packing", "fsdp")])
def test_ftui_train_packs_mllm_demo_for_a_tiny_qwen2_vl_with_lora(key, engine, tmp_path, lf_data):
    from tests.test_vl_dpo import ftui_train, run_events
    from tests.vlm_models import vlm_dir

    model = vlm_dir("qwen2_vl", tmp_path / "models")
    config = {"model_name_or_path": str(model), "stage": "sft", "finetuning_type": "lora", "template": "qwen2_vl",
              "dataset": "mllm_demo", "dataset_dir": str(lf_data), "cutoff_len": 1024, "image_max_pixels": 128 * 128,
              "per_device_train_batch_size": 1, "learning_rate": 1e-3, "output_dir": str(tmp_path / "runs"), key: True,
              "engine": engine, "nproc_per_node": 1 if engine == "single" else 2}
    proc = ftui_train(config, tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    events = run_events(tmp_path)
    start = next(e for e in events if e["event"] == "run_start")
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 2 and all(torch.isfinite(torch.tensor(e["loss"])) for e in steps)
    assert start["train_examples"] == 2  # the 6 records (1,231 tokens at 128 x 128 pixels) in 2 rows of at most 1,024


def test_a_model_loaded_with_eager_attention_gets_the_additive_mask(tmp_path):
    import transformers

    from ftui.runner.media_batch import media_collation
    from tests.vlm_models import vlm_dir

    from ftui.runner.data import join_media_row

    folder = vlm_dir("qwen2_vl", tmp_path)
    one, two = _examples(folder)
    for implementation, eager in (("eager", True), ("sdpa", False)):
        model = transformers.AutoModelForImageTextToText.from_pretrained(str(folder), attn_implementation=implementation).eval()
        assert media_collation(model).eager_attention is eager
        packed = _logits(model, _collate(model, [join_media_row([one, two])]))[0, len(one.input_ids):]
        assert torch.allclose(packed, _logits(model, _collate(model, [two]))[0], atol=1e-4), implementation


def test_the_planner_counts_a_packed_rows_images(tmp_path):
    """With packing a row holds several examples' images: planned as many of the heaviest
    example as its image tokens fit in cutoff_len; without, one example's."""
    from ftui.plan.model_shape import ModelShape, read_model_config
    from ftui.plan.vision_activations import image_load, vision_activations
    from tests.test_vl_plan import vl_config

    data = REF_DIR / "data"
    vision = ModelShape.from_config(read_model_config(vl_config(tmp_path, data).model_name_or_path)).vision
    one = image_load(vl_config(tmp_path, data, image_max_pixels=128 * 128, cutoff_len=1024), vision)
    packed = image_load(vl_config(tmp_path, data, image_max_pixels=128 * 128, cutoff_len=1024, packing=True), vision)
    rows = 1024 // one.tokens
    assert rows > 1 and (packed.images, packed.tokens, packed.patches) == (one.images * rows, one.tokens * rows, one.patches * rows)
    kw = dict(act=2, res_bytes=4, tower_trains=True, projector_trains=True)
    assert vision_activations(vision, packed, 1, **kw) == pytest.approx(vision_activations(vision, one, rows, **kw))


@pytest.mark.parametrize("joined", ["text rows", "rows with images left out"])
def test_packed_rows_without_images_run_the_tower_on_a_hidden_stand_in(joined, models):
    """A micro batch of packed rows with no image (a text dataset beside an image one) gets
    the stand-in image after row 0's examples, as an unpacked one does (sharded engines
    need every rank's tower to run): one more segment, which changes no example's logits."""
    from ftui.runner.data import IGNORE, join_media_row, join_row

    folder, model = models("qwen2_vl")
    model.eval()
    make = ImageExamples(folder)
    one, two = make.example("hello", " there", sizes=[]), make.example("and you", " fine thanks", sizes=[])
    row = join_row([one, two]) if joined == "text rows" else join_media_row([one, two])
    assert not row.media
    batch = _collate(model, [row])
    n = len(row.input_ids)
    hidden = batch.input_ids.size(1) - n
    assert hidden > 0 and batch.labels[0, n:].tolist() == [IGNORE] * hidden
    assert batch.media.tensors["image_grid_thw"].tolist() == [[1, 2, 2]]
    assert not batch.attention_mask[0, 0, n:, :n].any() and not batch.attention_mask[0, 0, :n, n:].any()
    packed = _logits(model, batch)[0]
    for start, ex in ((0, one), (len(one.input_ids), two)):
        alone = _logits(model, _collate(model, [ex]))[0, :len(ex.input_ids)]  # unpacked: its own stand-in, masked out
        assert torch.allclose(packed[start:start + len(ex.input_ids)], alone, atol=1e-4)
