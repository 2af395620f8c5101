"""Packing examples with images (ftui.runner.media_packing): a packed row carries its examples'
images in order, each example's M-RoPE positions are those of the example alone (as
LLaMA-Factory's neat_packing computes them per sub-sequence), and no token attends across
examples: an example's logits in a packed row equal its logits alone, whatever the other
example's image is. LLaMA-Factory's own packed encoding is compared in
tests/test_vl_packing_reference.py."""

from __future__ import annotations

import pytest
import torch

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
    from ftui.runner.media_packing import PackedMedia, join_media_row

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
    from ftui.runner.media_packing import join_media_row

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
    from ftui.runner.media_packing import join_media_row

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
    from ftui.runner.media_packing import join_media_row

    folder, model = models("qwen2_vl")
    one, two = _examples(folder)
    collation = dataclasses.replace(media_collation(model), eager_attention=True)
    batch = Collator(0, media=collation)([join_media_row([one, two])])
    n = len(one.input_ids)
    assert batch.attention_mask.dtype == torch.float32
    assert batch.attention_mask[0, 0, n, n - 1] == torch.finfo(torch.float32).min and batch.attention_mask[0, 0, n, n] == 0
