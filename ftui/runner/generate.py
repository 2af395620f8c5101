"""Generation settings, written once for every inference backend (``ftui.runner.backends``):
what the chat worker (``ftui.runner.chat``: one prompt, streamed token by token, stoppable) and
the predict job (``ftui.runner.predict``: batches of prompts, LLaMA-Factory's output files) ask of
a backend's ``generate``.

Why one place: both must pad, sample and stop the same way, or a model chats one answer and
predicts another. Prompts are left-padded with an attention mask (a batch of one has no
padding); temperature 0 is greedy and ``top_p`` only applies when sampling; generation ends at
EOS or any of the template's stop words (the loaded model's ``stop_ids``, LLaMA-Factory's stop
token ids), and each answer is cut at the first of them. Only the defaults differ: the chat
screen's, and LLaMA-Factory's generating arguments for predict.
"""

from __future__ import annotations

from typing import Any

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
