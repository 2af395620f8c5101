"""Conversations to token ids with a named template (``ftui.presets.templates``), exactly as
LLaMA-Factory 0.9.5 encodes supervised examples.

The whole path, re-written from LLaMA-Factory's documented behaviour and checked token for
token against its output (tests/test_templates.py, tests/data/llamafactory_templates/):

1. A record becomes a :class:`Conversation` (``ftui.data.records.to_conversation``): a system
   prompt, the tools (JSON text), and turns that alternate user-or-observation /
   assistant-or-function, ending with the answer.
2. ``fix_tokenizer`` (``ftui.data.chat_template``): the template's first stop word becomes EOS
   where it says so, the other stop words become special tokens (added to the vocabulary when
   missing), PAD falls back to EOS.
3. Each turn is rendered from its slot and tokenized piece by piece (never the whole text at
   once); the first turn carries the prefix, the system prompt and the tool descriptions.
4. Turns pair up (prompt, answer); ``cutoff_len`` is shared out pair by pair by
   :func:`split_budget` (LLaMA-Factory's ``infer_seqlen``), so a long prompt is cut rather than
   the example dropped. Prompts are masked (``train_on_prompt`` keeps them), ``mask_history``
   learns only the last answer and keeps the newest pairs first when cutting.

No torch and no transformers here: the tokenizer is any object with ``encode``,
``convert_tokens_to_ids``, ``eos_token``/``eos_token_id``, ``bos_token_id``, ``pad_token_id``
and ``add_special_tokens`` (a transformers tokenizer), so the app side can use it too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Callable

from ftui.safety.bounded_input import load_json
from ftui.i18n import _
from ftui.presets.templates import EOS, TEMPLATES, Piece, Slot, Special, Template, Token

IGNORE = -100

USER, ASSISTANT, OBSERVATION, FUNCTION = "user", "assistant", "observation", "function"


class ConversationError(ValueError):
    """A record the template cannot render (a tool call that is not JSON, ...)."""


@dataclass
class Conversation:
    """One example as LLaMA-Factory's converters leave it: ``turns`` alternate (user or
    observation) and (assistant or function), odd in number before the answer."""

    turns: list[dict[str, str]]
    system: str = ""
    tools: Any = ""  # the tools column as written (JSON text, or already a list)


@dataclass(frozen=True)
class EncodeOptions:
    """The config keys that change how a conversation is encoded (LLaMA-Factory's names)."""

    cutoff_len: int = 2048
    train_on_prompt: bool = False
    mask_history: bool = False
    default_system: str | None = None  # replaces the template's default system prompt
    enable_thinking: bool = True
    preserve_thinking: bool = False
    tool_format: str | None = None  # replaces the template's tool format
    today: str | None = None  # the date in llama3's tool prompt ("%d %b %Y"); default: today


# --- Tool formats: how the tools column reads in the system prompt, and how a call reads.

TOOL_PROMPTS = {
    "default": (
        "You have access to the following tools:\n{tool_text}"
        "Use the following format if using a tool:\n```\n"
        "Action: tool name (one of [{tool_names}])\n"
        "Action Input: the input to the tool, in a JSON format representing the kwargs "
        '(e.g. ```{{"input": "hello world", "num_beams": 5}}```)\n```\n'
    ),
    "glm4": (
        "你是一个名为 ChatGLM 的人工智能助手。你是基于智谱 AI 公司训练的语言模型 GLM-4 模型开发的，"
        "你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具{tool_text}"
    ),
    "llama3": (
        "Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n"
        "You have access to the following functions. To call a function, please respond with JSON for a function call. "
        'Respond in the format {{"name": function name, "parameters": dictionary of argument name and its value}}. '
        "Do not use variables.\n\n{tool_text}"
    ),
    "qwen": (
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>{tool_text}"
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
    ),
    "qwen3_5": (
        "\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>{tool_text}"
        "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
        "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
        "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
        "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
        "- Function calls MUST follow the specified format: "
        "an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
        "- Required parameters MUST be specified\n"
        "- You may provide optional reasoning for your function call in natural language "
        "BEFORE the function call, but NOT after\n"
        "- If there is no function call available, answer the question like normal with your current knowledge "
        "and do not tell the user about function calls\n</IMPORTANT>"
    ),
}

Call = tuple[str, str]  # (function name, arguments as JSON text)


def _dumps(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _as_function(tool: dict[str, Any]) -> dict[str, Any]:
    """The bare function description of an OpenAI-style ``{"type": "function", ...}`` entry."""
    return tool.get("function", "") if tool.get("type") == "function" else tool


def _wrapped(tool: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI-style ``{"type": "function", "function": ...}`` form of a tool."""
    return tool if tool.get("type") == "function" else {"type": "function", "function": tool}


def _default_tools(tools: list[dict[str, Any]], today: str) -> str:
    blocks, names = "", []
    for tool in map(_as_function, tools):
        args = ""
        params = tool["parameters"]
        for name, param in params["properties"].items():
            required = ", required" if name in params.get("required", []) else ""
            enum = ", should be one of [{}]".format(", ".join(param["enum"])) if param.get("enum") else ""
            items = ", where each item should be {}".format(param["items"].get("type", "")) if param.get("items") else ""
            args += f"  - {name} ({param.get('type', '')}{required}): {param.get('description', '')}{enum}{items}\n"
        blocks += f"> Tool Name: {tool['name']}\nTool Description: {tool.get('description', '')}\nTool Args:\n{args}\n"
        names.append(tool["name"])
    return TOOL_PROMPTS["default"].format(tool_text=blocks, tool_names=", ".join(names))


def _glm4_tools(tools: list[dict[str, Any]], today: str) -> str:
    text = "".join(
        f"\n\n## {tool['name']}\n\n{_dumps(tool, indent=4)}\n在调用上述函数时，请使用 Json 格式表示调用的参数。"
        for tool in map(_as_function, tools)
    )
    return TOOL_PROMPTS["glm4"].format(tool_text=text)


def _llama3_tools(tools: list[dict[str, Any]], today: str) -> str:
    text = "".join(_dumps(_wrapped(tool), indent=4) + "\n\n" for tool in tools)
    return TOOL_PROMPTS["llama3"].format(date=today, tool_text=text)


def _mistral_tools(tools: list[dict[str, Any]], today: str) -> str:
    return "[AVAILABLE_TOOLS] " + _dumps([_wrapped(tool) for tool in tools]) + "[/AVAILABLE_TOOLS]"


def _qwen_tools(tools: list[dict[str, Any]], today: str) -> str:
    return TOOL_PROMPTS["qwen"].format(tool_text="".join("\n" + _dumps(_wrapped(tool)) for tool in tools))


def _qwen35_tools(tools: list[dict[str, Any]], today: str) -> str:
    bare = [tool.get("function", tool) if tool.get("type") == "function" else tool for tool in tools]
    return TOOL_PROMPTS["qwen3_5"].format(tool_text="".join("\n" + _dumps(tool) for tool in bare))


def _default_calls(calls: list[Call]) -> str:
    return "\n".join(f"Action: {name}\nAction Input: {args}" for name, args in calls)


def _glm4_calls(calls: list[Call]) -> str:
    if len(calls) > 1:
        raise ConversationError(_("the glm4 tool format has no parallel function calls (one call per turn)"))
    return f"{calls[0][0]}\n{calls[0][1]}"


def _llama3_calls(calls: list[Call]) -> str:
    objs = [{"name": name, "parameters": json.loads(args)} for name, args in calls]
    return _dumps(objs[0] if len(objs) == 1 else objs)


def _mistral_calls(calls: list[Call]) -> str:
    return _dumps([{"name": name, "arguments": json.loads(args)} for name, args in calls])


def _qwen_calls(calls: list[Call]) -> str:
    return "\n".join(f"<tool_call>\n{_dumps({'name': name, 'arguments': json.loads(args)})}\n</tool_call>" for name, args in calls)


def _qwen35_calls(calls: list[Call]) -> str:
    out = []
    for name, args in calls:
        text = f"<tool_call>\n<function={name}>"
        for key, value in json.loads(args).items():
            text += f"\n<parameter={key}>\n{value if isinstance(value, str) else _dumps(value)}\n</parameter>"
        out.append(text + "\n</function>\n</tool_call>")
    return "\n".join(out)


@dataclass(frozen=True)
class ToolFormat:
    describe: Callable[[list[dict[str, Any]], str], str]  # tools -> the text appended to the system prompt
    calls: Callable[[list[Call]], str]  # an assistant's function calls -> its text


TOOL_FORMATS: dict[str, ToolFormat] = {
    "default": ToolFormat(_default_tools, _default_calls),
    "glm4": ToolFormat(_glm4_tools, _glm4_calls),
    "llama3": ToolFormat(_llama3_tools, _llama3_calls),
    "mistral": ToolFormat(_mistral_tools, _mistral_calls),
    "qwen": ToolFormat(_qwen_tools, _qwen_calls),
    "qwen3_5": ToolFormat(_qwen35_tools, _qwen35_calls),
}


# --- Rendering

class Renderer:
    """Encodes conversations with one template on one (fixed-up) tokenizer."""

    def __init__(self, template: Template | str, tokenizer: Any, options: EncodeOptions | None = None):
        self.template = TEMPLATES[template] if isinstance(template, str) else template
        self.tokenizer = tokenizer
        self.options = options or EncodeOptions()
        opts = self.options
        if opts.tool_format is not None:
            # LLaMA-Factory: naming a tool format also resets function calls to the bare default slot.
            plain: Slot = ("{{content}}",) if self.template.efficient_eos else ("{{content}}", EOS)
            self.template = replace(self.template, function=plain, tool_format=opts.tool_format)
        if opts.default_system is not None:
            self.template = replace(self.template, default_system=opts.default_system)
        if opts.train_on_prompt and self.template.efficient_eos:
            raise ConversationError(_("this template ends examples with one EOS (efficient_eos), so train_on_prompt is not possible with it"))
        if opts.train_on_prompt and opts.mask_history:
            raise ConversationError(_("mask_history and train_on_prompt cannot be combined"))
        self.tools_format = TOOL_FORMATS[self.template.tool_format]
        self.today = opts.today or datetime.now().strftime("%d %b %Y")

    # One piece list -> ids, each string piece tokenized on its own.
    def ids(self, pieces: list[Piece]) -> list[int]:
        tok = self.tokenizer
        out: list[int] = []
        for piece in pieces:
            if isinstance(piece, str):
                if piece:
                    out += tok.encode(piece, add_special_tokens=False)
            elif isinstance(piece, Token):
                out.append(tok.convert_tokens_to_ids(piece.text))
            elif isinstance(piece, Special):
                tid = tok.bos_token_id if piece.which == "bos" else tok.eos_token_id
                if tid is not None:
                    out.append(tid)
        return out

    @staticmethod
    def fill(slot: Slot, content: str, idx: str | None = None) -> list[Piece]:
        """The slot's pieces with ``{{content}}`` (and ``{{idx}}``) replaced, first occurrence each."""
        out: list[Piece] = []
        for piece in slot:
            if isinstance(piece, str):
                piece = piece.replace("{{content}}", content, 1)
                if idx is not None:
                    piece = piece.replace("{{idx}}", idx, 1)
            out.append(piece)
        return out

    def tools_text(self, tools: Any) -> str:
        if not tools:
            return ""
        if isinstance(tools, str):
            try:
                tools = load_json(tools)  # a dataset's text: nested past the stack is a ValueError too
            except ValueError:
                raise ConversationError(_("the tools column is not JSON: {tools}").format(tools=repr(tools[:200]))) from None
        if isinstance(tools, dict):
            tools = [tools]
        try:
            return self.tools_format.describe(tools, self.today) if tools else ""
        except (KeyError, TypeError, AttributeError) as err:
            raise ConversationError(_("a tool description lacks a field ({error}); each tool needs name and parameters.properties").format(
                error=err)) from None

    def function_text(self, content: str, with_words: bool) -> str:
        """An assistant's tool call (JSON: one call or a list) in the template's call syntax;
        a thinking block or text around a ``<tool_call>`` block is kept in front."""
        t = self.template
        found = re.search(f"{re.escape(t.tool_call_words[0])}(.*?){re.escape(t.tool_call_words[1])}", content, re.DOTALL) if with_words else None
        if found is not None:
            return content.replace(found.group(0), "") + self.tools_format.calls(_parse_calls(found.group(1)))
        thought = re.search(f"{re.escape(t.thought_words[0])}(.*?){re.escape(t.thought_words[1])}", content, re.DOTALL) if with_words else None
        body = content.replace(thought.group(0), "") if thought else content
        text = self.tools_format.calls(_parse_calls(body))
        return thought.group(0) + text if thought else text

    def turn_pieces(self, i: int, turn: dict[str, str], system_text: str) -> list[Piece]:
        """One turn's pieces; ``system_text`` only for the first turn (empty: none)."""
        t = self.template
        role, content = turn["role"], turn["content"]
        if role == USER:
            if t.system_in_user:
                return self.fill(t.user, system_text + content)
            return self.fill(t.user, content, str(i // 2))
        if role == ASSISTANT:
            return self.fill(t.assistant, content)
        if role == OBSERVATION:
            return self.fill(t.observation, content)
        if role == FUNCTION:
            return self.fill(t.function, self.function_text(content, with_words=not t.system_in_user))
        raise ConversationError(_("unexpected role {role}").format(role=repr(role)))

    def encode_turns(self, conv: Conversation) -> list[list[int]]:
        """Token ids per turn (the first with prefix, system prompt and tools)."""
        t = self.template
        system = conv.system or t.default_system
        out = []
        for i, turn in enumerate(conv.turns):
            head: list[Piece] = []
            system_text = ""
            if i == 0:
                head += list(t.prefix)
                if system or conv.tools:
                    filled = self.fill(t.system, system + self.tools_text(conv.tools))
                    if t.system_in_user:
                        system_text = filled[0] if isinstance(filled[0], str) else ""
                    else:
                        head += filled
            out.append(self.ids(head + self.turn_pieces(i, turn, system_text)))
        return out

    def remove_thought(self, content: str) -> str:
        t = self.template
        return re.sub(f"{re.escape(t.thought_words[0])}(.*?){re.escape(t.thought_words[1])}", "", content, flags=re.DOTALL).lstrip("\n")

    def encode_pairs(self, conv: Conversation, discard_history_thoughts: bool = False) -> list[tuple[list[int], list[int]]]:
        """(prompt ids, answer ids) per exchange. With a reasoning template an answer without a
        thinking block gets an empty one: in the prompt (not learnt) unless enable_thinking."""
        t, opts = self.template, self.options
        if not t.reasoning:
            encoded = self.encode_turns(conv)
            return [(encoded[i], encoded[i + 1]) for i in range(0, len(encoded), 2)]
        turns = [dict(m) for m in conv.turns]
        answers = range(1, len(turns), 2)
        if not opts.enable_thinking:
            for i in answers:
                turns[i]["content"] = self.remove_thought(turns[i]["content"])
        if discard_history_thoughts:
            for i in range(1, len(turns) - 2, 2):
                turns[i]["content"] = self.remove_thought(turns[i]["content"])
        encoded = self.encode_turns(Conversation(turns, conv.system, conv.tools))
        empty = self.ids([t.thought_words[0] + t.thought_words[1]])
        opening, closing = t.thought_words[0].strip(), t.thought_words[1].strip()
        for i in ([len(turns) - 2] if discard_history_thoughts else range(0, len(turns), 2)):
            answer = turns[i + 1]["content"]
            if opening not in answer and closing not in answer:
                if opts.enable_thinking:
                    encoded[i + 1] = empty + encoded[i + 1]
                else:
                    encoded[i] = encoded[i] + empty
        return [(encoded[i], encoded[i + 1]) for i in range(0, len(encoded), 2)]

    def encode_oneturn(self, conv: Conversation) -> tuple[list[int], list[int]]:
        """(prompt ids, answer ids) of a conversation ending with an answer: everything before
        the last answer is the prompt (LLaMA-Factory's ``encode_oneturn``, which the preference
        stages use; earlier answers lose their thinking blocks as there)."""
        pairs = self.encode_pairs(conv, discard_history_thoughts=True)
        prompt = [tid for p, a in pairs[:-1] for tid in p + a] + pairs[-1][0]
        return prompt, pairs[-1][1]

    def encode(self, conv: Conversation) -> "Encoded":
        """Input ids and labels of one supervised example within ``cutoff_len``."""
        opts = self.options
        pairs = self.encode_pairs(conv, opts.mask_history and not opts.preserve_thinking)
        eos = self.tokenizer.eos_token_id if self.template.efficient_eos else None
        return assemble(pairs, opts, eos)


def assemble(pairs: list[tuple[list[int], list[int]]], opts: EncodeOptions, efficient_eos: int | None = None) -> "Encoded":
    """One example from its (prompt, answer) pairs, as LLaMA-Factory's supervised processor:
    pair by pair within ``cutoff_len`` (``split_budget``), prompts masked unless
    ``train_on_prompt``, only the last answer learnt with ``mask_history`` (which keeps the
    newest pairs first). ``efficient_eos``: the EOS id of a template that ends the example with
    one EOS (it also labels the first token of each later prompt: the previous answer's end)."""
    budget = opts.cutoff_len - (1 if efficient_eos is not None else 0)
    if opts.mask_history:
        pairs = pairs[::-1]
    input_ids: list[int] = []
    labels: list[int] = []
    used, cut = 0, False
    for n, (prompt, answer) in enumerate(pairs):
        if used >= budget:
            cut = True
            break
        p_len, a_len = split_budget(len(prompt), len(answer), budget - used)
        cut = cut or p_len < len(prompt) or a_len < len(answer)
        prompt, answer = prompt[:p_len], answer[:a_len]
        used += p_len + a_len
        if opts.train_on_prompt:
            p_labels = list(prompt)
        elif efficient_eos is not None and n != 0:
            p_labels = [efficient_eos] + [IGNORE] * (p_len - 1)
        else:
            p_labels = [IGNORE] * p_len
        a_labels = [IGNORE] * a_len if opts.mask_history and n != 0 else list(answer)
        if opts.mask_history:
            input_ids, labels = prompt + answer + input_ids, p_labels + a_labels + labels
        else:
            input_ids, labels = input_ids + prompt + answer, labels + p_labels + a_labels
    if efficient_eos is not None:
        input_ids, labels = input_ids + [efficient_eos], labels + [efficient_eos]
    return Encoded(input_ids, labels, cut)


@dataclass
class Encoded:
    input_ids: list[int]
    labels: list[int]
    truncated: bool = False  # some tokens did not fit in cutoff_len


def split_budget(prompt_len: int, answer_len: int, budget: int) -> tuple[int, int]:
    """How many prompt and answer tokens of one exchange fit in ``budget`` tokens
    (LLaMA-Factory's ``infer_seqlen``): a short answer is kept whole and the prompt cut; else a
    short prompt is kept whole and the answer cut; else both shrink in proportion."""
    if answer_len * 2 < budget:
        answer_max = budget
    elif prompt_len * 2 < budget:
        answer_max = budget - prompt_len
    else:
        answer_max = int(budget * (answer_len / (prompt_len + answer_len)))
    answer = min(answer_max, answer_len)
    return min(max(budget - answer, 0), prompt_len), answer


def _parse_calls(text: str) -> list[Call]:
    try:
        calls = load_json(text)
    except ValueError:
        raise ConversationError(_("a function call turn is not JSON: {text}").format(text=repr(text[:200]))) from None
    calls = calls if isinstance(calls, list) else [calls]
    try:
        return [(c["name"], _dumps(c["arguments"])) for c in calls]
    except (KeyError, TypeError):
        raise ConversationError(_("a function call needs name and arguments: {text}").format(text=repr(text[:200]))) from None
