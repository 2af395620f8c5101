"""The transformers backend (LLaMA-Factory's ``infer_backend: huggingface``): the loaded model's
own ``generate``, on the device it was loaded on. How prompts are padded and answers cut is in
``ftui.runner.generate``'s docstring.

A vision-language model's prompts carry their images and videos (``media``: each prompt's processor
tensors, None for one without): concatenated in prompt order, with ``mm_token_type_ids`` (1 at
image tokens, 2 at video tokens) over the left-padded rows; the model's ``generate`` computes the M-RoPE positions
from them and the attention mask itself (transformers' ``_prepare_position_ids_for_generation``).
"""

from __future__ import annotations

from typing import Any

import torch


def left_padded(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids, attention mask) of a batch of prompts, padded on the left so that every
    answer starts in the same column."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for r, prompt in enumerate(prompts):
        ids[r, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[r, width - len(prompt):] = 1
    return ids, mask


@torch.no_grad()
def generate(loaded: Any, prompts: list[list[int]], sampling: dict[str, Any], *,
             streamer: Any = None, stopping_criteria: Any = None,
             media: list[dict[str, torch.Tensor] | None] | None = None) -> list[tuple[str, int]]:
    """(answer, its token count before the stop token) for each prompt. ``loaded`` is a
    ``ftui.runner.chat.ChatModel`` (model, tokenizer, device, stop_ids); ``sampling``, what
    :func:`ftui.runner.generate.sampling_kwargs` made of a request (read before, so that a bad setting is the
    request's error, not the generation's). ``streamer`` and
    ``stopping_criteria`` pass to transformers' ``generate`` (the chat worker streams the one
    answer and stops it on request; a streamer takes one prompt); ``media``, each prompt's images'
    tensors (a vision-language model's)."""
    tok, model = loaded.tokenizer, loaded.model
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids, mask = left_padded(prompts, pad)
    extras = {k: v for k, v in (("streamer", streamer), ("stopping_criteria", stopping_criteria)) if v is not None}
    if media and any(media):
        extras.update(image_inputs(model, ids, media, loaded.device))
    out = model.generate(input_ids=ids.to(loaded.device), attention_mask=mask.to(loaded.device),
                         **sampling, eos_token_id=loaded.stop_ids or tok.eos_token_id,
                         pad_token_id=pad, **extras)
    stops = set(loaded.stop_ids)
    answers = []
    for row in out[:, ids.shape[1]:].tolist():
        n = next((k for k, t in enumerate(row) if t in stops), len(row))
        answers.append((tok.decode(row[:n], skip_special_tokens=True), n))
    return answers


def image_inputs(model: Any, ids: torch.Tensor, media: list[dict[str, torch.Tensor] | None], device: Any) -> dict[str, Any]:
    """``generate``'s image arguments for left-padded ``ids``: each key of the prompts' tensors
    concatenated in row order (floats in the model's dtype), and the token types."""
    from ftui.runner.media_batch import media_collation, token_types

    collation = media_collation(model)
    if collation is None:
        raise ValueError("images were given to a model without a vision tower")
    keys = sorted({k for m in media if m for k in m})
    out: dict[str, Any] = {}
    for key in keys:
        tensor = torch.cat([m[key] for m in media if m and key in m], dim=0)
        pixels = tensor.is_floating_point() and key != "second_per_grid_ts"  # Qwen2.5-VL's seconds stay fp32
        out[key] = tensor.to(device, dtype=model.dtype) if pixels else tensor.to(device)
    if collation.token_types_key is not None:  # the family's keyword (Qwen mm_token_type_ids, Gemma 3 token_type_ids; LLaVA none)
        out[collation.token_types_key] = token_types(ids, collation).to(device)
    return out
