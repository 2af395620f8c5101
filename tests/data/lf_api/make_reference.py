"""Regenerates reference.json: what LLaMA-Factory 0.9.5's API itself makes of OpenAI chat
requests and of model answers, for tests/test_openai_chat.py (which reads the stored file and
needs no LLaMA-Factory; never import this module from a test).

    DISABLE_VERSION_CHECK=1 /path/to/lfvenv/bin/python tests/data/lf_api/make_reference.py

Runs only where LLaMA-Factory 0.9.5 and fastapi are installed (a venv of its own, never ftui's;
see ../llamafactory_pt/README.md for the install). Three parts:

- ``extract``: each tool format's ``tool_extractor`` (``data/tool_utils.py``) on a set of texts:
  calls written by its own ``function_formatter`` (one, several, unicode), plain text, malformed
  JSON, text around the calls, and the edge cases of its regular expressions. Recorded: the
  calls, ``"plain"`` (it returned the text), or the exception it raised.
- ``requests``: ``api/chat.py``'s ``_process_request`` on OpenAI requests (system prompts, list
  content, tool turns, assistant tool calls, tools, and invalid orders). Recorded: its
  (messages, system, tools), or the HTTP status and message it answered (422: its request
  model refused the JSON before ``_process_request``).
- ``prompts``: for each accepted request, the prompt ids of ``template.encode_oneturn`` with an
  empty assistant turn appended (as its chat engine does), for a few templates on
  tests/data/families_tokenizer (each family's special tokens from
  ../llamafactory_templates/families.json), with the messages LLaMA-Factory made and, where an
  assistant's tool calls became a function turn, with their arguments parsed (what ftui
  sends; LLaMA-Factory's own puts the arguments' JSON string into the prompt).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import sys
import tempfile
import traceback
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
FAMILIES = json.loads((ROOT / "tests" / "data" / "llamafactory_templates" / "families.json").read_text())
TODAY = "26 Jul 2024"  # llama3's tool prompt date, fixed here and in the test
TEMPLATES = ("qwen", "qwen3_5", "llama3", "mistral")

CALLS_ONE = [("get_weather", {"city": "Paris"})]
CALLS_TWO = [("get_weather", {"city": "Paris", "days": 3}), ("get_time", {"zone": "Europe/Paris", "utc": True})]
CALLS_UNICODE = [("查询天气", {"城市": "北京", "单位": ["摄氏", None], "深": {"a": 1.5}})]


def extract_texts(fmt: str, utils) -> dict[str, str]:
    """Texts for one format's extractor: its own renderings first, then edge cases."""
    def written(calls):
        from llamafactory.data.tool_utils import FunctionCall

        return utils.function_formatter([FunctionCall(n, json.dumps(a, ensure_ascii=False)) for n, a in calls])

    texts = {"plain": "Paris is the capital of France.", "empty": "", "unicode plain": "你好，世界！ 🌍",
             "one call": written(CALLS_ONE), "unicode call": written(CALLS_UNICODE)}
    if fmt != "glm4":  # glm4 writes one call per turn (its formatter refuses two)
        texts["two calls"] = written(CALLS_TWO)
    one = texts["one call"]
    texts |= {"text before": "Let me look that up.\n" + one, "text after": one + "\nI called the tool.",
              "spaces around": "  \n" + one + "\n\n "}
    deep = "[" * 1500 + "]" * 1500  # past Python's recursion limit (1000)
    texts |= {
        "default": {
            "backticks": 'Action: search\nAction Input: ```{"q": "ftui"}```',
            "quoted": 'Action: search\nAction Input: "{"q": "ftui"}"',
            "malformed": 'Action: search\nAction Input: {"q": "ftui"',
            "one good one bad": 'Action: a\nAction Input: {"x": 1}\nAction: b\nAction Input: {oops}',
            "non ascii name": 'Action: 搜索\nAction Input: {"q": "x"}',
            "number input": "Action: count\nAction Input: 42",
            "no input": "Action: search\nThe weather is fine.",
            "too deep": "Action: search\nAction Input: " + deep,
        },
        "glm4": {
            "two lines of text": "The weather:\nsunny and warm",
            "text then number": "The answer is:\n42",
            "untrimmed name": ' get_weather \n {"city": "Paris"} ',
            "json over lines": 'get_weather\n{\n  "city": "Paris"\n}',
            "malformed": 'get_weather\n{"city": "Paris"',
            "newline only": "\n",
        },
        "llama3": {
            "list of one": '[{"name": "f", "parameters": {}}]',
            "arguments key": '{"name": "f", "arguments": {}}',
            "empty list": "[]",
            "number": "42",
            "json string": '"just text"',
            "name not a string": '{"name": 5, "parameters": {}}',
            "list with a number": '[{"name": "f", "parameters": {}}, 3]',
            "text then json": 'Sure: {"name": "f", "parameters": {}}',
            "malformed": '{"name": "f", "parameters": {',
            "too deep": deep,
        },
        "mistral": {
            "list of one": '[{"name": "f", "arguments": {}}]',
            "parameters key": '{"name": "f", "parameters": {}}',
            "tool calls word": '[TOOL_CALLS] [{"name": "f", "arguments": {}}]',
            "empty list": "[]",
            "number": "42",
            "name not a string": '[{"name": ["f"], "arguments": {}}]',
            "malformed": '[{"name": "f", "arguments": {}]',
        },
        "qwen": {
            "thinking first": '<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            "no arguments key": '<tool_call>\n{"name": "get_weather"}\n</tool_call>',
            "malformed": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>',
            "second malformed": '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{oops}</tool_call>',
            "second unclosed": '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": "b", "arguments": {}}',
            "empty block": "<tool_call></tool_call>",
            "a list inside": "<tool_call>[1, 2]</tool_call>",
            "a string inside": '<tool_call>"name and arguments"</tool_call>',
            "a number inside": "<tool_call>42</tool_call>",
            "name not a string": '<tool_call>{"name": 1, "arguments": {}}</tool_call>',
            "arguments a string": '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>',
            "text between": '<tool_call>{"name": "a", "arguments": {}}</tool_call> and <tool_call>{"name": "b", "arguments": {}}</tool_call>',
        },
        "qwen3_5": {
            "no parameters": "<tool_call>\n<function=ping>\n</function>\n</tool_call>",
            "unclosed": "<tool_call>\n<function=ping>\n<parameter=x>\n1\n</parameter>\n</function>",
            "text value": "<tool_call>\n<function=say>\n<parameter=text>\n  two\nlines  \n</parameter>\n</function>\n</tool_call>",
            "json values": '<tool_call><function=f><parameter=n> 42 </parameter><parameter=l>[1, "a"]</parameter>'
                           "<parameter=b>true</parameter><parameter=z>null</parameter></function></tool_call>",
            "repeated key": "<tool_call><function=f><parameter=k>1</parameter><parameter=k>2</parameter></function></tool_call>",
            "empty name": "<tool_call><function=><parameter=k>1</parameter></function></tool_call>",
            "spaced name": "<tool_call>\n<function= get_weather >\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
            "text between calls": "<tool_call><function=a></function></tool_call> then <tool_call><function=b></function></tool_call>",
            "deep value": "<tool_call><function=f><parameter=k>" + deep + "</parameter></function></tool_call>",
        },
    }[fmt]
    return texts


def run_extract() -> dict:
    from llamafactory.data.tool_utils import TOOLS

    out = {}
    for fmt in ("default", "glm4", "llama3", "mistral", "qwen", "qwen3_5"):
        cases = []
        for name, text in extract_texts(fmt, TOOLS[fmt]).items():
            try:
                result = TOOLS[fmt].tool_extractor(text)
            except Exception as err:  # recorded: LLaMA-Factory's API answers a 500 there
                cases.append({"name": name, "text": text, "error": type(err).__name__})
                continue
            if isinstance(result, str):
                assert result == text
                cases.append({"name": name, "text": text, "plain": True})
            else:
                cases.append({"name": name, "text": text, "calls": [[c.name, c.arguments] for c in result]})
        out[fmt] = cases
    return out


def call(name: str, arguments: object, raw: str | None = None) -> dict:
    return {"id": "call_" + name, "type": "function",
            "function": {"name": name, "arguments": raw if raw is not None else json.dumps(arguments, ensure_ascii=False)}}


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.", "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city."},
                                                    "days": {"type": "integer", "description": "How many days."}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "现在几点", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "description": "时区", "enum": ["Europe/Paris", "Asia/Shanghai"]}}}}}
U = {"role": "user", "content": "What is ftui?"}
A = {"role": "assistant", "content": "ftui is a terminal dashboard."}
S = {"role": "system", "content": "You are a helpful assistant."}
REQUESTS = {
    "user only": {"messages": [U]},
    "system": {"messages": [S, U]},
    "multi turn": {"messages": [S, U, A, {"role": "user", "content": "And LLaMA-Factory?"}]},
    "text parts": {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world."}]}]},
    "system one text part": {"messages": [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}, U]},
    "system two text parts": {"messages": [{"role": "system", "content": [{"type": "text", "text": "Be brief. "},
                                                                          {"type": "text", "text": "Be kind."}]}, U]},
    "empty system": {"messages": [{"role": "system", "content": ""}, U]},
    "tools": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER, TIME]},
    "tool call and result": {"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call("get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "call_get_weather", "content": '{"temperature": "warm"}'}], "tools": [WEATHER]},
    "parallel calls with content": {"messages": [
        S, {"role": "user", "content": "Weather and time in Paris?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            call("get_weather", {"city": "Paris", "days": 2}), call("get_time", {"zone": "Europe/Paris"})]},
        {"role": "tool", "content": "sunny"}], "tools": [WEATHER, TIME]},
    "unicode call": {"messages": [
        {"role": "user", "content": "北京天气怎么样？"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "北京"})]},
        {"role": "tool", "content": [{"type": "text", "text": "晴"}]},
        {"role": "assistant", "content": "北京今天晴。"},
        {"role": "user", "content": "谢谢"}], "tools": [WEATHER]},
    "function message": {"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "function", "content": '{"name": "get_weather", "arguments": {"city": "Paris"}}'},
        {"role": "tool", "content": "sunny"}], "tools": [WEATHER]},
    "tool first": {"messages": [{"role": "tool", "content": "sunny"}]},
    "empty tool calls list": {"messages": [U, {"role": "assistant", "content": "Hi.", "tool_calls": []}, U]},
    "assistant content null": {"messages": [U, {"role": "assistant", "content": None}, U]},
    "arguments not json": {"messages": [
        U, {"role": "assistant", "content": None, "tool_calls": [call("get_weather", None, raw="city=Paris")]},
        {"role": "tool", "content": "sunny"}]},
    # Refused
    "no messages": {"messages": []},
    "system only": {"messages": [S]},
    "ends with assistant": {"messages": [U, A]},
    "assistant first": {"messages": [A]},
    "two users": {"messages": [U, U, U]},
    "tool where the answer belongs": {"messages": [U, {"role": "tool", "content": "x"}, U]},
    "user where the answer belongs": {"messages": [S, U, U]},
    "second system": {"messages": [S, S, U]},
    "system in the middle": {"messages": [U, S, U]},
    "developer": {"messages": [{"role": "developer", "content": "Be brief."}, U]},
    "unknown role": {"messages": [{"role": "robot", "content": "beep"}]},
    "refusal part": {"messages": [{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}]},
    "tool without description": {"messages": [U], "tools": [{"type": "function", "function": {
        "name": "ping", "parameters": {"type": "object", "properties": {}}}}]},
}


def run_requests() -> dict:
    from fastapi import HTTPException
    from pydantic import ValidationError

    from llamafactory.api.chat import _process_request
    from llamafactory.api.protocol import ChatCompletionRequest

    out = {}
    for name, body in REQUESTS.items():
        case = {"request": body}
        try:
            request = ChatCompletionRequest(model="m", **copy.deepcopy(body))
            messages, system, tools, *_media = _process_request(request)
            case |= {"messages": messages, "system": system, "tools": tools}
        except ValidationError as err:
            case["error"] = [422, err.errors()[0]["type"]]
        except HTTPException as err:
            case["error"] = [err.status_code, err.detail]
        out[name] = case
    return out


def parsed_arguments(messages: list[dict]) -> list[dict] | None:
    """The messages with each function turn's calls' arguments parsed from their JSON string
    (None: one is not JSON, a request ftui refuses)."""
    out = []
    for m in messages:
        if m["role"] == "function":
            calls = json.loads(m["content"])
            items = calls if isinstance(calls, list) else [calls]
            if any(isinstance(c.get("arguments"), str) for c in items):
                try:
                    fixed = [c | {"arguments": json.loads(c["arguments"])} for c in items]
                except json.JSONDecodeError:
                    return None
                m = m | {"content": json.dumps(fixed, ensure_ascii=False)}
        out.append(m)
    return out


def tokenizer_dir(template: str, tmp: Path) -> Path:
    fam = FAMILIES[template]
    out = tmp / template
    out.mkdir()
    src = ROOT / "tests" / "data" / "families_tokenizer"
    shutil.copy(src / "tokenizer.json", out / "tokenizer.json")
    config = json.loads((src / "tokenizer_config.json").read_text())
    config.update(bos_token=fam["bos"], eos_token=fam["eos"], pad_token=fam["pad"])
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


def run_prompts(requests: dict) -> dict:
    from transformers import AutoTokenizer

    from llamafactory.data.template import TEMPLATES as LF_TEMPLATES, get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments

    out = {}
    tmp = Path(tempfile.mkdtemp())
    try:
        for template in TEMPLATES:
            pristine = copy.deepcopy(LF_TEMPLATES[template])
            tok = AutoTokenizer.from_pretrained(tokenizer_dir(template, tmp))
            lf = get_template_and_fix_tokenizer(tok, DataArguments(template=template))
            cases = {}
            for name, case in requests.items():
                if "messages" not in case:
                    continue
                entry = {}
                for key, messages in (("prompt_ids", case["messages"]), ("prompt_ids_parsed_arguments", parsed_arguments(case["messages"]))):
                    if key != "prompt_ids" and messages in (None, case["messages"]):
                        continue
                    try:
                        ids, _answer = lf.encode_oneturn(tok, messages + [{"role": "assistant", "content": ""}], case["system"], case["tools"])
                        entry[key] = ids
                    except Exception as err:
                        entry[key] = {"error": f"{type(err).__name__}: {err}"[:200]}
                cases[name] = entry
            out[template] = {"vocab": len(tok), "eos": tok.eos_token, "cases": cases}
            LF_TEMPLATES[template] = pristine
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> None:
    import llamafactory.data.tool_utils as tool_utils

    class FixedDate(datetime):
        @classmethod
        def now(cls, tz=None):  # noqa: D102 (llama3's tool prompt date)
            return datetime.strptime(TODAY, "%d %b %Y")

    tool_utils.datetime = FixedDate
    sys.setrecursionlimit(1000)  # the default: "too deep" texts fail as they would in its server
    extract = run_extract()
    requests = run_requests()
    try:
        prompts = run_prompts(requests)
    except Exception:
        traceback.print_exc()
        raise
    reference = {"llamafactory": "0.9.5", "today": TODAY, "extract": extract, "requests": requests, "prompts": prompts}
    text = json.dumps(reference, ensure_ascii=False, indent=1)
    # Lists of ids on one line each.
    text = re.sub(r"\[\n\s*(-?\d+(?:,\n\s*-?\d+)*)\n\s*\]", lambda m: "[" + re.sub(r",\n\s*", ",", m.group(1)) + "]", text)
    (HERE / "reference.json").write_text(text + "\n")
    print({fmt: len(c) for fmt, c in extract.items()}, len(requests), "requests", file=sys.stderr)


if __name__ == "__main__":
    main()
