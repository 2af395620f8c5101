"""The attention kernel of a run (``flash_attn``): SDPA, eager, or FlashAttention-2 over each
example alone (``fa2``).

Why fa2: ftui packs several examples into a row and pads rows to the batch's longest, so SDPA
gets a mask (block-diagonal causal over packed rows, padding otherwise), and with a mask it
cannot use its flash kernel: it runs the memory-efficient kernel over whole rows and repeats
grouped K/V heads first (transformers' ``repeat_kv``). torch's ``varlen_attn`` (torch >= 2.10,
CUDA, fp16/bf16) runs FlashAttention-2 over each sequence of a flattened batch, given the
sequences' cumulative lengths: attention within each example only, no mask. It is what
LLaMA-Factory does with ``flash_attn: fa2`` and ``neat_packing`` through the flash-attn
package, without that package (it is rarely installable on a shared server: it compiles
against the exact torch and CUDA).

How: ``fa2`` loads the model with the attention implementation ``ftui_fa2``, registered here
with transformers' ``AttentionInterface`` (its masks are SDPA's, for any call that falls
back). The collator counts each row's sequences while it pads (``Batch.cu_seqlens``: packed
examples, and a row's trailing padding as a sequence of its own, whose outputs carry no
label) and the stages hand them to the model as transformers' own keyword arguments
(``cu_seq_lens_q``/``_k``, ``max_length_q``/``_k``, those of its FlashAttention integration),
which the decoder layers of ``ftui.presets.families.FA2_MODEL_TYPES`` pass to their attention
untouched (other models are refused: ``ftui.config.model_checks.fa2_model_problem``). A call without them
(chat's and predict's generation), with a KV cache or dropout, outside half precision, with a
position bias, or with a sliding window on torch 2.10 (whose kernel has no window), runs
transformers' SDPA function instead: fa2 changes how attention is computed, not what. What
neither computes (soft-capping, attention sinks) is refused.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from typing import Any, Callable, Iterator

import torch

from ftui.i18n import _

IMPLEMENTATION = "ftui_fa2"
# SDPA over each example of a row alone, on the CPU (ftui.runner.batch_layout picks it for rows
# that hold several examples: padding-free batches, packed rows): the block-diagonal mask's math
# without computing the blocks it masks out
SDPA_PER_EXAMPLE = "ftui_sdpa"
FLASH_DTYPES = (torch.float16, torch.bfloat16)  # what FlashAttention-2 computes in
# keyword arguments of an attention call that neither torch's varlen kernel nor transformers'
# SDPA function computes (it refuses soft-capping and drops sinks)
UNSUPPORTED_KWARGS = ("s_aux", "softcap")
# why some fa2 attention runs SDPA instead: noted from the model's config at load (note_model) and
# by eager calls; the loop warns once
FALLBACKS: set[str] = set()
NO_WINDOW = "a sliding window (this torch's kernel has none)"
# set while a forward's batch carries its sequences' lengths (``lengths_given``): ftui_sdpa's mask
# function then builds no mask, which every attention call of that forward would ignore
_LENGTHS_GIVEN: contextvars.ContextVar[bool] = contextvars.ContextVar("ftui_lengths_given", default=False)


def attn_implementation(flash_attn: str, per_example: bool = False) -> str | None:
    """transformers' attn_implementation for the config's ``flash_attn`` (LLaMA-Factory's values):
    auto names none, so transformers picks SDPA, or eager attention for a model whose attention
    SDPA cannot compute (Gemma 2's soft-capping: naming SDPA there fails the load); sdpa is
    SDPA, disabled eager attention; fa3 is refused by validation. ``per_example`` (auto or
    sdpa, for rows of several examples on the CPU): SDPA run over each example alone."""
    if flash_attn == "fa2":
        register()
        return IMPLEMENTATION
    if per_example and flash_attn in ("auto", "sdpa"):
        register()
        return SDPA_PER_EXAMPLE
    return {"auto": None, "disabled": "eager"}.get(flash_attn, "sdpa")


def register() -> None:
    """Makes ``ftui_fa2`` known to transformers in this process (idempotent), and resolves the
    kernel here, at model load, rather than in the first (maybe compiled) attention call."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(IMPLEMENTATION, varlen_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)
    AttentionInterface.register(SDPA_PER_EXAMPLE, sdpa_per_example_attention)
    AttentionMaskInterface.register(SDPA_PER_EXAMPLE, per_example_mask)
    _kernel()


def causal_varlen_kernel() -> Callable[..., torch.Tensor | None] | None:
    """torch's varlen FlashAttention-2 as ``kernel(q, k, v, cu_seqlens, max_len, scale)`` on
    (tokens, heads, head_dim) tensors, causal within each sequence (None from the kernel: it
    cannot take this call); None before torch 2.10. ``kernel.grouped`` says how grouped K/V
    heads go in. Adapts to the installed signature: torch 2.10 takes ``is_causal`` and no
    scale, later ones ``window_size`` and ``scale``; where ``enable_gqa`` exists, grouped K/V
    heads go in as they are; where it does not, only if a small call on the GPU shows the
    kernel gives the same output and gradients as with the heads repeated (FlashAttention-2
    itself handles grouped heads), else they are repeated (transformers' repeat_kv order)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    windows = "window_size" in params
    causal: dict[str, Any] = {"window_size": (-1, 0)} if windows else {"is_causal": True}
    flag = "enable_gqa" in params
    native, probe = (True, "") if flag else _grouped_heads_work(varlen_attn, causal)
    with_scale = "scale" in params

    def kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, max_len: int, scale: float,
               window: int | None = None) -> torch.Tensor | None:
        extra: dict[str, Any] = dict(causal)
        if window:
            if not windows:
                return None  # torch 2.10's kernel has no window: SDPA then
            extra["window_size"] = (window - 1, 0)  # transformers' sliding window: the W positions up to this one
        if q.size(1) != k.size(1):
            if flag:
                extra["enable_gqa"] = True
            elif not native:
                group = q.size(1) // k.size(1)
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if with_scale:
            extra["scale"] = scale
        elif abs(scale - q.size(-1) ** -0.5) > 1e-6 * scale:
            return None  # torch 2.10 scales by 1/sqrt(head_dim) only: SDPA then
        return varlen_attn(q, k, v, cu, cu, max_len, max_len, **extra)

    kernel.grouped = "as they are" if native else f"repeated{probe}"  # type: ignore[attr-defined]
    kernel.windows = windows  # type: ignore[attr-defined]
    return kernel


def _grouped_heads_work(varlen_attn: Callable[..., torch.Tensor], causal: dict[str, Any],
                        device: torch.device | None = None) -> tuple[bool, str]:
    """Whether this torch's varlen_attn, which has no ``enable_gqa`` switch, takes fewer K/V
    heads than query heads: one small bf16 call on ``device`` (the current GPU), forward and
    backward, against the same call with the heads repeated; and, when not, why (for
    describe()). Not without a GPU."""
    if device is None:
        if not torch.cuda.is_available():
            return False, " (no GPU to check grouped heads on)"
        device = torch.device("cuda", torch.cuda.current_device())
    try:
        g = torch.Generator(device=device).manual_seed(0)
        make = lambda heads: torch.randn(48, heads, 64, device=device, dtype=torch.bfloat16, generator=g)  # noqa: E731
        q, k, v = make(4), make(2), make(2)
        cu = torch.tensor([0, 30, 48], dtype=torch.int32, device=device)
        results = []
        for repeat in (False, True):
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            kk, vv = (t.repeat_interleave(2, dim=1) for t in leaves[1:]) if repeat else leaves[1:]
            out = varlen_attn(leaves[0], kk, vv, cu, cu, 30, 30, **causal)
            out.float().square().sum().backward()
            results.append([out.float()] + [t.grad.float() for t in leaves])
        same = all(a.shape == b.shape and torch.allclose(a, b, atol=2e-2, rtol=2e-2) for a, b in zip(*results))
        return same, "" if same else " (grouped heads gave other values than repeated ones)"
    except Exception as exc:  # the kernel refused them (or the check itself failed: said so)
        return False, f" (grouped heads: {type(exc).__name__}: {str(exc)[:120]})"


_KERNEL: list[Callable[..., torch.Tensor | None] | None] = []  # resolved once per process


def _kernel() -> Callable[..., torch.Tensor | None] | None:
    if not _KERNEL:
        _KERNEL.append(causal_varlen_kernel())
    return _KERNEL[0]


def loaded_label(implementation: str | None) -> str | None:
    """The attention a model was loaded with, as run_start names it (transformers' names; ftui's own in words)."""
    return "sdpa, each example alone" if implementation == SDPA_PER_EXAMPLE else implementation


def describe() -> str:
    """What fa2 runs in this process, for run_start (``attention``)."""
    kernel = _kernel()
    if kernel is None:
        return "fa2 unavailable: SDPA"
    return f"fa2: torch varlen FlashAttention-2, grouped K/V heads {getattr(kernel, 'grouped', '?')}"


def note_model(config: Any) -> None:
    """Notes in FALLBACKS what the model's config already says will run SDPA (the calls
    themselves note it only when not compiled: a compiled layer runs no Python): attention
    dropout, and sliding windows where this torch's kernel takes none."""
    kernel = _kernel()
    if getattr(config, "attention_dropout", 0.0):
        FALLBACKS.add("attention dropout while training")
    layer_types = getattr(config, "layer_types", None)
    if layer_types:  # Qwen2/3, Gemma 3: which layers slide
        sliding = "sliding_attention" in layer_types
    else:  # Mistral, Mixtral, Phi-3: every layer, when a window is set
        sliding = bool(getattr(config, "sliding_window", None)) and getattr(config, "use_sliding_window", True) is not False
    if sliding and kernel is not None and not getattr(kernel, "windows", True):
        FALLBACKS.add(NO_WINDOW)


@contextlib.contextmanager
def lengths_given() -> Iterator[None]:
    """Around a forward whose batch carries its sequences' lengths (``Batch.cu_seqlens``): a
    model loaded with ``ftui_sdpa`` then skips its block-diagonal mask (``per_example_mask``)."""
    token = _LENGTHS_GIVEN.set(True)
    try:
        yield
    finally:
        _LENGTHS_GIVEN.reset(token)


def per_example_mask(*args: Any, **kwargs: Any) -> torch.Tensor | None:
    """ftui_sdpa's mask function: transformers' SDPA mask, or none at all inside
    ``lengths_given`` on the CPU for a causal mask without a window over no cache, where
    every attention call runs each example alone (``per_example_sdpa``) and would throw the
    mask away. Why: the mask of a joined row is its length squared (16.8 M entries for a
    micro batch of 4 x 1,024 tokens), built at every forward (0.14 s there, a tenth of a step
    on 2 cores)."""
    from transformers.masking_utils import sdpa_mask

    device = torch.device(kwargs.get("device", "cpu"))
    if (_LENGTHS_GIVEN.get() and device.type == "cpu" and kwargs.get("local_size") is None
            and not kwargs.get("q_offset") and kwargs.get("q_length") == kwargs.get("kv_length")):
        return None
    return sdpa_mask(*args, **kwargs)


def sdpa_per_example_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                               attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                               **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention function for ``ftui_sdpa``: SDPA over each sequence of the rows
    alone where that is possible (``per_example_sdpa``), else transformers' SDPA function
    with the block-diagonal mask the model built from the position ids: the same math."""
    out = per_example_sdpa(module, query, key, value, dropout, scaling, kwargs)
    if out is not None:
        return out, None
    if attention_mask is None and _LENGTHS_GIVEN.get():
        # per_example_mask built none, so SDPA without one would attend across examples
        raise RuntimeError("ftui_sdpa: this attention call cannot run per example, and its forward built no mask")
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)


def per_example_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dropout: float,
                     scaling: float | None, kwargs: dict[str, Any]) -> torch.Tensor | None:
    """Causal SDPA over each sequence the batch's cumulative lengths name (``cu_seq_lens_q``:
    each example of a row, and a row's trailing padding), one call per sequence, output
    (batch, length, heads, dim); None where the mask's path must run instead: no lengths, on
    a GPU (the lengths would be read back from it in every layer), a KV cache, non-causal
    attention, a position bias or soft-capping, or a sliding window narrower than a sequence.
    Why: with a mask, SDPA computes every query against every key of the row and masks most
    of them out; alone, each example costs its own length squared, and on the CPU without a
    mask SDPA runs its flash kernel, which skips the causal upper triangle. Grouped K/V heads
    are repeated first (transformers' repeat_kv order): SDPA's enable_gqa runs a slower
    kernel on the CPU."""
    cu = kwargs.get("cu_seq_lens_q")
    batch, heads, length, dim = query.shape
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else causal
    window = kwargs.get("sliding_window")
    if (cu is None or query.device.type != "cpu" or key.size(2) != length or value.size(-1) != dim or not causal
            or kwargs.get("position_bias") is not None or any(kwargs.get(k) is not None for k in UNSUPPORTED_KWARGS)
            or (window and int(kwargs.get("max_length_q") or length) > window)):
        return None
    group = heads // key.size(1)
    if group > 1:
        key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    bounds = cu.tolist()
    lengths: list[list[int]] = [[] for _ in range(batch)]
    for start, stop in zip(bounds, bounds[1:]):
        lengths[start // length].append(stop - start)
    p = dropout if module.training else 0.0
    sdpa = torch.nn.functional.scaled_dot_product_attention
    # unbind and split, not slices: their backward is one stack and one cat, where each slice's
    # would be a zero-filled tensor of the whole row
    rows = []
    for q, k, v, n in zip(query.unbind(0), key.unbind(0), value.unbind(0), lengths):
        parts = [sdpa(qs[None], ks[None], vs[None], dropout_p=p, is_causal=True, scale=scaling)[0]  # 4-D: the CPU's flash kernel
                 for qs, ks, vs in zip(q.split(n, dim=1), k.split(n, dim=1), v.split(n, dim=1))]
        rows.append(torch.cat(parts, dim=1) if len(parts) > 1 else parts[0])
    return torch.stack(rows, dim=0).transpose(1, 2).contiguous()


def varlen_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention function for ``ftui_fa2``: query (batch, heads, length, dim),
    key and value (batch, kv heads, length, dim) in, (batch, length, heads, dim) out. Where
    the kernel cannot run on the CPU, SDPA runs each example alone (``per_example_sdpa``)."""
    cu = kwargs.get("cu_seq_lens_q")
    batch, heads, length, dim = query.shape
    dtype = query.dtype
    if dtype not in FLASH_DTYPES and torch.is_autocast_enabled(query.device.type):
        dtype = torch.get_autocast_dtype(query.device.type)  # what SDPA would compute in under autocast
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else causal
    kernel = _kernel()
    out, why = None, None
    if cu is not None and any(kwargs.get(k) is not None for k in UNSUPPORTED_KWARGS):
        # neither the kernel nor transformers' SDPA function computes these (SDPA refuses or drops
        # them); fa2 is refused for the model types that pass them, so this is a model outside them
        raise ValueError(_("flash_attn fa2 cannot compute this model's attention (soft-capping or attention sinks); "
                           "use flash_attn: auto"))
    if cu is not None:
        why = ("no varlen kernel in this torch" if kernel is None else
               "a KV cache or unequal head sizes" if key.size(2) != length or value.size(-1) != dim else
               "attention dropout while training" if dropout and module.training else
               "non-causal attention" if not causal else
               "a position bias" if kwargs.get("position_bias") is not None else
               "attention outside fp16/bf16" if dtype not in FLASH_DTYPES else None)
    if cu is not None and why is None:
        flat = lambda t: t.transpose(1, 2).reshape(batch * length, t.size(1), dim).to(dtype)  # noqa: E731
        scale = scaling if scaling is not None else dim ** -0.5
        window = kwargs.get("sliding_window")
        out = kernel(flat(query), flat(key), flat(value), cu, int(kwargs.get("max_length_q") or length), scale, window)
        why = (None if out is not None else NO_WINDOW if window else
               "a scale other than 1/sqrt(head_dim) (torch 2.10's kernel has none)")
    if out is None:
        if why is not None and not torch.compiler.is_compiling():
            FALLBACKS.add(why)
        return sdpa_per_example_attention(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    return out.view(batch, length, heads, dim), None
