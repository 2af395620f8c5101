"""The loss from hidden states in chunks (never the full logits) equals the full-logits loss:
value and gradients on a model (untied and tied embeddings, masked labels, several
chunks), and the step losses of real runs under the single engine and FSDP (2 gloo ranks).
Every other engine test trains with it on (it is the default)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from conftest import steps_of, tiny_config, train_sync
from ftui.runner import loss as L
from test_gpu_readiness import tiny_llama
from tests.tolerances import close


def _loss_and_grads(model, head, ids, labels):
    model.zero_grad()
    value = L.micro_batch_loss(model, head, {"input_ids": ids}, labels, contextlib.nullcontext)
    value.backward()
    return value.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("tied", [False, True])
def test_chunked_loss_equals_the_full_logits_loss_and_its_gradients(tied, monkeypatch):
    model = tiny_llama(layers=2, hidden=64, vocab=1000)
    if tied:
        model.lm_head.weight = model.model.embed_tokens.weight
    ids = torch.randint(0, 1000, (3, 50), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[:, :12] = -100  # a masked prompt
    keys = set(model.state_dict())
    full, full_grads = _loss_and_grads(model, None, ids, labels)
    monkeypatch.setattr(L, "ELEMENTS_PER_CHUNK", 64 * 1000)  # 64 tokens a chunk: 3 chunks of 147 positions
    assert L.install_chunked_loss(model)
    head = L.output_projection(model)
    chunked, chunked_grads = _loss_and_grads(model, head, ids, labels)
    # a mean over 114 tokens summed in another order: up to a few dozen ulps (6e-8 each) apart
    assert chunked.item() == pytest.approx(full.item(), rel=1e-5)
    assert len(chunked_grads) == len(full_grads)
    for a, b in zip(full_grads, chunked_grads):
        assert close(b, a, 1e-5)  # fp32 rounding: another summation order
    # outside ftui's loss the model still returns its logits (chat, generation, saving)
    assert model(input_ids=ids).logits.shape == (3, 50, 1000)
    assert set(model.state_dict()) == keys  # checkpoints and final/ keep their names


def test_models_that_post_process_logits_keep_the_full_path():
    model = tiny_llama(layers=1)
    model.config.final_logit_softcapping = 30.0  # Gemma 2/3
    assert not L.install_chunked_loss(model)


@pytest.mark.dist
@pytest.mark.parametrize("engine", [pytest.param("single", marks=pytest.mark.slow), pytest.param("fsdp", marks=pytest.mark.slow)])  # CI time: the unit tests above check equality
def test_runs_with_chunked_and_full_logits_loss_give_the_same_curve(tmp_path, engine):
    curves, evals = {}, {}
    for chunked in (True, False):
        cfg = tiny_config(tmp_path / str(chunked), engine=engine, nproc_per_node=1 if engine == "single" else 2,
                          max_steps=6, chunked_loss=chunked, run_name=f"{engine}-{chunked}", max_samples=24,
                          val_size=0.25, eval_steps=3)
        _run, events, proc = train_sync(cfg)
        assert proc.returncode == 0, proc.stderr[-3000:]
        curves[chunked] = [e["loss"] for e in steps_of(events)]
        evals[chunked] = [e["eval_loss"] for e in events if e["event"] == "eval"]
    assert len(curves[True]) == 6
    assert curves[True] == pytest.approx(curves[False], rel=1e-5)
    assert len(evals[True]) == 2  # eval goes through the same loss path
    assert evals[True] == pytest.approx(evals[False], rel=1e-5)


def test_under_autocast_the_chunks_compute_in_the_autocast_type_as_the_full_path_does():
    model = tiny_llama(layers=2, hidden=64, vocab=1000)
    ids = torch.randint(0, 1000, (2, 40), generator=torch.Generator().manual_seed(2))
    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    model.zero_grad()
    full = L.micro_batch_loss(model, None, {"input_ids": ids}, ids, bf16)
    full.backward()
    full_grad = model.lm_head.weight.grad.clone()
    assert L.install_chunked_loss(model)
    model.zero_grad()
    chunked = L.micro_batch_loss(model, L.output_projection(model), {"input_ids": ids}, ids, bf16)
    chunked.backward()
    assert chunked.item() == pytest.approx(full.item(), rel=1e-4)
    grad = model.lm_head.weight.grad
    assert close(grad, full_grad, 2e-2)  # bf16 products, another order


def test_the_liger_flag_keeps_ftuis_chunks_off_cuda():
    """Liger's kernels are Triton GPU kernels: on a CPU tensor the hook computes the chunks itself."""
    model = tiny_llama(layers=1, hidden=64, vocab=1000)
    ids = torch.randint(0, 1000, (2, 30), generator=torch.Generator().manual_seed(3))
    full, _ = _loss_and_grads(model, None, ids, ids)
    head = L.install_chunked_loss(model, liger=True)
    assert head._ftui_liger
    value, _ = _loss_and_grads(model, head, ids, ids)
    assert value.item() == pytest.approx(full.item(), rel=1e-5)  # a sum over the tokens in another order


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: Liger's fused linear cross-entropy is a Triton kernel")
@pytest.mark.parametrize("tied", [False, True])
def test_liger_fused_linear_cross_entropy_equals_ftuis_chunks_on_cuda(tied):
    pytest.importorskip("liger_kernel", reason="the liger-kernel package is not installed (no ftui extra installs it)")
    results = {}
    for liger in (False, True):
        torch.manual_seed(0)
        model = tiny_llama(layers=2, hidden=64, vocab=1000).cuda()
        if tied:
            model.lm_head.weight = model.model.embed_tokens.weight
        ids = torch.randint(0, 1000, (3, 50), generator=torch.Generator().manual_seed(1)).cuda()
        labels = ids.clone()
        labels[:, :12] = -100
        head = L.install_chunked_loss(model, liger=liger)
        for precision, autocast in (("fp32", contextlib.nullcontext),
                                    ("bf16", lambda: torch.autocast("cuda", dtype=torch.bfloat16))):
            model.zero_grad()
            value = L.micro_batch_loss(model, head, {"input_ids": ids}, labels, autocast)
            value.backward()
            results[liger, precision] = (value.item(), [p.grad.clone() for p in model.parameters() if p.grad is not None])
    for precision, tol in (("fp32", 1e-4), ("bf16", 3e-2)):
        (ours, ours_grads), (theirs, their_grads) = results[False, precision], results[True, precision]
        assert theirs == pytest.approx(ours, rel=tol / 10)
        assert len(ours_grads) == len(their_grads)
        for a, b in zip(ours_grads, their_grads):
            assert close(b, a, tol)


def test_an_eval_forward_computes_no_gradient():
    """Under no_grad (the periodic eval) the chunks give the loss alone: no weight-gradient
    product is run for a weight that still requires grad."""
    import torch
    from torch import nn

    from ftui.runner import loss as loss_mod

    head = nn.Linear(16, 300, bias=False)
    hidden = torch.randn(2, 9, 16)
    labels = torch.randint(0, 300, (2, 9))
    calls = []
    original = loss_mod._add_chunk_grads
    loss_mod._add_chunk_grads = lambda *a: calls.append(1) or original(*a)
    try:
        head.forward = loss_mod.types.MethodType(loss_mod._chunked_forward, head)
        head._ftui_labels = labels
        with torch.no_grad():
            value = head(hidden)
        assert not calls
        with torch.enable_grad():
            assert torch.allclose(head(hidden), value)
        assert calls  # with gradients on, the same pass computes them
    finally:
        loss_mod._add_chunk_grads = original
    expected = loss_mod.token_loss_sum(nn.functional.linear(hidden, head.weight), labels)
    assert torch.allclose(value, expected, rtol=1e-5)


@pytest.mark.parametrize("dtype,bias", [(torch.float32, False), (torch.float32, True), (torch.bfloat16, True)])
def test_every_chunk_reuses_one_pair_of_buffers_and_gets_f_linears_logits(dtype, bias):
    """ChunkBuffers: the product in the compute type and its fp32 copy, written again by each
    chunk (a fresh chunk-sized tensor per chunk cost more than its matrix product on the CPU)."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(300, 16, generator=gen).to(dtype)
    b = torch.randn(300, generator=gen).to(dtype) if bias else None
    buffers = L.ChunkBuffers(8, 300, dtype, torch.device("cpu"))
    seen = set()
    for rows in (8, 8, 5):  # the last chunk is shorter
        h = torch.randn(rows, 16, generator=gen).to(dtype)
        logits = buffers.logits(h, w, b)
        assert logits.dtype == torch.float32 and torch.equal(logits, torch.nn.functional.linear(h, w, b).float())
        assert logits.data_ptr() == buffers.fp32.data_ptr()
        back = buffers.in_compute_type(logits)
        assert back.dtype == dtype and back.data_ptr() == buffers.product.data_ptr()
        seen.add(buffers.product.data_ptr())
    assert len(seen) == 1
