"""OpenAI chat requests as conversations and model answers as tool calls
(ftui.data.openai_chat, ftui.data.tool_calls), against LLaMA-Factory 0.9.5's API.

tests/data/lf_api/reference.json holds what LLaMA-Factory itself made (make_reference.py
there): its tool extractors' reading of texts in each tool format, its ``_process_request``'s
(messages, system, tools) for OpenAI requests or the error it answered, and the prompt ids of
its ``encode_oneturn`` for those requests with four templates. ftui must read, convert and
encode the same, except where it differs on purpose (each such case is named below, with why).
Pure text and tokenisation: no model, no LLaMA-Factory.
"""

from __future__ import annotations

import json
import shutil
from functools import lru_cache
from pathlib import Path

import pytest

from ftui.data.chat_template import fix_tokenizer
from ftui.data.conversation import TOOL_FORMATS, EncodeOptions, Renderer
from ftui.data.openai_chat import ChatRequestError, conversation_from_openai, tool_calls_from_text, tool_format_of
from ftui.data.tool_calls import READERS
from ftui.presets.templates import TEMPLATES

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = json.loads((ROOT / "tests" / "data" / "lf_api" / "reference.json").read_text())
FAMILIES = json.loads((ROOT / "tests" / "data" / "llamafactory_templates" / "families.json").read_text())

EXTRACT = [(fmt, case) for fmt, cases in REFERENCE["extract"].items() for case in cases]
REQUESTS = REFERENCE["requests"]


# --- Answers back to tool calls

def expected_calls(fmt: str, case: dict) -> list[tuple[str, str]] | None:
    """What ftui reads where LLaMA-Factory read ``case``: the same calls; a plain answer where
    it returned the text, and where it failed (an exception: its API answers 500), returned no
    calls, or a name that is not a string (its response model refuses it: 500 again)."""
    if fmt == "qwen3_5" and case["name"] == "deep value":
        # A parameter too deeply nested to read as JSON is its text, as any non-JSON value is
        # (LLaMA-Factory's json.loads raises RecursionError there).
        return [("f", json.dumps({"k": case["text"].split(">")[3].split("<")[0]}))]
    if "plain" in case or "error" in case:
        return None
    calls = [tuple(call) for call in case["calls"]]
    return calls if calls and all(isinstance(name, str) for name, _args in calls) else None


@pytest.mark.parametrize(("fmt", "case"), EXTRACT, ids=[f"{fmt}-{case['name']}" for fmt, case in EXTRACT])
def test_tool_calls_read_as_llamafactory_reads_them(fmt, case):
    assert tool_calls_from_text(fmt, case["text"]) == expected_calls(fmt, case)


def test_the_reference_has_each_kind_of_answer():
    """Calls, plain text and LLaMA-Factory's failures, in every format (a regenerated reference
    that lost a kind would leave its rule untested)."""
    for fmt, cases in REFERENCE["extract"].items():
        assert any(c.get("calls") for c in cases) and any(c.get("plain") for c in cases), fmt
    assert {fmt for fmt, case in EXTRACT if "error" in case} >= {"default", "llama3", "mistral", "qwen", "qwen3_5"}


def test_every_tool_format_is_read_back():
    assert set(READERS) == set(TOOL_FORMATS) == set(REFERENCE["extract"])
    with pytest.raises(ValueError, match="unknown tool format 'nope'"):
        tool_calls_from_text("nope", "text")


@pytest.mark.parametrize("fmt", sorted(TOOL_FORMATS))
def test_calls_ftui_writes_read_back_as_the_same_calls(fmt):
    calls = [("get_weather", json.dumps({"city": "巴黎", "days": [1, 2], "hot": True}, ensure_ascii=False))]
    if fmt != "glm4":  # one call per turn there
        calls.append(("get_time", json.dumps({"zone": "Europe/Paris", "note": "a\nb"})))
    text = TOOL_FORMATS[fmt].calls(calls)
    if fmt == "qwen3_5":  # string values are written bare there, so read back as JSON text where they parse
        calls = [(name, json.dumps(json.loads(args), ensure_ascii=False)) for name, args in calls]
    assert tool_calls_from_text(fmt, text) == [(name, json.dumps(json.loads(args), ensure_ascii=False)) for name, args in calls]


# --- Requests to conversations

# Requests ftui converts differently from LLaMA-Factory, on purpose (ftui.data.openai_chat's docstring).
CONVERTED_DIFFERENTLY = {
    "system two text parts": "LLaMA-Factory keeps the first text part of a system message, ftui all",
    "assistant content null": "content null is an empty text (LLaMA-Factory keeps None, then fails to encode it)",
}
REFUSED_BY_FTUI_ONLY = {"arguments not json": "a tool call's arguments must be JSON (LLaMA-Factory puts the string in the prompt)"}
ACCEPTED_BY_FTUI_ONLY = {
    "developer": "OpenAI's clients send developer for system (LLaMA-Factory's request model refuses the role)",
    "tool without description": "OpenAI's shape makes a function's description optional (LLaMA-Factory requires one)",
}


def as_ftui(name: str, case: dict):
    return conversation_from_openai(case["request"]["messages"], case["request"].get("tools"))


def comparable(turns: list[dict]) -> list[dict]:
    """Turns with a function turn's calls as JSON values, their arguments parsed (ftui's form)."""
    out = []
    for turn in turns:
        if turn["role"] == "function":
            calls = json.loads(turn["content"])
            calls = [{"name": c["name"], "arguments": json.loads(c["arguments"]) if isinstance(c["arguments"], str) else c["arguments"]}
                     for c in (calls if isinstance(calls, list) else [calls])]
            turn = {"role": "function", "content": calls}
        out.append(turn)
    return out


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_requests_convert_as_llamafactory_converts_them(name):
    case = REQUESTS[name]
    refused = "error" in case
    if (refused and name not in ACCEPTED_BY_FTUI_ONLY) or name in REFUSED_BY_FTUI_ONLY:
        with pytest.raises(ChatRequestError):
            as_ftui(name, case)
        return
    conv = as_ftui(name, case)
    assert conv.turns[-1] == {"role": "assistant", "content": ""}, "an empty answer ends it"
    if refused or name in CONVERTED_DIFFERENTLY:
        return  # checked in the tests below
    assert comparable(conv.turns[:-1]) == comparable(case["messages"])
    assert conv.system == (case["system"] or "")
    assert conv.tools == (case["tools"] or "")


def test_the_differences_from_llamafactory():
    conv = as_ftui("", REQUESTS["system two text parts"])
    assert (conv.system, REQUESTS["system two text parts"]["system"]) == ("Be brief. Be kind.", "Be brief. ")
    assert as_ftui("", REQUESTS["assistant content null"]).turns[1] == {"role": "assistant", "content": ""}
    conv = as_ftui("", REQUESTS["developer"])
    assert (conv.system, conv.turns[0]["role"]) == ("Be brief.", "user")
    tools = json.loads(as_ftui("", REQUESTS["tool without description"]).tools)
    assert tools == [{"name": "ping", "parameters": {"type": "object", "properties": {}}}]
    with pytest.raises(ChatRequestError, match=r"messages\[1\]\.tool_calls\[0\]\.function\.arguments must be a JSON object"):
        as_ftui("", REQUESTS["arguments not json"])


def test_tools_keep_name_description_parameters_only():
    """As LLaMA-Factory's request model keeps them: OpenAI's "strict" is dropped, unicode kept."""
    tools = as_ftui("", REQUESTS["tools"]).tools
    assert '"strict"' not in tools and "现在几点" in tools
    assert [list(t) for t in json.loads(tools)] == [["name", "description", "parameters"]] * 2


# --- Prompts: ftui's Renderer on the converted request, against LLaMA-Factory's encode_oneturn

@lru_cache(maxsize=None)
def family_tokenizer(template: str, tmp: Path):
    from transformers import AutoTokenizer

    fam = FAMILIES[template]
    out = tmp / template
    out.mkdir()
    src = ROOT / "tests" / "data" / "families_tokenizer"
    shutil.copy(src / "tokenizer.json", out / "tokenizer.json")
    config = json.loads((src / "tokenizer_config.json").read_text())
    config.update(bos_token=fam["bos"], eos_token=fam["eos"], pad_token=fam["pad"])
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    tok = AutoTokenizer.from_pretrained(out)
    fix_tokenizer(tok, TEMPLATES[template])
    return tok


PROMPTS = [(template, name, ids) for template, ref in REFERENCE["prompts"].items() for name, ids in ref["cases"].items()
           if name not in CONVERTED_DIFFERENTLY and name not in REFUSED_BY_FTUI_ONLY]


@pytest.fixture(scope="module")
def tok_root(tmp_path_factory):
    return tmp_path_factory.mktemp("tokenizers")


@pytest.mark.parametrize(("template", "name", "ids"), PROMPTS, ids=[f"{t}-{n}" for t, n, _ids in PROMPTS])
def test_prompt_ids_are_llamafactorys(template, name, ids, tok_root):
    """The prompt of a converted request is the one LLaMA-Factory's chat engine builds; where an
    assistant's tool calls are in it, the one it builds from their arguments parsed."""
    tok = family_tokenizer(template, tok_root)
    ref = REFERENCE["prompts"][template]
    assert (len(tok), tok.eos_token) == (ref["vocab"], ref["eos"]), "stop words / EOS fix-up differs"
    expected = ids.get("prompt_ids_parsed_arguments", ids["prompt_ids"])
    assert isinstance(expected, list), expected
    renderer = Renderer(template, tok, EncodeOptions(today=REFERENCE["today"]))
    assert renderer.encode_oneturn(as_ftui(name, REQUESTS[name]))[0] == expected


# --- Untrusted JSON: every shape that is not a chat request is a ChatRequestError saying what to send

U = {"role": "user", "content": "hi"}
CALL_TURN = {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}
FN = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}
BAD = {
    "messages not a list": ({"role": "user"}, None, "messages must be a non-empty list"),
    "a message not an object": (["hi"], None, r"messages\[0\] is not an object"),
    "role not a string": ([{"role": {"x": 1}, "content": "hi"}], None, r"messages\[0\] has role \{'x': 1\}; roles: system, developer"),
    "role missing": ([{"content": "hi"}], None, r"has role None"),
    "content a number": ([{"role": "user", "content": 5}], None, r"messages\[0\]\.content must be a string or a list of text parts"),
    "text part without text": ([{"role": "user", "content": [{"type": "text"}]}], None, r"content\[0\] must be a text part"),
    "part not an object": ([{"role": "user", "content": ["hi"]}], None, r"content\[0\] must be a text part"),
    "tool_calls not a list": ([U, {"role": "assistant", "tool_calls": {"a": 1}}, U], None, r"messages\[1\]\.tool_calls must be a list"),
    "call without function": ([U, {"role": "assistant", "tool_calls": [{"id": "x"}]}, U], None, r"tool_calls\[0\] must be"),
    "arguments an object": ([U, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}, U], None,
                            r"tool_calls\[0\] must be"),
    "arguments a JSON list": ([U, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}, U], None,
                              r"arguments must be a JSON object written as a string"),
    "arguments too deep": ([U, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[" * 1500}}]}, U], None,
                           r"arguments must be a JSON object"),
    "function message not calls": ([U, {"role": "function", "content": "sunny"}, U], None, r"messages\[1\] is a function message"),
    "function message empty list": ([U, {"role": "function", "content": "[]"}, U], None, r"messages\[1\] is a function message"),
    "tools not a list": ([U], {"type": "function"}, "tools must be a list"),
    "tool of another type": ([U], [{"type": "code_interpreter"}], r"tools\[0\] must be .*functions only"),
    "tool without name": ([U], [{"type": "function", "function": {"parameters": {}}}], r"tools\[0\]\.function must be an object with a name"),
    "tool without parameters": ([U], [{"type": "function", "function": {"name": "f"}}], r"tools\[0\]\.function\.parameters must be a JSON Schema"),
    "description not a string": ([U], [{"type": "function", "function": {"name": "f", "description": 1, "parameters": {}}}],
                                 r"description must be a string"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_malformed_requests_say_what_to_send(name):
    messages, tools, message = BAD[name]
    with pytest.raises(ChatRequestError, match=message):
        conversation_from_openai(messages, tools)


@pytest.mark.parametrize(("part", "kind"), [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}, "images"),
    ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "audio"),
    ({"type": "video_url", "video_url": {"url": "https://example.com/v.mp4"}}, "video"),
])
def test_media_is_refused_by_name(part, kind):
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, part]}]
    with pytest.raises(ChatRequestError, match=rf"ftui serve answers text, it reads no {kind}: messages\[0\]\.content\[1\] is a {part['type']} part"):
        conversation_from_openai(messages, None)


def test_order_errors_name_the_message_and_the_order():
    with pytest.raises(ChatRequestError, match=r"messages\[2\] has role user where role assistant/function belongs; the order expected"):
        conversation_from_openai([{"role": "system", "content": "s"}, U, U], None)
    with pytest.raises(ChatRequestError, match=r"the last message has role assistant"):
        conversation_from_openai([U, {"role": "assistant", "content": "a"}], None)
    with pytest.raises(ChatRequestError, match=r"messages\[1\] has role system; a system message may only come first"):
        conversation_from_openai([U, {"role": "system", "content": "s"}, U], None)


def test_a_valid_call_turn_and_empty_tools():
    conv = conversation_from_openai([U, CALL_TURN, {"role": "tool", "content": "ok"}], [])
    assert conv.turns[1] == {"role": "function", "content": '[{"name": "f", "arguments": {}}]'}
    assert conv.tools == ""
    assert json.loads(conversation_from_openai([U], [FN]).tools) == [FN["function"]]


# --- The tool format a run renders with

def test_tool_format_is_the_configs_else_the_templates():
    assert tool_format_of("qwen", "llama3") == "llama3"
    for name, template in TEMPLATES.items():
        assert tool_format_of(name, None) == template.tool_format
    assert (tool_format_of("qwen", None), tool_format_of("qwen3_5", None), tool_format_of("llama3", None)) == ("qwen", "qwen3_5", "llama3")
    with pytest.raises(ValueError, match="unknown template 'nope'"):
        tool_format_of("nope", None)
