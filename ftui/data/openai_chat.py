"""OpenAI chat requests as ftui conversations, and a model's tool calls read back (torch-free).

The smallest version of this interface, enough for the serve runner (``ftui.runner.serve_app``):
text messages in LLaMA-Factory's order (an optional leading system message, then user and
assistant alternating, ending with the user), an empty assistant turn appended, and Qwen's
``<tool_call>`` blocks read back as calls. The full rules (tools, tool messages, every tool
format, LLaMA-Factory's reference data) replace it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ftui.data.conversation import ASSISTANT, USER, Conversation
from ftui.presets.templates import TEMPLATES


class ChatRequestError(ValueError):
    """A chat request's messages that cannot be rendered; str(err) says what to change."""


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise ChatRequestError("only text content is supported (a string or a list of {\"type\": \"text\"} parts)")


def conversation_from_openai(messages: list[dict], tools: list[dict] | None) -> Conversation:
    """The request's messages as a Conversation ending with an empty assistant turn."""
    if not messages:
        raise ChatRequestError("messages is empty; send at least one user message")
    system = ""
    if messages[0].get("role") == "system":
        system, messages = _text(messages[0].get("content")), messages[1:]
    if len(messages) % 2 == 0:
        raise ChatRequestError("messages must alternate user and assistant and end with a user message (u/a/u/a/u...)")
    turns = []
    for i, message in enumerate(messages):
        want = USER if i % 2 == 0 else ASSISTANT
        if message.get("role") != want:
            raise ChatRequestError(f"message {i} has role {message.get('role')!r}; expected {want!r} "
                                   "(messages alternate user and assistant: u/a/u/a/u...)")
        turns.append({"role": want, "content": _text(message.get("content"))})
    described = json.dumps([t.get("function", t) for t in tools], ensure_ascii=False) if tools else ""
    return Conversation(turns + [{"role": ASSISTANT, "content": ""}], system, described)


def tool_calls_from_text(tool_format: str, text: str) -> list[tuple[str, str]] | None:
    """[(name, arguments as JSON text)] of Qwen-style ``<tool_call>`` blocks; None for a plain answer."""
    calls = []
    for block in re.findall(r"<tool_call>(.+?)</tool_call>", text, re.DOTALL):
        try:
            call = json.loads(block.strip())
        except ValueError:
            return None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return None
        calls.append((call["name"], json.dumps(call.get("arguments", {}), ensure_ascii=False)))
    return calls or None


def tool_format_of(template_name: str, tool_format: str | None) -> str:
    """The tool format a run renders with: the config's tool_format if set, else its template's."""
    return tool_format or TEMPLATES[template_name].tool_format
