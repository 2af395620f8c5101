"""The token loss without full logits: cross-entropy from the last hidden states, in chunks.

A causal LM's output projection turns every position's hidden state into ``vocab`` logits;
with 128k-152k vocabularies (Llama 3, Qwen) the full logits of one micro batch plus their
fp32 copy and gradient are the largest single item of training memory (4,096 tokens x
151,936 x 4 bytes = 2.5 GB per copy). Here the model's own output projection computes the
summed cross-entropy of a chunk of positions at a time and, in the same pass, that chunk's
gradients (``ChunkedLinearCrossEntropy``); each chunk's logits are freed at once, so at most
one chunk's logits exist and nothing is recomputed in backward.

It works by giving the output projection *module* a different ``forward`` for ftui's own
training and eval forwards (labels are handed to it just before): the module, its
parameters and their names stay as they are, so the engines' hooks (FSDP2's root
all-gather, DeepSpeed ZeRO-3's gather of a module's parameters around its forward and
backward), peft, tied embeddings, checkpoints and ``final/`` are untouched. The model's
``logits`` output then holds the loss sum of the micro batch. Models whose logits are
post-processed after the projection (Gemma 2/3's soft-capping) or whose projection is not a
plain linear layer keep the full-logits path. (Written by hand because transformers offers
no chunked loss hook for arbitrary causal LMs, and Liger's fused kernel is CUDA-only.)

With ``enable_liger_kernel: true`` on a CUDA device the same hook calls Liger's fused linear
cross-entropy (Triton kernels, the chunk size chosen from the hidden size) instead of
``ChunkedLinearCrossEntropy``: same sum, same place, so everything above still holds.

The preference stages (dpo, kto) need each answer's summed log-probability instead of one
loss sum: the same hook, told so (``micro_batch_logps``), returns them per row, computed by
``ChunkedLinearLogProbs``, whose backward recomputes each chunk's logits (the loss is a
nonlinear function of the sums, so the gradients cannot be taken in forward). Liger offers
no per-token log-probability, so these are always ftui's own chunks.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ftui.plan.loss_chunks import LIGER_CHUNK_FACTOR, LOSS_CHUNK_ELEMENTS
from ftui.runner.data import IGNORE

LIGER_CHUNK_MEM = LIGER_CHUNK_FACTOR
ELEMENTS_PER_CHUNK = LOSS_CHUNK_ELEMENTS  # logits per chunk: 64 Mi elements, 256 MiB in fp32 (the planner counts it)


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum (not mean) of next-token cross-entropy over the tokens that carry loss, from full logits."""
    vocab = logits.size(-1)
    return F.cross_entropy(
        logits[:, :-1].float().reshape(-1, vocab), labels[:, 1:].reshape(-1), ignore_index=IGNORE, reduction="sum"
    )


def sequence_logps(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: the summed log-probability of the labelled next tokens (fp32) and how many there are
    (LLaMA-Factory's get_batch_logps), from full logits."""
    target = labels[:, 1:]
    mask = target != IGNORE
    token_logps = -F.cross_entropy(logits[:, :-1].float().transpose(1, 2), target.clamp(min=0), reduction="none")
    return (token_logps * mask).sum(-1), mask.sum(-1)


def chunk_tokens(vocab: int) -> int:
    return max(64, ELEMENTS_PER_CHUNK // max(1, vocab))


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of ``hidden @ weight.T (+ bias)`` against ``labels``, a chunk of
    positions at a time, with the gradients computed in the same pass (as Liger's fused
    linear cross-entropy does): each chunk's logits give their softmax gradient at once, which
    gives the chunk's gradient for the hidden states and adds to the weight's gradient; the
    logits are then freed. Backward only scales the kept gradients by the incoming one, so
    the projection costs the same three matrix products as the full-logits path and nothing
    is recomputed. The products run in the autocast type when autocast is on (what the full
    path's ``F.linear`` would use), the softmax and the loss in fp32."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, chunk, dtype):  # noqa: D102
        need_h, need_w = hidden.requires_grad, weight.requires_grad
        need_b = bias is not None and bias.requires_grad
        w = weight.to(dtype)
        b = bias.to(dtype) if bias is not None else None
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        buffers = ChunkBuffers(min(chunk, hidden.size(0)), w.size(0), dtype, hidden.device)
        for start in range(0, hidden.size(0), chunk):
            h = hidden[start:start + chunk].to(dtype)
            y = labels[start:start + chunk]
            logits = buffers.logits(h, w, b)
            valid = y != IGNORE
            target = y.clamp(min=0)
            picked, sums, _ = _exp_in_place(logits, target)
            total += ((sums.log() - picked) * valid).sum()
            if not (need_h or need_w or need_b):
                continue
            # softmax - one-hot, zero on unlabelled rows: dividing those by inf zeroes them in
            # the same pass as the others' division (one pass over the chunk fewer)
            d = logits.div_(torch.where(valid, sums, torch.inf)[:, None])
            d[torch.arange(d.size(0), device=d.device), target] -= valid.to(d.dtype)
            grad_w = _add_chunk_grads(buffers.in_compute_type(d), h, w, start, grad_h, grad_w, grad_b)
            del logits, d
        ctx.save_for_backward(*(t if t is not None else torch.empty(0) for t in (grad_h, grad_w, grad_b)))
        ctx.present = (need_h, need_w, need_b)
        ctx.dtypes = (weight.dtype, bias.dtype if bias is not None else None)
        return total

    @staticmethod
    def backward(ctx, grad_out):  # noqa: D102
        grad_h, grad_w, grad_b = ctx.saved_tensors
        need_h, need_w, need_b = ctx.present
        w_dtype, b_dtype = ctx.dtypes
        return (grad_h * grad_out.to(grad_h.dtype) if need_h else None,
                (grad_w * grad_out).to(w_dtype) if need_w else None,
                (grad_b * grad_out).to(b_dtype) if need_b else None,
                None, None, None)


def label_logps(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor,
                chunk: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position: the fp32 log-probability of its label under ``hidden @ weight.T (+ bias)``
    (0 where the label is IGNORE) and the log-sum-exp of its logits, a chunk at a time."""
    w = weight.to(dtype)
    b = bias.to(dtype) if bias is not None else None
    logps = torch.empty(hidden.size(0), dtype=torch.float32, device=hidden.device)
    lse = torch.empty_like(logps)
    buffers = ChunkBuffers(min(chunk, hidden.size(0)), w.size(0), dtype, hidden.device)
    for start in range(0, hidden.size(0), chunk):
        y = labels[start:start + chunk]
        logits = buffers.logits(hidden[start:start + chunk].to(dtype), w, b)
        picked, sums, top = _exp_in_place(logits, y.clamp(min=0))
        del logits
        log_sums = sums.log()
        logps[start:start + chunk] = (picked - log_sums) * (y != IGNORE)
        lse[start:start + chunk] = top + log_sums
    return logps, lse


class ChunkedLinearLogProbs(torch.autograd.Function):
    """Per position, the log-probability of its label under ``hidden @ weight.T (+ bias)`` (0
    where the label is IGNORE), a chunk of positions at a time: the preference stages' answer
    log-probabilities without full logits.

    Unlike the summed cross-entropy above, the losses built on these (DPO's, KTO's: nonlinear
    functions of each answer's sum) are not known while forward runs, so each position's
    gradient only arrives in backward: forward keeps one log-sum-exp per position and frees
    every chunk's logits; backward recomputes each chunk's logits, turns them into
    ``grad x (one-hot - softmax)`` in place, and from that gives the chunk's rows of the hidden
    states' gradient and adds to the weight's and bias's (fp32 accumulators), as the
    cross-entropy does. One chunk's logits at a time in both passes, at the cost of a second
    logits product. The products run in the autocast type when autocast is on, the softmax in
    fp32. Written by hand: no library offers a chunked per-token log-probability with its
    backward on the CPU (Liger's kernels are CUDA-only and give a summed loss)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, chunk, dtype):  # noqa: D102
        logps, lse = label_logps(hidden, weight, bias, labels, chunk, dtype)
        # the weight as F.linear keeps it: the engines gather it again for backward (FSDP2's
        # and ZeRO-3's pre-backward hooks on the module's output)
        ctx.save_for_backward(hidden, weight, bias, labels, lse)
        ctx.chunk, ctx.dtype = chunk, dtype
        return logps

    @staticmethod
    def backward(ctx, grad_out):  # noqa: D102
        hidden, weight, bias, labels, lse = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        chunk, dtype = ctx.chunk, ctx.dtype
        w = weight.to(dtype)
        b = bias.to(dtype) if bias is not None else None
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
        buffers = ChunkBuffers(min(chunk, hidden.size(0)), w.size(0), dtype, hidden.device)
        for start in range(0, hidden.size(0), chunk):
            h = hidden[start:start + chunk].to(dtype)
            y = labels[start:start + chunk]
            scale = grad_out[start:start + chunk].float() * (y != IGNORE)
            d = buffers.logits(h, w, b).sub_(lse[start:start + chunk, None]).exp_()  # the softmax, in place
            d[torch.arange(d.size(0), device=d.device), y.clamp(min=0)] -= 1.0
            d *= -scale[:, None]  # d log p(label) / d logits = one-hot - softmax
            grad_w = _add_chunk_grads(buffers.in_compute_type(d), h, w, start, grad_h, grad_w, grad_b)
            del d
        return (grad_h, grad_w.to(weight.dtype) if need_w else None, grad_b.to(bias.dtype) if need_b else None,
                None, None, None)


class ChunkBuffers:
    """One chunk's logits buffers, reused by every chunk of a pass: the product in the compute
    type and its fp32 copy (the same tensor in fp32). Allocating them afresh for each chunk cost
    more than the chunk's matrix product on the CPU: a buffer that large is mapped from the OS on
    allocation and every page faulted in on first write (a 441 x 151,936 product: 295 ms into a
    new tensor, 165 ms into a reused one). On CUDA the caching allocator reuses the blocks
    anyway; the buffers change nothing there. At most two buffers a pass, as the planner counts."""

    def __init__(self, rows: int, vocab: int, dtype: torch.dtype, device: torch.device):
        self.product = torch.empty((rows, vocab), dtype=dtype, device=device)
        self.fp32 = self.product if dtype == torch.float32 else torch.empty((rows, vocab), dtype=torch.float32, device=device)

    def logits(self, h: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        """``h @ w.T (+ b)`` in the compute type (the kernels F.linear calls), as fp32: a view of
        the fp32 buffer, valid until the next call."""
        n = h.size(0)
        product = self.product[:n]
        if b is None:
            torch.mm(h, w.t(), out=product)
        else:
            torch.addmm(b, h, w.t(), out=product)
        return product if self.fp32 is self.product else self.fp32[:n].copy_(product)

    def in_compute_type(self, d: torch.Tensor) -> torch.Tensor:
        """The chunk's fp32 logit gradient ``d`` cast to the compute type, into the product
        buffer (free by now); ``d`` itself in fp32."""
        return d if self.fp32 is self.product else self.product[:d.size(0)].copy_(d)


def _exp_in_place(logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Shifts a chunk's fp32 logits by each row's maximum and exponentiates them in place, so
    that a chunk holds one fp32 copy of them (torch.logsumexp would allocate a second,
    chunk-sized buffer for its exponentials). Returns each row's shifted logit of its target,
    the sum of its exponentials and the shift: log p(target) = picked - log(sums)."""
    top = logits.amax(dim=-1, keepdim=True)
    logits.sub_(top)
    picked = logits.gather(1, target[:, None]).squeeze(1)
    return picked, logits.exp_().sum(dim=-1), top.squeeze(1)


def _add_chunk_grads(d: torch.Tensor, h: torch.Tensor, w: torch.Tensor, start: int, grad_h: torch.Tensor | None,
                     grad_w: torch.Tensor | None, grad_b: torch.Tensor | None) -> torch.Tensor | None:
    """From a chunk's gradient of its logits ``d`` (in the compute type): the chunk's rows of
    the hidden states' gradient, and its part of the weight's and bias's (fp32 accumulators).
    Returns the weight's accumulator (on CUDA a new tensor, see _accumulate_fp32)."""
    if grad_h is not None:
        grad_h[start:start + d.size(0)] = (d @ w).to(grad_h.dtype)
    if grad_w is not None:
        grad_w = _accumulate_fp32(grad_w, d.t(), h)
    if grad_b is not None:
        grad_b += d.float().sum(0)
    return grad_w


_FP32_OUT_MM: bool | None = None  # whether this torch's CUDA addmm takes out_dtype (read once)


def _accumulate_fp32(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``acc + a @ b`` into the fp32 accumulator, once per chunk: in place when the product
    is in fp32; on CUDA a half-precision product accumulates into fp32 inside the matrix
    product (``addmm`` with ``out_dtype``); otherwise through a half-precision product and
    its fp32 copy. The accumulator is vocab x hidden, so what a chunk costs beyond its
    product is passes over it: three here against six for the copy-and-add, measured as
    the larger part of the loss's time at Qwen's vocabulary on an H100."""
    global _FP32_OUT_MM
    if a.dtype == torch.float32:
        return acc.addmm_(a, b)
    if a.is_cuda and _FP32_OUT_MM is not False:
        try:
            out = torch.addmm(acc, a, b, out_dtype=torch.float32)
            _FP32_OUT_MM = True
            return out
        except (TypeError, RuntimeError):  # an older torch: the copy-and-add below
            _FP32_OUT_MM = False
    acc += (a @ b).float()
    return acc


def _compute_dtype(hidden: torch.Tensor) -> torch.dtype:
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return hidden.dtype


def liger_loss_sum(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor,
                   dtype: torch.dtype) -> torch.Tensor:
    """Liger's fused linear cross-entropy, summed over the labelled tokens: the matrix
    products in ``dtype`` (the weight cast as autocast would), gradients accumulated in fp32."""
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction

    b = bias.to(dtype) if bias is not None else None
    args = (hidden.to(dtype).contiguous(), weight.to(dtype), labels.contiguous(), b,
            None,  # ce_weight
            IGNORE,  # ignore_index
            0.0, 0.0,  # lse_square_scale, label_smoothing
            "sum",  # reduction
            None,  # softcap
            False,  # return_z_loss
            torch.float32)  # accum_dtype
    try:  # chunks of 8x the hidden states' size: fewer fp32 weight-gradient accumulations
        loss = LigerFusedLinearCrossEntropyFunction.apply(
            *args, False, False, False, None, None,  # token scaling, accuracy, predicted tokens, ce_impl, ce_mode
            LIGER_CHUNK_MEM)
    except TypeError:  # a Liger before chunk_mem_const: its own chunk size
        loss = LigerFusedLinearCrossEntropyFunction.apply(*args)
    return (loss[0] if isinstance(loss, tuple) else loss).float()


def _chunked_forward(self: nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    labels = getattr(self, "_ftui_labels", None)
    if labels is None:  # any other use of the model: plain logits
        return F.linear(hidden, self.weight, self.bias)
    h = hidden[:, :-1].reshape(-1, hidden.size(-1))
    y = labels[:, 1:].reshape(-1)
    positions = getattr(self, "_ftui_positions", None)
    if positions is not None and positions.numel() and not getattr(self, "_ftui_logps", False):  # logps: summed per row, all positions
        # logits only where a label is: a prompt's and padding's positions add nothing to the
        # loss nor to any gradient (their rows of the softmax gradient are zero), so leaving
        # them out changes the sum only by float rounding and saves their share of the
        # projection's three products (the prompts: 19 % of alpaca_en_demo's tokens with the demo tokenizer)
        h, y = h.index_select(0, positions), y.index_select(0, positions)
    dtype = _compute_dtype(hidden)  # read before autocast is switched off for the explicit casts below
    with torch.autocast(hidden.device.type, enabled=False):
        if getattr(self, "_ftui_logps", False) == "tokens":
            return position_logps(self, h, y, dtype, hidden.size(0))
        if getattr(self, "_ftui_logps", False):
            return row_logps(h, self.weight, self.bias, y, chunk_tokens(self.out_features), dtype, hidden.size(0))
        if getattr(self, "_ftui_liger", False) and h.is_cuda:
            return liger_loss_sum(h, self.weight, self.bias, y, dtype)
        weight, bias = self.weight, self.bias
        if not torch.is_grad_enabled():  # an eval: the loss alone (the weight still requires grad)
            h, weight, bias = h.detach(), weight.detach(), bias.detach() if bias is not None else None
        return ChunkedLinearCrossEntropy.apply(h, weight, bias, y, chunk_tokens(self.out_features), dtype)


def row_logps(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor, chunk: int,
              dtype: torch.dtype, rows: int) -> torch.Tensor:
    """Per row of the batch: the summed log-probability of its labels (fp32), from the
    flattened positions ``h``. Without gradients (a reference model, an eval, KTO's KL rows)
    nothing is kept for a backward."""
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (h, weight, bias))
    if needs_grad:
        logps = ChunkedLinearLogProbs.apply(h, weight, bias, labels, chunk, dtype)
    else:
        logps, _ = label_logps(h, weight, bias, labels, chunk, dtype)
    return logps.view(rows, -1).sum(-1)


def position_logps(head: nn.Module, h: torch.Tensor, labels: torch.Tensor, dtype: torch.dtype, rows: int) -> torch.Tensor:
    """Per position (rows, T-1): the fp32 log-probability of its label under the logits divided
    by the head's ``_ftui_temperature`` (differentiable through the scaled weight), 0 where the
    label is IGNORE; each position's entropy of the same distribution, without gradients, is
    left on the head (``_ftui_entropy``) for the caller."""
    temperature = getattr(head, "_ftui_temperature", 1.0)
    weight, bias = head.weight, head.bias
    if temperature != 1.0:
        weight = weight / temperature
        bias = bias / temperature if bias is not None else None
    chunk = chunk_tokens(head.out_features)
    with torch.no_grad():
        head._ftui_entropy = position_entropy(h.detach(), weight.detach(), bias.detach() if bias is not None else None,
                                              chunk, dtype).view(rows, -1)
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (h, weight, bias))
    if needs_grad:
        logps = ChunkedLinearLogProbs.apply(h, weight, bias, labels, chunk, dtype)
    else:
        logps, _ = label_logps(h, weight, bias, labels, chunk, dtype)
    return logps.view(rows, -1)


def position_entropy(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, chunk: int,
                     dtype: torch.dtype) -> torch.Tensor:
    """Per position, the entropy (fp32) of the softmax of ``hidden @ weight.T (+ bias)``, a chunk at a time."""
    w = weight.to(dtype)
    b = bias.to(dtype) if bias is not None else None
    out = torch.empty(hidden.size(0), dtype=torch.float32, device=hidden.device)
    for start in range(0, hidden.size(0), chunk):
        logps = torch.log_softmax(F.linear(hidden[start:start + chunk].to(dtype), w, b).float(), dim=-1)
        out[start:start + chunk] = -(logps.exp() * logps).sum(-1)
    return out


def full_position_logps(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """From full logits: per position (rows, T-1) the log-probability of its label under
    logits / ``temperature`` (0 where IGNORE) and, without gradients, the entropy."""
    target = labels[:, 1:]
    logps = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    picked = logps.gather(-1, target.clamp(min=0)[..., None]).squeeze(-1) * (target != IGNORE)
    with torch.no_grad():
        entropy = -(logps.exp() * logps).sum(-1)
    return picked, entropy


def micro_batch_token_logps(model: nn.Module, head: nn.Module | None, inputs: dict[str, Any], labels: torch.Tensor,
                            autocast: Any, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position of one micro batch (rows, T-1): the log-probability of each labelled next
    token under the logits divided by ``temperature`` (GRPO's), 0 elsewhere, and the entropy
    of each position's distribution (no gradients). In chunks through ``head`` when given,
    else from full logits."""
    if head is None:
        return full_position_logps(_forward(model, None, inputs, labels, autocast, logps=False), labels, temperature)
    head._ftui_temperature = temperature
    try:
        logps = _forward(model, head, inputs, labels, autocast, logps="tokens")
        return logps.float(), head._ftui_entropy
    finally:
        head._ftui_temperature, head._ftui_entropy = 1.0, None


def output_projection(model: nn.Module) -> nn.Module | None:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    getter = getattr(base, "get_output_embeddings", None)
    return getter() if getter is not None else None


def install_chunked_loss(model: nn.Module, liger: bool = False) -> nn.Module | None:
    """Gives the model's output projection the chunked-loss forward and returns it (the
    ``head`` micro_batch_loss takes); None where the model cannot take it (the full-logits
    path is used then). ``liger``: Liger's fused kernel computes the chunks on CUDA."""
    head = output_projection(model)
    config = getattr(model, "config", None)
    if type(head) is not nn.Linear or getattr(config, "final_logit_softcapping", None):
        return None
    head.forward = types.MethodType(_chunked_forward, head)
    head._ftui_liger = liger
    return head


def micro_batch_loss(model: nn.Module, head: nn.Module | None, inputs: dict[str, Any], labels: torch.Tensor,
                     autocast: Any, positions: torch.Tensor | None = None) -> torch.Tensor:
    """The summed token loss of one micro batch through ``model`` (the engine's wrapper).
    ``head`` is the output projection when it computes the loss in chunks, else None;
    ``positions`` (``Batch.loss_positions``) where the labels are, so that it computes logits
    there alone."""
    out = _forward(model, head, inputs, labels, autocast, logps=False, positions=positions)
    return token_loss_sum(out, labels) if head is None else out.float()


def micro_batch_logps(model: nn.Module, head: nn.Module | None, inputs: dict[str, Any], labels: torch.Tensor,
                      autocast: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of one micro batch through ``model``: the summed log-probability of its labelled
    next tokens (fp32) and how many there are, as ``sequence_logps`` gives them from full
    logits. ``head`` is the output projection when it computes them in chunks, else None."""
    out = _forward(model, head, inputs, labels, autocast, logps=True)
    if head is None:
        return sequence_logps(out, labels)
    return out.float(), (labels[:, 1:] != IGNORE).sum(-1)


def _forward(model: nn.Module, head: nn.Module | None, inputs: dict[str, Any], labels: torch.Tensor, autocast: Any,
             logps: bool | str, positions: torch.Tensor | None = None) -> torch.Tensor:
    """The model's ``logits`` output: full logits without ``head``; with it, what the output
    projection computes from the labels (the loss sum, or each row's log-probability), the
    labels handed to it for this forward only (any other forward gets plain logits)."""
    if head is None:
        with autocast():
            return model(**inputs, use_cache=False).logits
    head._ftui_labels, head._ftui_logps, head._ftui_positions = labels, logps, positions
    try:
        with autocast():
            return model(**inputs, use_cache=False).logits
    finally:
        head._ftui_labels, head._ftui_logps, head._ftui_positions = None, False, None
