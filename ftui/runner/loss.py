"""The token loss without full logits: cross-entropy from the last hidden states, in chunks.

A causal LM's output projection turns every position's hidden state into ``vocab`` logits;
with 128k-152k vocabularies (Llama 3, Qwen) the full logits of one micro batch plus their
fp32 copy and gradient are the largest single item of training memory (4,096 tokens x
151,936 x 4 bytes = 2.5 GB per copy). Here the model's own output projection computes the
summed cross-entropy of a chunk of positions at a time; each chunk's logits are freed at
once and recomputed in backward (activation checkpointing of the chunk), so at most one
chunk's logits exist.

It works by giving the output projection *module* a different ``forward`` for ftui's own
training and eval forwards (labels are handed to it just before): the module, its
parameters and their names stay as they are, so the engines' hooks (FSDP2's root
all-gather, DeepSpeed ZeRO-3's gather of a module's parameters around its forward and
backward), peft, tied embeddings, checkpoints and ``final/`` are untouched. The model's
``logits`` output then holds the loss sum of the micro batch. Models whose logits are
post-processed after the projection (Gemma 2/3's soft-capping) or whose projection is not a
plain linear layer keep the full-logits path. (Written by hand because transformers offers
no chunked loss hook for arbitrary causal LMs, and Liger's fused kernel is CUDA-only.)
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ftui.plan import LOSS_CHUNK_ELEMENTS
from ftui.runner.data import IGNORE

ELEMENTS_PER_CHUNK = LOSS_CHUNK_ELEMENTS  # logits per chunk: 64 Mi elements, 256 MiB in fp32 (the planner counts it)


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum (not mean) of next-token cross-entropy over the tokens that carry loss, from full logits."""
    vocab = logits.size(-1)
    return F.cross_entropy(
        logits[:, :-1].float().reshape(-1, vocab), labels[:, 1:].reshape(-1), ignore_index=IGNORE, reduction="sum"
    )


def chunk_tokens(vocab: int) -> int:
    return max(64, ELEMENTS_PER_CHUNK // max(1, vocab))


def _chunk_loss(head: nn.Linear, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = F.linear(hidden, head.weight, head.bias).float()
    return F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="sum")


def _chunked_forward(self: nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    labels = getattr(self, "_ftui_labels", None)
    if labels is None:  # any other use of the model: plain logits
        return F.linear(hidden, self.weight, self.bias)
    h = hidden[:, :-1].reshape(-1, hidden.size(-1))
    y = labels[:, 1:].reshape(-1)
    step = chunk_tokens(self.out_features)
    total = None
    for start in range(0, h.size(0), step):
        part = checkpoint(_chunk_loss, self, h[start:start + step], y[start:start + step], use_reentrant=False)
        total = part if total is None else total + part
    return total


def output_projection(model: nn.Module) -> nn.Module | None:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    getter = getattr(base, "get_output_embeddings", None)
    return getter() if getter is not None else None


def install_chunked_loss(model: nn.Module) -> bool:
    """Gives the model's output projection the chunked-loss forward; False where the model
    cannot take it (the full-logits path is used then)."""
    head = output_projection(model)
    config = getattr(model, "config", None)
    if type(head) is not nn.Linear or getattr(config, "final_logit_softcapping", None):
        return False
    head.forward = types.MethodType(_chunked_forward, head)
    head._ftui_chunked = True
    return True


def micro_batch_loss(model: nn.Module, head: nn.Module | None, inputs: dict[str, Any], labels: torch.Tensor,
                     autocast: Any) -> torch.Tensor:
    """The summed token loss of one micro batch through ``model`` (the engine's wrapper).
    ``head`` is the output projection when it computes the loss in chunks, else None."""
    if head is None:
        with autocast():
            logits = model(**inputs, use_cache=False).logits
        return token_loss_sum(logits, labels)
    head._ftui_labels = labels
    try:
        with autocast():
            return model(**inputs, use_cache=False).logits.float()
    finally:
        head._ftui_labels = None
