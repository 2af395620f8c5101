"""``ftui serve``'s prompts: an OpenAI request's messages (or raw text) as the model's token ids.

A run with a named chat template (LLaMA-Factory's ``template``) renders as LLaMA-Factory's API
does: the messages become an ftui Conversation (``ftui.data.openai_chat``) with an empty
assistant turn last, encoded by ``Renderer.encode_oneturn`` with the run's encoding options
(default system prompt, tool format, thinking), tools described in the system prompt in the
template's tool format, and the answer read back for tool calls in that format. A model with
only its tokenizer's own chat template (a ``--model`` directory, or a run without ``template``)
renders as the chat worker does (``apply_chat_template`` with the generation prompt); tools
are refused there, as no tool-call syntax is known to read the answer with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ftui.config.schema import RunConfig
from ftui.data.conversation import ASSISTANT, USER, ConversationError, Renderer
from ftui.data.openai_chat import ChatRequestError, conversation_from_openai, tool_format_of
from ftui.runner.model import template_name_for


@dataclass
class ChatPrompt:
    ids: list[int]
    tool_format: str | None = None  # the tool-call syntax to read the answer with (tools were given)


class Prompts:
    """Requests to ids for one loaded model (``ftui.runner.chat.ChatModel``); ``cfg``: the job's
    config (the run's template and encoding keys)."""

    def __init__(self, loaded: Any, cfg: RunConfig):
        from ftui.runner.stages.sft import encode_options

        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        self.template = template_name_for(cfg, self.tokenizer)
        self.tool_format_key = cfg.tool_format
        self.renderer = Renderer(self.template, self.tokenizer, encode_options(cfg)) if self.template else None
        self.max_positions = _max_positions(loaded.model)

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> ChatPrompt:
        """ChatRequestError (the 400's message) for messages the template cannot render."""
        conv = conversation_from_openai(messages, tools)
        if self.renderer is None:
            if tools:
                raise ChatRequestError("this model has no named chat template (LLaMA-Factory's template key), so no tool-call "
                                       "format is known to read its answers with; send the request without tools")
            turns = conv.turns[:-1]
            if any(t["role"] not in (USER, ASSISTANT) for t in turns):
                raise ChatRequestError("tool calls and tool results need a model with a named chat template")
            ids = self.loaded.prompt_ids([{"role": t["role"], "content": t["content"]} for t in turns], conv.system or None)
            return ChatPrompt(self._fits(ids))
        try:
            ids, _answer = self.renderer.encode_oneturn(conv)
        except ConversationError as err:
            raise ChatRequestError(str(err)) from None
        return ChatPrompt(self._fits(ids), tool_format_of(self.template, self.tool_format_key) if tools else None)

    def text(self, prompt: str) -> list[int]:
        """A raw prompt's ids (/v1/completions: no template), with the tokenizer's own special tokens."""
        if not prompt:
            raise ChatRequestError("prompt is empty")
        return self._fits(self.tokenizer(prompt)["input_ids"])

    def _fits(self, ids: list[int]) -> list[int]:
        if not ids:
            raise ChatRequestError("the prompt renders to no tokens")
        if self.max_positions and len(ids) >= self.max_positions:
            raise ChatRequestError(f"the prompt is {len(ids)} tokens; this model reads at most {self.max_positions}")
        return ids


def _max_positions(model: Any) -> int | None:
    config = getattr(model, "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None
