"""Vision-language models on the runner's side (issue 42, first slice: Qwen2-VL, Qwen2.5-VL,
Qwen3-VL with images): loading, what trains under full / freeze / LoRA with LLaMA-Factory's
freeze flags, the decoder layers and the FSDP units, the batches with images (concatenated
pixels, token types, M-RoPE positions, row slices) and the loss through the VLM's forward."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch

from tests.vl_examples import ImageExamples, tiny_vlm_cfg

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vlms")


def loaded(family: str, root: Path, **over):
    from ftui.runner.model import apply_method, load_model

    cfg = tiny_vlm_cfg(family, root, **over)
    return apply_method(load_model(cfg, CPU), cfg), cfg


def trainable(model) -> set[str]:
    return {n for n, p in model.named_parameters() if p.requires_grad}


# --- loading and the decoder layers


@pytest.mark.parametrize("family", FAMILIES)
def test_a_vision_language_model_loads_whole_and_its_decoder_layers_are_the_language_models(family, models):
    from ftui.runner.model import decoder_layers, load_model
    from ftui.runner.vlm import vision_blocks

    model = load_model(tiny_vlm_cfg(family, models), CPU)
    assert type(model).__name__.endswith("ForConditionalGeneration")
    assert model.model.visual is not None and model.lm_head is not None
    assert decoder_layers(model) is model.model.language_model.layers
    assert vision_blocks(model) is model.model.visual.blocks


def test_decoder_layers_are_the_language_models_when_the_vision_tower_has_more_blocks(models):
    """Qwen2-VL 7B: 32 vision blocks, 28 decoder layers; the longest list is the wrong one."""
    import transformers

    from ftui.runner.model import decoder_layers

    config = transformers.AutoConfig.from_pretrained(str(tiny_vlm_cfg("qwen2_vl", models).model_name_or_path))
    config.vision_config.depth = 3
    model = transformers.AutoModelForImageTextToText.from_config(config)
    assert len(model.model.visual.blocks) == 3 and len(model.model.language_model.layers) == 2
    assert decoder_layers(model) is model.model.language_model.layers


# --- what trains: full and freeze, with each flag (LLaMA-Factory's get_forbidden_modules)


def visual(name: str) -> bool:
    return name.startswith("model.visual.")


def merger(name: str) -> bool:
    return name.startswith("model.visual.merger.")


@pytest.mark.parametrize("family", FAMILIES)
def test_full_trains_all_but_the_frozen_parts(family, models):
    model, _cfg = loaded(family, models, finetuning_type="full")
    names = {n for n, _ in model.named_parameters()}
    assert trainable(model) == {n for n in names if not visual(n)}  # defaults: vision tower and projector frozen
    model, _cfg = loaded(family, models, finetuning_type="full", freeze_vision_tower=False)
    assert trainable(model) == {n for n in names if not merger(n)}
    model, _cfg = loaded(family, models, finetuning_type="full", freeze_multi_modal_projector=False)
    assert trainable(model) == {n for n in names if not visual(n) or merger(n)}
    model, _cfg = loaded(family, models, finetuning_type="full", freeze_language_model=True, freeze_vision_tower=False,
                         freeze_multi_modal_projector=False)
    assert trainable(model) == {n for n in names if visual(n)}


def test_freeze_trains_the_last_layers_and_an_unfrozen_vision_blocks_of_the_same_index(models):
    model, _cfg = loaded("qwen2_vl", models, finetuning_type="freeze", freeze_trainable_layers=1)
    names = {n for n, _ in model.named_parameters()}
    last = {n for n in names if n.startswith("model.language_model.layers.1.")}
    assert last and trainable(model) == last
    model, _cfg = loaded("qwen2_vl", models, finetuning_type="freeze", freeze_trainable_layers=1, freeze_vision_tower=False)
    assert trainable(model) == last | {n for n in names if n.startswith("model.visual.blocks.1.")}
    model, _cfg = loaded("qwen2_vl", models, finetuning_type="freeze", freeze_trainable_layers=1,
                         freeze_multi_modal_projector=False)
    assert trainable(model) == last | {n for n in names if merger(n)}
    model, _cfg = loaded("qwen2_vl", models, finetuning_type="freeze", freeze_trainable_layers=2, freeze_language_model=True,
                         freeze_vision_tower=False)
    assert trainable(model) == {n for n in names if n.startswith("model.visual.blocks.")}
    with pytest.raises(ValueError, match="freeze_trainable_layers=3 but the model has 2 layers"):
        loaded("qwen2_vl", models, finetuning_type="freeze", freeze_trainable_layers=3)


# --- LoRA's targets (LLaMA-Factory's find_all_linear_modules and patch_target_modules)


def lora_modules(model) -> set[str]:
    """The wrapped modules' names (as in the base model)."""
    return {n.removeprefix("base_model.model.").removesuffix(".lora_A") for n, _ in model.named_modules() if n.endswith(".lora_A")}


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_all_covers_the_language_model_only_unless_the_vision_tower_is_unfrozen(family, models):
    model, _cfg = loaded(family, models, finetuning_type="lora", lora_target="all")
    wrapped = lora_modules(model)
    assert wrapped and all(n.startswith("model.language_model.layers.") for n in wrapped), wrapped
    assert {n.rsplit(".", 1)[1] for n in wrapped} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert all(".lora_" in n for n in trainable(model))

    model, _cfg = loaded(family, models, finetuning_type="lora", lora_target="all", freeze_vision_tower=False)
    unfrozen = lora_modules(model)
    vision = {n for n in unfrozen if visual(n)}
    assert unfrozen - vision == wrapped
    assert any(".blocks.0.attn.qkv" in n for n in vision) and any(".blocks.1.attn.proj" in n for n in vision)
    assert not any("patch_embed" in n or merger(n) for n in vision), vision  # conflict key, and the frozen projector
    if family == "qwen3_vl":  # its deepstack mergers are vision-tower keys
        assert any("deepstack_merger_list.0.linear_fc1" in n for n in vision)


def test_lora_named_targets_skip_the_frozen_parts_and_a_target_left_with_none_is_refused(models):
    model, _cfg = loaded("qwen2_vl", models, finetuning_type="lora", lora_target="q_proj,qkv")
    assert {n.rsplit(".", 1)[1] for n in lora_modules(model)} == {"q_proj"}  # qkv is the frozen tower's
    with pytest.raises(ValueError, match="lora_target qkv names no module"):
        loaded("qwen2_vl", models, finetuning_type="lora", lora_target="qkv")


# --- batches with images


@pytest.fixture(scope="module")
def qwen2(models):
    from ftui.runner.model import load_model

    cfg = tiny_vlm_cfg("qwen2_vl", models)
    model = load_model(cfg, CPU)
    return model, ImageExamples(Path(cfg.model_name_or_path))


def collate(model, examples, **kw):
    from ftui.runner.data import Collator
    from ftui.runner.media_batch import media_collation

    tok_pad = 0
    return Collator(tok_pad, loss_positions=True, media=media_collation(model), **kw)(examples)


def test_images_are_concatenated_in_row_order_with_token_types_and_each_rows_own_positions(qwen2):
    model, make = qwen2
    rows = [make.example("what is it", " a square", [(56, 84)]), make.example("no picture", " none", []),
            make.example("two of them", " both red", [(112, 56), (56, 56)])]
    batch = collate(model, rows)
    pixels, grids = batch.media.tensors["pixel_values"], batch.media.tensors["image_grid_thw"]
    assert torch.equal(pixels, torch.cat([rows[0].media["pixel_values"], rows[2].media["pixel_values"]]))
    assert torch.equal(grids, torch.cat([rows[0].media["image_grid_thw"], rows[2].media["image_grid_thw"]]))
    assert batch.media.row_sizes["image_grid_thw"] == [1, 0, 2]
    types = batch.media.mm_token_type_ids
    assert torch.equal(types == 1, batch.input_ids == make.image_id) and int(types[1].sum()) == 0
    positions = batch.media.position_ids
    assert positions.shape == (4, 3, batch.input_ids.size(1))
    assert torch.equal(positions[0], positions[1])  # LLaMA-Factory's text row: the temporal row again
    for r, ex in enumerate(rows[::2]):  # each row's positions are what the model gives that row alone
        r, n = 2 * r, len(ex.input_ids)
        alone = collate(model, [ex]).media.position_ids
        assert torch.equal(positions[:, r, :n], alone[:, 0, :n])
    assert positions[1, 1, : len(rows[1].input_ids)].tolist() == list(range(len(rows[1].input_ids)))
    assert positions[1, 0, len(rows[0].input_ids) - 1] < len(rows[0].input_ids) - 1  # an image's tokens share positions


def test_a_slice_of_rows_takes_exactly_those_rows_images(qwen2):
    model, make = qwen2
    rows = [make.example("a", " b", [(56, 84)]), make.example("c", " d", [(112, 56), (56, 56)]), make.example("e", " f", [])]
    batch = collate(model, rows)
    second = batch.model_inputs(slice(1, 2))
    assert torch.equal(second["pixel_values"], rows[1].media["pixel_values"])
    assert torch.equal(second["image_grid_thw"], rows[1].media["image_grid_thw"])
    assert torch.equal(second["position_ids"], batch.media.position_ids[:, 1:2])
    assert torch.equal(second["mm_token_type_ids"], batch.media.mm_token_type_ids[1:2])
    assert "pixel_values" not in batch.model_inputs(slice(2, 3))
    assert batch.to(CPU).media.tensors["pixel_values"].shape == batch.media.tensors["pixel_values"].shape


def test_images_need_a_vision_language_model_and_padded_rows(qwen2):
    from ftui.runner.data import Collator

    model, make = qwen2
    ex = make.example("a", " b")
    with pytest.raises(ValueError, match="not a vision-language model"):
        Collator(0)([ex])
    with pytest.raises(ValueError, match="padded rows only"):
        collate(model, [ex], padding_free=True)


def test_the_loss_through_the_vlm_matches_full_logits_and_each_row_alone(qwen2):
    """The chunked loss (logits at labelled positions only) over the VLM's forward equals the
    full-logits loss, the model's own M-RoPE positions, and the sum of each row alone (the
    padding and the other rows' images change nothing)."""
    from ftui.runner.loss import install_chunked_loss, micro_batch_loss, token_loss_sum

    model, make = qwen2
    rows = [make.example("what is it", " a square", [(56, 84)]),
            make.example("two of them here", " both red and blue", [(112, 56), (56, 56)], colour=(10, 200, 40))]
    batch = collate(model, rows)
    nothing = contextlib.nullcontext
    with torch.no_grad():
        full = token_loss_sum(model(**batch.model_inputs(), use_cache=False).logits, batch.labels)
        inputs = batch.model_inputs()
        inputs.pop("position_ids")  # the model computes them itself from mm_token_type_ids and the mask
        own = token_loss_sum(model(**inputs, use_cache=False).logits, batch.labels)
        head = install_chunked_loss(model)
        try:
            chunked = micro_batch_loss(model, head, batch.model_inputs(), batch.labels, nothing, positions=batch.loss_positions)
            alone = sum(micro_batch_loss(model, head, b.model_inputs(), b.labels, nothing, positions=b.loss_positions)
                        for b in (collate(model, [ex]) for ex in rows))
        finally:
            del head.forward  # the module's own forward again
    assert torch.isfinite(full)
    assert chunked.item() == pytest.approx(full.item(), rel=1e-5)
    assert own.item() == pytest.approx(full.item(), rel=1e-5)
    assert alone.item() == pytest.approx(full.item(), rel=1e-5)


# --- the batch layout: padded rows only


def test_vision_language_models_take_padded_rows_and_refuse_padding_free_by_name():
    from ftui.config.load import demo_config
    from ftui.runner.batch_layout import batch_layout

    model = {"model_type": "qwen2_vl", "vision_config": {}}
    layout = batch_layout(demo_config(), model, "cpu")
    assert not layout.padding_free and not layout.sequence_lengths and "M-RoPE" in layout.why
    with pytest.raises(ValueError, match="padding_free is not supported for qwen2_vl vision-language models"):
        batch_layout(demo_config().model_copy(update={"padding_free": True}), model, "cpu")
    for key in ("packing", "neat_packing"):  # packed rows are padded rows (ftui.runner.media_packing)
        packed = batch_layout(demo_config().model_copy(update={key: True}), model, "cpu")
        assert not packed.padding_free and not packed.sequence_lengths
        with pytest.raises(ValueError, match=f"{key} is not supported for gemma3 vision-language models: Gemma 3 builds"):
            batch_layout(demo_config().model_copy(update={key: True}), {"model_type": "gemma3", "vision_config": {}}, "cpu")
    assert batch_layout(demo_config(), {"model_type": "llama"}, "cpu").padding_free  # text models unchanged


# --- speedups that walk the layers


def test_gradient_checkpointing_gives_the_same_gradients_and_liger_is_refused_by_name(qwen2, models):
    from ftui.runner.loss import token_loss_sum
    from ftui.runner.model import apply_speedups

    _model, make = qwen2
    rows = [make.example("what is it", " a square", [(56, 84)]), make.example("and this", " a circle", [(56, 56)])]
    grads = []
    for checkpointing in (False, True):
        model, _cfg = loaded("qwen2_vl", models, finetuning_type="full", freeze_vision_tower=False, gradient_checkpointing=checkpointing)
        model.train()
        batch = collate(model, rows)
        out = model(**batch.model_inputs(), use_cache=False).logits
        token_loss_sum(out, batch.labels).backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and any(n.startswith("model.visual.blocks.") for n in grads[0])
    for name, g in grads[0].items():
        assert torch.allclose(g, grads[1][name], rtol=1e-4, atol=1e-6), name
    with pytest.raises(ValueError, match="enable_liger_kernel is not supported for qwen2_vl"):
        apply_speedups(model, _cfg.model_copy(update={"enable_liger_kernel": True}))


def test_a_batch_without_images_runs_the_vision_tower_on_a_hidden_stand_in_that_changes_no_loss(qwen2):
    """LLaMA-Factory's fake image: FSDP and ZeRO-3 ranks must all gather the vision tower at
    every forward, so a micro batch without images gets one, masked out and unlabelled."""
    from ftui.runner.data import Collator
    from ftui.runner.loss import token_loss_sum

    model, make = qwen2
    rows = [make.example("no picture here", " none", []), make.example("nor here", " nothing at all", [])]
    batch = collate(model, rows)
    plain = Collator(0, loss_positions=True)(rows)  # as a text model's batch
    stand_in = batch.media.tensors
    assert stand_in["image_grid_thw"].tolist() == [[1, 2, 2]] and stand_in["pixel_values"].shape[0] == 4
    n = len(rows[0].input_ids)
    assert batch.input_ids[0, n:n + 3].tolist() == [make.tokenizer.convert_tokens_to_ids(t) for t in
                                                     ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")]
    assert batch.attention_mask[0, n:].sum() == 0 and (batch.labels[0, n:] == -100).all()
    assert (batch.real_tokens, batch.loss_tokens) == (plain.real_tokens, plain.loss_tokens)
    def cells(b):  # (row, column) of each loss position (flat indices into labels[:, 1:])
        width = b.input_ids.size(1) - 1
        return [(int(i) // width, int(i) % width) for i in b.loss_positions]

    assert cells(batch) == cells(plain)
    seen = []
    hook = model.model.visual.blocks[0].register_forward_hook(lambda *_: seen.append(True))
    try:
        with torch.no_grad():
            with_stand_in = token_loss_sum(model(**batch.model_inputs(), use_cache=False).logits, batch.labels)
            without = token_loss_sum(model(**plain.model_inputs(), use_cache=False).logits, plain.labels)
    finally:
        hook.remove()
    assert seen == [True]  # the tower ran once, for the stand-in
    assert with_stand_in.item() == pytest.approx(without.item(), rel=1e-5)


@pytest.mark.slow
def test_torch_compile_of_the_language_layers_gives_the_eager_loss_and_gradients(qwen2, models):
    """torch_compile compiles the decoder layers one by one: the language model's (inductor on
    the CPU here: about 35 s)."""
    from ftui.runner.loss import token_loss_sum
    from ftui.runner.model import apply_speedups

    _model, make = qwen2
    rows = [make.example("what is it", " a square", [(56, 84)]), make.example("and this", " a circle", [(56, 56)])]
    seen = []
    for compiled in (False, True):
        model, cfg = loaded("qwen2_vl", models, finetuning_type="full", torch_compile=compiled)
        apply_speedups(model, cfg)
        batch = collate(model, rows)
        loss = token_loss_sum(model(**batch.model_inputs(), use_cache=False).logits, batch.labels)
        loss.backward()
        seen.append((loss.item(), model.model.language_model.layers[0].mlp.up_proj.weight.grad.clone()))
    assert seen[1][0] == pytest.approx(seen[0][0], rel=1e-4)
    assert torch.allclose(seen[1][1], seen[0][1], rtol=1e-3, atol=1e-6)
