"""An OpenAI chat request (messages and tools, as the JSON has them) as an ftui
:class:`~ftui.data.conversation.Conversation`, by LLaMA-Factory 0.9.5's API rules
(``api/chat.py``, ``_process_request``), so that ``ftui serve`` builds the prompt its API would:

- an optional leading ``system`` message (``developer`` too: what OpenAI's clients send now)
  is the system prompt; then user-or-tool and assistant-or-function messages alternate, odd in
  number (the last one is answered);
- an assistant message with ``tool_calls`` is a function turn: the JSON of
  ``[{"name", "arguments"}]`` (its text content is dropped, as there); a ``tool`` message is
  an observation;
- content given as a list of ``{"type": "text", "text"}`` parts is their texts joined;
- the tools are the JSON text of their function descriptions (name, description,
  parameters; ``ensure_ascii=False``), which the template's tool format describes;
- an empty assistant turn ends the conversation, so ``Renderer.encode_oneturn(conv)[0]`` is
  the prompt (LLaMA-Factory's chat engine appends the same).

Where this differs from LLaMA-Factory, on purpose (tests/test_openai_chat.py names each case):
a tool call's ``arguments`` (a JSON string in OpenAI's shape) are parsed, so the prompt shows
them as the model learnt them (LLaMA-Factory puts the string itself into the prompt, and its
qwen3_5 format fails on it); a system message given as several text parts keeps them all
(LLaMA-Factory keeps the first); ``content: null`` is an empty text; a tool's description may
be left out (OpenAI's shape; LLaMA-Factory requires one). Images, audio and video are refused
by name: ``ftui serve`` answers text.

Messages are untrusted JSON: every type is checked and every problem is a
:class:`ChatRequestError` whose text is the 400 answer's message, saying what to change. Sizes
are not bounded here (the server bounds the request body). Model answers back to tool calls:
:mod:`ftui.data.tool_calls`. No torch, no transformers.
"""

from __future__ import annotations

import json
from typing import Any

from ftui.data.conversation import ASSISTANT, FUNCTION, OBSERVATION, USER, Conversation
from ftui.data.tool_calls import tool_calls_from_text
from ftui.i18n import N_, _
from ftui.presets.templates import TEMPLATES
from ftui.safety.bounded_input import load_json, short_repr

__all__ = ["ChatRequestError", "conversation_from_openai", "tool_calls_from_text", "tool_format_of"]

SYSTEM_ROLES = ("system", "developer")
TURN_ROLES = {"user": USER, "tool": OBSERVATION, "assistant": ASSISTANT, "function": FUNCTION}
ASKING, ANSWERING = ("user", "tool"), ("assistant", "function")  # even, odd positions after the system
# Content parts ftui serve does not read, by what they carry (OpenAI's names and LLaMA-Factory's).
MEDIA_PARTS = {"image_url": N_("images"), "input_image": N_("images"), "input_audio": N_("audio"), "audio_url": N_("audio"),
               "video_url": N_("video"), "file": N_("files")}


class ChatRequestError(ValueError):
    """A chat request ftui serve cannot answer; ``str(err)`` is the 400 response's message,
    saying what to change."""


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _order() -> str:
    return _("the order expected: an optional system message, then user (or tool) and assistant messages "
             "alternating, starting and ending with a user (or tool) message")


def conversation_from_openai(messages: list[dict], tools: list[dict] | None) -> Conversation:
    """An OpenAI chat request's messages and tools as a Conversation ready for
    ``Renderer.encode_oneturn`` (LLaMA-Factory's API rules; see the module's docstring), an
    empty assistant turn last."""
    if not isinstance(messages, list) or not messages:
        raise ChatRequestError(_("messages must be a non-empty list of message objects"))
    roles = [_role(i, m) for i, m in enumerate(messages)]
    system, first = "", 0
    if roles[0] in SYSTEM_ROLES:
        system, first = _text(0, messages[0]), 1
    for i in range(first, len(messages)):
        expected = ASKING if (i - first) % 2 == 0 else ANSWERING
        if roles[i] not in expected:
            raise ChatRequestError(_("messages[{index}] has role {role} where role {expected} belongs; {order}").format(
                index=i, role=roles[i], expected="/".join(expected), order=_order()))
    if (len(messages) - first) % 2 == 0:
        raise ChatRequestError(_("the last message has role {role}, or there is none after the system message; {order}").format(
            role=roles[-1], order=_order()))
    turns = [_turn(i, roles[i], messages[i]) for i in range(first, len(messages))]
    return Conversation(turns + [{"role": ASSISTANT, "content": ""}], system, _tools_text(tools))


def _role(index: int, message: Any) -> str:
    if not isinstance(message, dict):
        raise ChatRequestError(_("messages[{index}] is not an object with role and content").format(index=index))
    role = message.get("role")
    if not isinstance(role, str) or (role not in SYSTEM_ROLES and role not in TURN_ROLES):
        raise ChatRequestError(_("messages[{index}] has role {role}; roles: {roles}").format(
            index=index, role=short_repr(role), roles=", ".join(SYSTEM_ROLES + tuple(TURN_ROLES))))
    if role in SYSTEM_ROLES and index:
        raise ChatRequestError(_("messages[{index}] has role {role}; a system message may only come first").format(
            index=index, role=role))
    return role


def _text(index: int, message: dict) -> str:
    """A message's content as text: a string, text parts joined, or nothing (null)."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise ChatRequestError(_("messages[{index}].content must be a string or a list of text parts").format(index=index))
    texts = []
    for n, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in MEDIA_PARTS:
            raise ChatRequestError(_("ftui serve answers text, it reads no {kind}: messages[{index}].content[{n}] is a {type} part; "
                                     "send text parts only").format(index=index, n=n, kind=_(MEDIA_PARTS[kind]), type=kind))
        if kind != "text" or not isinstance(part.get("text"), str):
            raise ChatRequestError(_("messages[{index}].content[{n}] must be a text part: {{\"type\": \"text\", \"text\": \"...\"}}")
                                   .format(index=index, n=n))
        texts.append(part["text"])
    return "".join(texts)


def _turn(index: int, role: str, message: dict) -> dict[str, str]:
    calls = message.get("tool_calls")
    if role == "assistant" and calls is not None and not isinstance(calls, list):
        raise ChatRequestError(_("messages[{index}].tool_calls must be a list").format(index=index))
    if role == "assistant" and calls:
        return {"role": FUNCTION, "content": _dumps([_call(index, n, call) for n, call in enumerate(calls)])}
    text = _text(index, message)
    if role == "function":
        _check_calls(index, text)
    return {"role": TURN_ROLES[role], "content": text}


def _call(index: int, n: int, call: Any) -> dict[str, Any]:
    """One of an assistant's tool calls as the function turn holds it: name and the arguments'
    JSON value (OpenAI sends them as a JSON string)."""
    where = f"messages[{index}].tool_calls[{n}]"
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not isinstance(function.get("arguments"), str):
        raise ChatRequestError(_("{where} must be {{\"type\": \"function\", \"function\": {{\"name\": \"...\", \"arguments\": \"{{...}}\"}}}} "
                                 "(arguments: a JSON object as a string)").format(where=where))
    try:
        arguments = load_json(function["arguments"])
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise ChatRequestError(_("{where}.function.arguments must be a JSON object written as a string, e.g. \"{{\\\"city\\\": \\\"Paris\\\"}}\"; "
                                 "got {value}").format(where=where, value=short_repr(function["arguments"])))
    return {"name": function["name"], "arguments": arguments}


def _check_calls(index: int, text: str) -> None:
    """A ``function`` message (LLaMA-Factory's form of an assistant's calls) is the JSON of one
    call or a list of them, each with name and arguments: the template renders it as calls."""
    try:
        value = load_json(text)
    except ValueError:
        value = None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(c, dict) and isinstance(c.get("name"), str) and "arguments" in c for c in items):
        raise ChatRequestError(_("messages[{index}] is a function message: its content must be the JSON of the calls, "
                                 "[{{\"name\": \"...\", \"arguments\": {{...}}}}]; or send an assistant message with tool_calls")
                               .format(index=index))


def _tools_text(tools: Any) -> str:
    """The tools' function descriptions as the JSON text LLaMA-Factory passes to its template
    (name, description, parameters in that order; other keys dropped as its request model
    drops them), or "" without tools."""
    if tools is None or tools == []:
        return ""
    if not isinstance(tools, list):
        raise ChatRequestError(_("tools must be a list of {{\"type\": \"function\", \"function\": {{...}}}} objects"))
    return _dumps([_function(n, tool) for n, tool in enumerate(tools)])


def _function(n: int, tool: Any) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        raise ChatRequestError(_("tools[{n}] must be {{\"type\": \"function\", \"function\": {{...}}}}; ftui serve offers functions only")
                               .format(n=n))
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise ChatRequestError(_("tools[{n}].function must be an object with a name").format(n=n))
    if not isinstance(function.get("parameters"), dict):
        raise ChatRequestError(_("tools[{n}].function.parameters must be a JSON Schema object, "
                                 "e.g. {{\"type\": \"object\", \"properties\": {{...}}}}").format(n=n))
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise ChatRequestError(_("tools[{n}].function.description must be a string").format(n=n))
    described = {"name": function["name"]} | ({} if description is None else {"description": description})
    return described | {"parameters": function["parameters"]}


def tool_format_of(template_name: str, tool_format: str | None) -> str:
    """The tool format a run renders with: the config's ``tool_format`` key if set, else its
    template's (``ftui.presets.templates.Template.tool_format``)."""
    if tool_format:
        return tool_format
    if template_name not in TEMPLATES:
        raise ValueError(_("unknown template {template}; tools need a named template (template: qwen, llama3, ...)").format(
            template=short_repr(template_name)))
    return TEMPLATES[template_name].tool_format
