"""A model's answer read back as function calls, per tool format: the inverse of
``ftui.data.conversation.TOOL_FORMATS``' ``calls``, as LLaMA-Factory 0.9.5's tool extractors
(``data/tool_utils.py``, ``*ToolUtils.tool_extractor``) read it, so that ``ftui serve`` answers
a request with tools with the same ``tool_calls`` LLaMA-Factory's API would.

Each reader returns ``[(name, arguments as JSON text)]`` (the arguments written as
LLaMA-Factory writes them: ``json.dumps(value, ensure_ascii=False)``), or None where
LLaMA-Factory returns the text itself (a plain answer). Checked case by case against what
LLaMA-Factory's own extractors made of the same texts (tests/data/lf_api/, made by
make_reference.py there; tests/test_openai_chat.py).

Where LLaMA-Factory fails with an exception on a text (a JSON value that is not an object
where it indexes one: a TypeError, a 500 from its API) or returns a call its response model
then refuses (a name that is not a string) or an empty list of calls, this reads a plain
answer instead: the text is returned to the client as it is, never an error. Model text is
untrusted: JSON nested past Python's stack or a number of thousands of digits is "not JSON"
here too (``ftui.safety.bounded_input.load_json``), where LLaMA-Factory would fail.

The answer's length is bounded by the server's ``max_tokens`` limit, which bounds the regular
expressions' work (LLaMA-Factory's own, kept as they are: their edge cases are its behaviour).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from ftui.i18n import _
from ftui.safety.bounded_input import load_json

Call = tuple[str, str]  # (function name, arguments as JSON text)

_NOT_JSON = object()


def _json(text: str) -> Any:
    """The JSON value of ``text``, or _NOT_JSON."""
    try:
        return load_json(text)
    except ValueError:  # JSONDecodeError, too deep, too many digits
        return _NOT_JSON


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# default: "Action: NAME\nAction Input: {JSON}" blocks, one after the other; an ASCII name, the
# input up to the next "Action:" or the end (quotes and backticks around it stripped).
_ACTION = re.compile(r"Action:\s*([a-zA-Z0-9_]+)\s*Action Input:\s*(.+?)(?=\s*Action:|\s*$)", re.DOTALL)


def _default_calls(text: str) -> list[Call] | None:
    calls = []
    for name, given in _ACTION.findall(text):
        value = _json(given.strip().strip('"').strip("`"))
        if value is _NOT_JSON:
            return None  # one unreadable input: the whole answer is text
        calls.append((name.strip(), _dumps(value)))
    return calls or None


def _glm4_calls(text: str) -> list[Call] | None:
    """glm4: the first line is the name (kept as written), the rest one JSON value."""
    if "\n" not in text:
        return None
    name, rest = text.split("\n", 1)
    value = _json(rest.strip())
    return None if value is _NOT_JSON else [(name, _dumps(value))]


def _json_objects(text: str, arguments_key: str) -> list[Call] | None:
    """llama3 / mistral: the whole answer is one JSON object or a list of them, each with
    "name" and the arguments under ``arguments_key``."""
    value = _json(text.strip())
    if value is _NOT_JSON:
        return None
    calls = []
    for item in value if isinstance(value, list) else [value]:
        if not isinstance(item, dict) or "name" not in item or arguments_key not in item or not isinstance(item["name"], str):
            return None
        calls.append((item["name"], _dumps(item[arguments_key])))
    return calls or None


# qwen: <tool_call>{JSON}</tool_call> blocks, nothing but whitespace after each but another block.
_QWEN_CALL = re.compile(r"<tool_call>(.+?)</tool_call>(?=\s*<tool_call>|\s*$)", re.DOTALL)


def _qwen_calls(text: str) -> list[Call] | None:
    calls = []
    for body in _QWEN_CALL.findall(text):
        value = _json(body.strip())
        if not isinstance(value, dict) or "name" not in value or "arguments" not in value or not isinstance(value["name"], str):
            return None
        calls.append((value["name"], _dumps(value["arguments"])))
    return calls or None


# qwen3_5: <tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>;
# a value that reads as JSON is that value, else its text (stripped).
_QWEN35_CALL = re.compile(r"<tool_call>\s*<function=\s*([^\s<>]+)\s*(.*?)\s*</function>\s*</tool_call>", re.DOTALL)
_QWEN35_PARAMETER = re.compile(r"<parameter=(.*?)>(.*?)</parameter>", re.DOTALL)


def _qwen35_calls(text: str) -> list[Call] | None:
    calls = []
    for name, block in _QWEN35_CALL.findall(text):
        arguments: dict[str, Any] = {}
        for key, given in _QWEN35_PARAMETER.findall(block.strip()):
            value = _json(given.strip())
            arguments[key] = given.strip() if value is _NOT_JSON else value
        calls.append((name.strip(), _dumps(arguments)))
    return calls or None


READERS: dict[str, Callable[[str], list[Call] | None]] = {
    "default": _default_calls,
    "glm4": _glm4_calls,
    "llama3": lambda text: _json_objects(text, "parameters"),
    "mistral": lambda text: _json_objects(text, "arguments"),
    "qwen": _qwen_calls,
    "qwen3_5": _qwen35_calls,
}


def tool_calls_from_text(tool_format: str, text: str) -> list[Call] | None:
    """The calls in a model's answer as LLaMA-Factory's tool extractor for that format reads
    them: [(name, arguments as JSON text)], or None when the text is a plain answer.
    ``tool_format``: a key of ftui.data.conversation.TOOL_FORMATS."""
    if tool_format not in READERS:  # the same keys as TOOL_FORMATS (a test checks)
        raise ValueError(_("unknown tool format {format}; known: {formats}").format(
            format=repr(tool_format), formats=", ".join(READERS)))
    return READERS[tool_format](text)
