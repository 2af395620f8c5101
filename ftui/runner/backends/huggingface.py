"""The transformers backend (LLaMA-Factory's ``infer_backend: huggingface``): the loaded model's
own ``generate``, on the device it was loaded on. How prompts are padded and answers cut is in
``ftui.runner.generate``'s docstring.
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
             streamer: Any = None, stopping_criteria: Any = None) -> list[tuple[str, int]]:
    """(answer, its token count before the stop token) for each prompt. ``loaded`` is a
    ``ftui.runner.chat.ChatModel`` (model, tokenizer, device, stop_ids); ``sampling``, what
    :func:`ftui.runner.generate.sampling_kwargs` made of a request (read before, so that a bad setting is the
    request's error, not the generation's). ``streamer`` and
    ``stopping_criteria`` pass to transformers' ``generate`` (the chat worker streams the one
    answer and stops it on request; a streamer takes one prompt)."""
    tok, model = loaded.tokenizer, loaded.model
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids, mask = left_padded(prompts, pad)
    extras = {k: v for k, v in (("streamer", streamer), ("stopping_criteria", stopping_criteria)) if v is not None}
    out = model.generate(input_ids=ids.to(loaded.device), attention_mask=mask.to(loaded.device),
                         **sampling, eos_token_id=loaded.stop_ids or tok.eos_token_id,
                         pad_token_id=pad, **extras)
    stops = set(loaded.stop_ids)
    answers = []
    for row in out[:, ids.shape[1]:].tolist():
        n = next((k for k, t in enumerate(row) if t in stops), len(row))
        answers.append((tok.decode(row[:n], skip_special_tokens=True), n))
    return answers
