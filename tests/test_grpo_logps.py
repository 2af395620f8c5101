"""GRPO's per-token log-probabilities (ftui.runner.loss.micro_batch_token_logps): the chunked
output projection gives the same per-position values, entropies and gradients as full logits,
with the temperature dividing the logits."""

from __future__ import annotations

import contextlib

import pytest
import torch

from ftui.runner.data import IGNORE
from ftui.runner.loss import install_chunked_loss, micro_batch_token_logps


def tiny_model(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_token_logps_equal_full_logits_with_their_gradients(temperature):
    ids = torch.randint(1, 50, (3, 7), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[:, :3] = IGNORE
    labels[2, 5:] = IGNORE
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    results = []
    for chunked in (False, True):
        model = tiny_model()
        head = install_chunked_loss(model) if chunked else None
        logps, entropy = micro_batch_token_logps(model, head, inputs, labels, contextlib.nullcontext, temperature)
        (logps * torch.arange(logps.numel()).view_as(logps)).sum().backward()
        results.append((logps.detach(), entropy, model.lm_head.weight.grad.clone(), model.model.embed_tokens.weight.grad.clone()))
    (full, full_h, full_gw, full_ge), (ch, ch_h, ch_gw, ch_ge) = results
    assert full.shape == (3, 6) and not entropy.requires_grad
    assert torch.all(full[:, :2] == 0) and torch.all(full[2, 4:] == 0) and torch.all(full[0, 2:] < 0)
    torch.testing.assert_close(ch, full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ch_h, full_h, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ch_gw, full_gw, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ch_ge, full_ge, atol=1e-5, rtol=1e-4)


def test_the_temperature_divides_the_logits():
    model = tiny_model()
    ids = torch.randint(1, 50, (1, 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1] / 0.5
        want = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
        got, _entropy = micro_batch_token_logps(model, install_chunked_loss(model), {"input_ids": ids}, ids,
                                                contextlib.nullcontext, 0.5)
    torch.testing.assert_close(got[0], want, atol=1e-5, rtol=1e-5)
