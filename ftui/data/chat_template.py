"""A named template (``ftui.presets.templates``) on the tokenizer's side: the tokenizer fixed to
end turns as the template does (``fix_tokenizer``, LLaMA-Factory's ``fix_special_tokens``), and
the same format as a Jinja chat template (``to_jinja``) for final/'s tokenizer and the chat
worker. Encoding conversations into examples is ``ftui.data.conversation``.

No torch and no transformers here: the tokenizer is any object with ``add_special_tokens``,
``eos_token``/``eos_token_id`` and ``pad_token_id`` (a transformers tokenizer).
"""

from __future__ import annotations

import json
from typing import Any

from ftui.presets.templates import TEMPLATES, Slot, Special, Template, Token


# --- The tokenizer fix-up

def fix_tokenizer(tokenizer: Any, template: Template) -> int:
    """Makes ``tokenizer`` end turns as the template does (LLaMA-Factory's
    ``fix_special_tokens``); returns how many tokens were added to the vocabulary (the
    model's embeddings must then grow)."""
    before = len(tokenizer)
    stop_words = list(template.stop_words)
    if template.replace_eos:
        if tokenizer.eos_token != stop_words[0]:
            tokenizer.add_special_tokens({"eos_token": stop_words[0]})
        stop_words = stop_words[1:]
    if tokenizer.eos_token_id is None:
        tokenizer.add_special_tokens({"eos_token": "<|endoftext|>"})
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if stop_words:
        try:
            tokenizer.add_special_tokens({"additional_special_tokens": stop_words}, replace_additional_special_tokens=False)
        except TypeError:  # tokenizers without that keyword
            tokenizer.add_special_tokens({"additional_special_tokens": stop_words})
    return len(tokenizer) - before


def template_eos(template_name: str | None) -> str | None:
    """The EOS a template makes the tokenizer use (None: the tokenizer's own)."""
    template = TEMPLATES.get(template_name or "")
    return template.stop_words[0] if template is not None and template.replace_eos else None


# --- The same format as a Jinja chat template (final/'s tokenizer, the chat worker)

def to_jinja(template: Template, bos_token: str | None, eos_token: str | None) -> str:
    """A Jinja chat template that renders user / assistant turns (and the system prompt,
    or the template's default) as ``template`` does, for chat with a trained model: the
    user slot already ends with the assistant's header, so it needs no generation prompt.
    Tool calls and thinking blocks are left to the messages' text."""

    def expr(slot: Slot, var: str = "content") -> str:
        parts = []
        for piece in slot:
            if isinstance(piece, Special):
                text = bos_token if piece.which == "bos" else eos_token
                if text:
                    parts.append(json.dumps(text))
            elif isinstance(piece, Token):
                parts.append(json.dumps(piece.text))
            else:
                head, sep, tail = piece.partition("{{content}}")
                parts += [json.dumps(head)] if head else []
                parts += [var] if sep else []
                parts += [json.dumps(tail)] if tail else []
        return " + ".join(parts) or "''"

    t = template
    out = "{{ " + expr(t.prefix) + " }}" if t.prefix else ""
    if t.default_system:
        out += "{% set system_message = " + json.dumps(t.default_system) + " %}"
    out += ("{% if messages and messages[0]['role'] == 'system' %}{% set system_message = messages[0]['content'] %}"
            "{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}{% endif %}")
    if t.system_in_user:
        out += ("{% for message in loop_messages %}"
                "{% if loop.first and system_message is defined %}{% set content = " + expr(t.system, "system_message")
                + " + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}")
    else:
        out += ("{% if system_message is defined %}{{ " + expr(t.system, "system_message") + " }}{% endif %}"
                "{% for message in loop_messages %}{% set content = message['content'] %}")
    out += ("{% if message['role'] == 'user' %}{{ " + expr(t.user) + " }}"
            "{% elif message['role'] == 'assistant' %}{{ " + expr(t.assistant) + " }}"
            "{% elif message['role'] in ('tool', 'observation') %}{{ " + expr(t.observation) + " }}{% endif %}{% endfor %}")
    return out
