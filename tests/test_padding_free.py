"""Padding-free batches (ftui.runner.batch_layout, ftui.runner.data.Collator): a micro batch's
examples end to end in one row, each with its own positions and attending to itself alone,
give the padded batch's loss and gradients (to fp32 rounding: tests/tolerances.py) without
computing padding; SDPA run per example on the CPU (ftui.runner.attention.per_example_sdpa)
gives the block-diagonal mask's attention; the loss computed only where labels are
(``Batch.loss_positions``) gives the loss over every position; where padding-free is on by
default, off with its reason, or refused by name."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

from conftest import steps_of, tiny_config, train_sync
from ftui.config.load import demo_config
from ftui.config.model_checks import padding_free_model_problems
from ftui.config.problems import ConfigError
from ftui.config.rules import stage_problems
from ftui.runner import attention as A
from ftui.runner.batch_layout import batch_layout
from ftui.runner.data import IGNORE, Collator, join_row, pack_examples
from ftui.runner.loss import install_chunked_loss, micro_batch_loss
from tests.test_flash_attn import VOCAB, examples  # random examples with a prompt and an answer
from tests.tolerances import close


def tiny_llama(implementation: str):
    """A Llama with grouped K/V heads (4 over 2) and the same weights for every implementation."""
    from transformers import LlamaConfig, LlamaForCausalLM

    A.register()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM._from_config(cfg, attn_implementation=implementation)


def loss_and_grads(model, batch, chunked: bool = True):
    model.zero_grad()
    head = install_chunked_loss(model) if chunked else None
    loss = micro_batch_loss(model, head, batch.model_inputs(), batch.labels, contextlib.nullcontext,
                            positions=batch.loss_positions)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


# --- the batch


def test_a_padding_free_batch_is_one_row_with_the_padded_batch_s_counts():
    data = examples(4, seed=1)
    padded = Collator(0, loss_positions=True)(data)
    flat = Collator(0, padding_free=True, loss_positions=True)(data)
    total = sum(len(e.input_ids) for e in data)
    assert flat.input_ids.shape == (1, total) and padded.input_ids.shape[0] == 4
    assert flat.attention_mask is None and padded.attention_mask is not None
    assert (flat.real_tokens, flat.trainable_tokens, flat.loss_tokens) == (padded.real_tokens, padded.trainable_tokens,
                                                                            padded.loss_tokens)
    # each example's positions restart at 0, and its first token is not predicted from the one before
    starts = [0]
    for e in data[:-1]:
        starts.append(starts[-1] + len(e.input_ids))
    pos = flat.position_ids[0].tolist()
    assert [i for i, p in enumerate(pos) if p == 0] == starts
    assert all(flat.labels[0, s].item() == IGNORE for s in starts)
    # the same next-token targets, example by example
    targets = lambda labels: sorted(t for t in labels[:, 1:].reshape(-1).tolist() if t != IGNORE)  # noqa: E731
    assert targets(flat.labels) == targets(padded.labels)
    # the loss positions name exactly the labelled shifted positions
    for b in (flat, padded):
        shifted = b.labels[:, 1:].reshape(-1)
        assert b.loss_positions.tolist() == [i for i, t in enumerate(shifted.tolist()) if t != IGNORE]
        assert len(b.loss_positions) == b.loss_tokens


def test_padding_free_keeps_packed_rows_own_positions_and_pads_to_the_multiple_as_its_own_sequence():
    rows = pack_examples(examples(9, seed=2), 64)
    flat = Collator(0, pad_to_multiple=8, sequence_lengths=True, padding_free=True)(rows)
    joined = join_row(rows)
    n = len(joined.input_ids)
    assert flat.position_ids[0, :n].tolist() == joined.position_ids
    width = flat.input_ids.size(1)
    assert width % 8 == 0 and width - n < 8
    lengths = torch.diff(flat.cu_seqlens).tolist()
    assert sum(lengths) == width and len(lengths) == 9 + (width > n)  # every example, then the padding


# --- the attention


@pytest.mark.parametrize("rows", [1, 3])
def test_sdpa_per_example_gives_the_block_diagonal_mask_s_attention_and_gradients(rows):
    g = torch.Generator().manual_seed(3)
    length = 24
    per_row = [[5, 11, 8], [24], [3, 3, 10, 8]][:rows] if rows > 1 else [[7, 1, 16]]
    cu = torch.tensor([0] + [n for r in per_row for n in r]).cumsum(0).to(torch.int32)
    q = torch.randn(rows, 4, length, 16, generator=g, requires_grad=True)
    k = torch.randn(rows, 2, length, 16, generator=g, requires_grad=True)
    v = torch.randn(rows, 2, length, 16, generator=g, requires_grad=True)
    module = type("M", (), {"is_causal": True, "training": True})()
    out = A.per_example_sdpa(module, q, k, v, 0.0, 0.25, {"cu_seq_lens_q": cu, "max_length_q": 24})
    # the reference: one mask, block-diagonal and causal, over each whole row
    mask = torch.zeros(rows, 1, length, length, dtype=torch.bool)
    for r, lengths in enumerate(per_row):
        a = 0
        for n in lengths:
            mask[r, 0, a:a + n, a:a + n] = torch.ones(n, n, dtype=torch.bool).tril()
            a += n
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=mask,
                                         scale=0.25).transpose(1, 2)
    assert out.shape == ref.shape == (rows, length, 4, 16)
    assert close(out, ref, rel=1e-5)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    ref_grads = torch.autograd.grad(ref.square().sum(), (q, k, v))
    assert all(close(a, b, rel=1e-5) for a, b in zip(grads, ref_grads))


def test_sdpa_per_example_leaves_to_the_mask_what_it_cannot_keep_apart():
    q = torch.randn(1, 2, 8, 4)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    module = type("M", (), {"is_causal": True, "training": False})()
    assert A.per_example_sdpa(module, q, q, q, 0.0, None, {}) is None  # no lengths
    assert A.per_example_sdpa(module, q, q, q, 0.0, None, {"cu_seq_lens_q": cu, "is_causal": False}) is None
    assert A.per_example_sdpa(module, q, q, q, 0.0, None, {"cu_seq_lens_q": cu, "max_length_q": 8, "sliding_window": 4}) is None
    assert A.per_example_sdpa(module, q, q[:, :, :3], q[:, :, :3], 0.0, None, {"cu_seq_lens_q": cu}) is None  # a KV cache
    assert A.per_example_sdpa(module, q, q, q, 0.0, None, {"cu_seq_lens_q": cu, "max_length_q": 8, "sliding_window": 8}) is not None


def test_the_per_example_mask_is_skipped_only_where_every_attention_call_runs_per_example():
    from transformers.masking_utils import causal_mask_function

    args = dict(batch_size=1, q_length=6, kv_length=6, mask_function=causal_mask_function, device=torch.device("cpu"))
    with A.lengths_given():
        assert A.per_example_mask(**args) is None
        assert A.per_example_mask(**dict(args, local_size=4, allow_is_causal_skip=False)) is not None  # a window
        assert A.per_example_mask(**dict(args, kv_length=9, q_offset=3, allow_is_causal_skip=False)) is not None  # a cache
    assert not A._LENGTHS_GIVEN.get()
    packed = dict(args, allow_is_causal_skip=False)
    assert A.per_example_mask(**packed) is not None


def test_a_call_that_cannot_run_per_example_is_refused_where_no_mask_was_built():
    q = torch.randn(1, 2, 8, 4)
    module = type("M", (), {"is_causal": True, "training": False})()
    with A.lengths_given(), pytest.raises(RuntimeError, match="built no mask"):
        A.sdpa_per_example_attention(module, q, q, q, None, cu_seq_lens_q=torch.tensor([0, 8], dtype=torch.int32),
                                     is_causal=False)


# --- the model: padded, padding-free with SDPA per example, padding-free with the mask


def test_padding_free_gives_the_padded_batch_s_loss_and_gradients():
    data = examples(5, seed=4)
    padded_batch = Collator(0, loss_positions=True)(data)
    loss0, grads0 = loss_and_grads(tiny_llama("sdpa"), padded_batch)
    full0, full_grads0 = loss_and_grads(tiny_llama("sdpa"), padded_batch, chunked=False)
    # SDPA per example (with the block-diagonal mask built, and without it: lengths_given), and
    # transformers' SDPA with that mask alone
    for implementation, lengths, apart in ((A.SDPA_PER_EXAMPLE, True, False), (A.SDPA_PER_EXAMPLE, True, True),
                                           ("sdpa", False, False)):
        batch = Collator(0, sequence_lengths=lengths, padding_free=True, loss_positions=True)(data)
        with A.lengths_given() if apart else contextlib.nullcontext():
            loss, grads = loss_and_grads(tiny_llama(implementation), batch)
        assert close(loss, loss0, rel=1e-5), (implementation, apart)
        assert all(close(grads[n], grads0[n], rel=1e-4) for n in grads0), (implementation, apart)
    # and the loss where labels are alone is the loss over every position
    assert close(loss0, full0, rel=1e-5) and all(close(grads0[n], full_grads0[n], rel=1e-4) for n in grads0)


def test_the_loss_positions_leave_the_chunked_loss_unchanged():
    data = examples(4, seed=5)
    with_positions = Collator(0, loss_positions=True)(data)
    without = Collator(0)(data)
    assert without.loss_positions is None
    loss1, grads1 = loss_and_grads(tiny_llama("sdpa"), with_positions)
    loss2, grads2 = loss_and_grads(tiny_llama("sdpa"), without)
    assert close(loss1, loss2, rel=1e-5) and all(close(grads1[n], grads2[n], rel=1e-4) for n in grads1)


# --- where it is on


LLAMA = {"model_type": "llama"}


@pytest.mark.parametrize("overrides,model,device,on,sequence_lengths,implementation,why", [
    ({}, LLAMA, "cpu", True, True, A.SDPA_PER_EXAMPLE, "on by default"),
    ({"flash_attn": "sdpa"}, LLAMA, "cpu", True, True, A.SDPA_PER_EXAMPLE, "on by default"),
    ({}, LLAMA, "cuda", False, False, None, "flash_attn: fa2"),
    ({"flash_attn": "fa2"}, LLAMA, "cuda", True, True, A.IMPLEMENTATION, "on by default"),
    ({"padding_free": True}, LLAMA, "cuda", True, False, None, "padding_free: true"),
    ({"padding_free": False}, LLAMA, "cpu", False, False, None, "padding_free: false"),
    ({"padding_free": False, "packing": True}, LLAMA, "cpu", False, True, A.SDPA_PER_EXAMPLE, "padding_free: false"),
    ({"flash_attn": "disabled"}, LLAMA, "cpu", False, False, "eager", "eager attention"),
    ({}, {"model_type": "gpt2"}, "cpu", False, False, None, "gpt2"),
    ({"stage": "dpo"}, LLAMA, "cpu", False, False, None, "stage dpo reads each row as a whole"),
])
def test_padding_free_is_on_where_it_is_exact_and_fast_and_says_why_not(overrides, model, device, on, sequence_lengths,
                                                                         implementation, why):
    cfg = demo_config().model_copy(update=overrides)  # fa2 on a GPU: validation here would refuse it on this CPU
    layout = batch_layout(cfg, model, device)
    assert (layout.padding_free, layout.sequence_lengths, layout.attn_implementation) == (on, sequence_lengths, implementation)
    assert why in layout.why


def test_padding_free_true_is_refused_by_name_where_it_would_not_be_exact(tmp_path):
    with pytest.raises(ConfigError) as err:
        demo_config(stage="dpo", padding_free=True)
    assert [p.field for p in err.value.problems] == ["padding_free"] and "stage dpo" in err.value.problems[0].message
    assert stage_problems(demo_config(stage="dpo", padding_free=False)) == []
    problems = padding_free_model_problems(demo_config(padding_free=True), {"model_type": "gpt2"})
    assert [p.field for p in problems] == ["padding_free"] and "gpt2" in problems[0].message
    assert padding_free_model_problems(demo_config(padding_free=True), LLAMA) == []
    with pytest.raises(ValueError, match="gpt2"):  # a hub model's config, read only at load
        batch_layout(demo_config(padding_free=True), {"model_type": "gpt2"}, "cpu")


# --- a run


def test_a_run_is_padding_free_by_default_with_the_padded_run_s_losses(tmp_path):
    runs = {}
    for value in (None, False):
        cfg = tiny_config(tmp_path / str(value), padding_free=value, max_steps=4, max_samples=16)
        run_dir, events, proc = train_sync(cfg)
        assert proc.returncode == 0, (run_dir / "train.log").read_text()[-3000:]
        start = next(e for e in events if e["event"] == "run_start")
        assert start["padding_free"] is (value is None), start["padding_free_why"]
        assert start["attention"] == ("sdpa, each example alone" if value is None else "sdpa")
        runs[value] = steps_of(events)
    flat, padded = runs[None], runs[False]
    assert [s["tokens"] for s in flat] == [s["tokens"] for s in padded]
    # four steps of the same updates: fp32 rounding of other matrix shapes, carried through three updates
    assert all(abs(a["loss"] - b["loss"]) <= 1e-4 * abs(b["loss"]) + 1e-6 for a, b in zip(flat, padded))
