"""Generation, written once: prompts (token ids) in, answers out, for the chat worker
(``ftui.runner.chat``: one prompt, streamed token by token, stoppable) and the predict job
(``ftui.runner.predict``: batches of prompts, LLaMA-Factory's output files).

Why one routine: both must pad, sample and stop the same way, or a model chats one answer and
predicts another. Prompts are left-padded with an attention mask (a batch of one has no
padding); temperature 0 is greedy and ``top_p`` only applies when sampling; generation ends at
EOS or any of the template's stop words (the loaded model's ``stop_ids``, LLaMA-Factory's stop
token ids), and each answer is cut at the first of them. Only the defaults differ: the chat
screen's, and LLaMA-Factory's generating arguments for predict.
"""

from __future__ import annotations

from typing import Any

import torch

# The settings a request leaves out (keys of the chat request and of a predict job's "generation")
CHAT_DEFAULTS = {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 256}
PREDICT_DEFAULTS = {"temperature": 0.95, "top_p": 0.7, "max_new_tokens": 512}  # LLaMA-Factory's GeneratingArguments


def sampling_kwargs(settings: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``generate``'s length and sampling arguments from ``settings`` (else ``defaults``):
    greedy at temperature 0, where temperature and top_p are not passed (nor read)."""
    temperature = float(settings.get("temperature", defaults["temperature"]))
    kwargs: dict[str, Any] = {"max_new_tokens": int(settings.get("max_new_tokens", defaults["max_new_tokens"])),
                              "do_sample": temperature > 0}
    if temperature > 0:
        kwargs.update(temperature=temperature, top_p=float(settings.get("top_p", defaults["top_p"])))
    return kwargs


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
    :func:`sampling_kwargs` made of a request (read before, so that a bad setting is the
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
