"""Dataset records as chat messages, conversations or documents: LLaMA-Factory's alpaca and
sharegpt formats (and, for pre-training, raw document text), with a message that shows the
offending record when one is wrong.

A record becomes chat messages (``to_messages``), the turns a named template encodes
(``to_conversation``) or a document (``to_text``). Finding the datasets is
``ftui.data.registry``, reading their files ``ftui.data.dataset_files``, and how each stage
reads them ``ftui.data.stage_formats``. No torch here: the launch form previews and checks
datasets with this same code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any


from ftui.safety.bounded_input import load_json, short_repr  # json.loads, a too-deep document a ValueError
from ftui.i18n import N_, _
from ftui.data.conversation import ASSISTANT, FUNCTION, OBSERVATION, USER, Conversation
from ftui.stages import CONVERSATIONS, find as find_stage

ALPACA_COLUMNS = {"prompt": "instruction", "query": "input", "response": "output", "history": None, "system": None, "tools": None}
SHAREGPT_COLUMNS = {"messages": "conversations", "system": None, "tools": None}
SHAREGPT_TAGS = {
    "role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
    "observation_tag": "observation", "function_tag": "function_call", "system_tag": "system",
}
# What each format expects, English (N_: translated with _() where a message shows it; written
# without braces, which str.format would read as placeholders)
EXPECTED = {
    "alpaca": N_("instruction (text), input (optional text), output (text); optional system, history [[q, a], ...]"),
    "sharegpt": N_("conversations: a list of turns (from: human, gpt, system, function_call or observation; value: text)"),
}
TEXT_EXPECTED = N_(
    "raw text for pre-training: a text field named by the entry's columns.prompt "
    "(LLaMA-Factory's c4_demo/wiki_demo use columns: prompt: text), a 'text' field in a file "
    "given by path, or one document per line of a .txt file"
)


class DataFormatError(ValueError):
    """A dataset that cannot be used; the message shows the offending record."""


class DatasetPathError(DataFormatError):
    """A dataset_info.json entry whose file lies outside dataset_dir (refused before any read)."""


class DatasetRefused(DataFormatError):
    """A dataset ftui does not train on as asked (videos, or images for a stage other than
    sft, in this slice of issue 42): refused before a run starts, by name."""


MEDIA_COLUMNS = ("images", "videos", "audios")  # LLaMA-Factory's multimodal columns (ftui.data.media reads them)


# Secrets that a file mistaken for a dataset may hold: never copied into a message (those
# end up in train.log and events.jsonl).
SECRET = re.compile(r"\b(hf_|sk-|ghp_|gho_|github_pat_|xox[abp]-|AKIA)[A-Za-z0-9_\-]{8,}")
PREVIEW_CHARS = 120


@dataclass
class DatasetSpec:
    """One dataset entry, as LLaMA-Factory's dataset_info.json describes it."""

    name: str
    file_name: str | None = None
    hf_hub_url: str | None = None
    formatting: str = "alpaca"
    columns: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    split: str = "train"
    subset: str | None = None
    ranking: bool = False
    explicit_format: bool = True
    media_dir: str | None = None  # where relative media paths are read from (dataset_dir); None: as written

    def column(self, key: str) -> Any:
        defaults = ALPACA_COLUMNS if self.formatting == "alpaca" else SHAREGPT_COLUMNS
        return self.columns.get(key, defaults.get(key))

    def tag(self, key: str) -> str:
        return self.tags.get(key, SHAREGPT_TAGS[key])


def apply_detected_format(spec: DatasetSpec, first: Any) -> None:
    """For a file given by path, decides alpaca or sharegpt from its first record."""
    if spec.explicit_format:
        return
    fmt = detect_format(first)
    if fmt is None:
        spec.formatting = "alpaca"
        if isinstance(first, dict) and "text" in first:
            raise _fail(spec, 0, first, _("neither alpaca (instruction/output) nor sharegpt (conversations) (raw text, a 'text' "
                                          "field, is for stage: pt)"))
        raise _fail(spec, 0, first, _("neither alpaca (instruction/output) nor sharegpt (conversations)"))
    spec.formatting = fmt


def _snippet(record: Any, limit: int = PREVIEW_CHARS) -> str:
    """A short, escaped preview of a record for an error message (which lands in train.log
    and events.jsonl): JSON-quoted, so control characters show as escapes, with anything
    that looks like an access token blanked out."""
    try:
        text = json.dumps(record, ensure_ascii=False, default=str)
    except RecursionError:  # a record nested almost as deep as json.loads reads: its start is enough
        text = short_repr(record)
    text = SECRET.sub(lambda m: m.group(1) + "<redacted>", text)
    return _clip(text, limit)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "... " + _("({n} characters)").format(n=len(text))


def detect_format(record: Any) -> str | None:
    """alpaca or sharegpt from a record's keys (None if it is neither)."""
    if not isinstance(record, dict):
        return None
    if "conversations" in record or "messages" in record:
        return "sharegpt"
    if "instruction" in record and "output" in record:
        return "alpaca"
    return None


def _fail(spec: DatasetSpec, index: int, record: Any, problem: str, expected: str | None = None,
          kind: str | None = None) -> DataFormatError:
    """The message of a bad record: the problem, the record, what was expected (``expected``,
    English, translated here; ``kind``: what to call that format, default the spec's or text)."""
    return DataFormatError(
        _("dataset {name} record {index}: {problem}").format(name=repr(spec.name), index=index, problem=problem) + "\n"
        + "  " + _("record:   {record}").format(record=_snippet(record)) + "\n"
        + "  " + _("expected ({formatting}): {expected}").format(formatting=kind or (spec.formatting if expected is None else "text"),
                                                           expected=_(expected or EXPECTED[spec.formatting]))
    )


def to_messages(record: Any, spec: DatasetSpec, index: int) -> tuple[list[dict[str, str]], Any]:
    """One record as (chat messages, tools); raises DataFormatError showing the record."""
    if not isinstance(record, dict):
        raise _fail(spec, index, record, _("a record must be a JSON object"))
    if spec.formatting == "alpaca":
        return _alpaca(record, spec, index)
    return _sharegpt(record, spec, index)


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _alpaca(record: dict[str, Any], spec: DatasetSpec, index: int) -> tuple[list[dict[str, str]], Any]:
    prompt_col, query_col, resp_col = spec.column("prompt"), spec.column("query"), spec.column("response")
    prompt, response = record.get(prompt_col), record.get(resp_col)
    if not _text(prompt):
        raise _fail(spec, index, record, _("missing or non-text field {field}").format(field=short_repr(prompt_col)))
    if not _text(response) or not response:
        raise _fail(spec, index, record, _("missing or empty text field {field}").format(field=short_repr(resp_col)))
    query = record.get(query_col) if query_col else None
    if query is not None and not _text(query):
        raise _fail(spec, index, record, _("field {field} must be text").format(field=short_repr(query_col)))
    messages: list[dict[str, str]] = []
    system_col = spec.column("system")
    if system_col and _text(record.get(system_col)) and record[system_col]:
        messages.append({"role": "system", "content": record[system_col]})
    history_col = spec.column("history")
    for turn in (record.get(history_col) or []) if history_col else []:
        if not (isinstance(turn, (list, tuple)) and len(turn) == 2 and all(_text(t) for t in turn)):
            raise _fail(spec, index, record, _("{field} must be a list of [question, answer] pairs").format(field=short_repr(history_col)))
        messages += [{"role": "user", "content": turn[0]}, {"role": "assistant", "content": turn[1]}]
    # As LLaMA-Factory: the instruction and the input, each only when not empty, one per line.
    messages.append({"role": "user", "content": "\n".join(part for part in (prompt, query) if part)})
    messages.append({"role": "assistant", "content": response})
    tools_col = spec.column("tools")
    return messages, (record.get(tools_col) if tools_col else None)


def _sharegpt(record: dict[str, Any], spec: DatasetSpec, index: int) -> tuple[list[dict[str, str]], Any]:
    col = spec.column("messages")
    turns = record.get(col)
    if turns is None and not spec.columns.get("messages") and "messages" in record:
        turns = record["messages"]
    if not isinstance(turns, list) or not turns:
        raise _fail(spec, index, record, _("missing or empty list {field}").format(field=short_repr(col)))
    role_tag, content_tag = spec.tag("role_tag"), spec.tag("content_tag")
    if isinstance(turns[0], dict) and role_tag not in turns[0] and "role" in turns[0] and not spec.tags:
        role_tag, content_tag = "role", "content"  # OpenAI-style turns in a file given by path
    roles = {
        spec.tag("user_tag"): "user", spec.tag("assistant_tag"): "assistant",
        spec.tag("observation_tag"): "tool", spec.tag("function_tag"): "assistant",
        spec.tag("system_tag"): "system", "user": "user", "assistant": "assistant", "system": "system",
    }
    messages = []
    system_col = spec.column("system")
    if system_col and _text(record.get(system_col)) and record[system_col]:
        messages.append({"role": "system", "content": record[system_col]})
    for turn in turns:
        if not isinstance(turn, dict) or not _text(turn.get(content_tag)) or turn.get(role_tag) not in roles:
            raise _fail(spec, index, record, _("each turn needs {role} (one of {roles}) and text {content}").format(
                role=short_repr(role_tag), roles=", ".join(sorted(set(roles))), content=short_repr(content_tag)))
        messages.append({"role": roles[turn[role_tag]], "content": turn[content_tag]})
    if not any(m["role"] == "assistant" for m in messages):
        raise _fail(spec, index, record, _("the conversation has no assistant turn to learn from"))
    tools_col = spec.column("tools")
    tools = record.get(tools_col) if tools_col else None
    if isinstance(tools, str) and tools.strip():
        try:
            tools = load_json(tools)
        except ValueError:
            tools = [tools]
    return messages, (tools or None)


def to_conversation(record: Any, spec: DatasetSpec, index: int) -> Conversation | None:
    """One record as LLaMA-Factory's converters leave it, for a named template
    (``ftui.data.conversation``): the system prompt, the tools as written, and turns that must
    alternate user-or-observation / assistant-or-function. None for a conversation whose
    turns do not (LLaMA-Factory skips those too); DataFormatError for a malformed record."""
    if spec.formatting == "alpaca":
        messages, tools = to_messages(record, spec, index)
        system = messages[0]["content"] if messages[0]["role"] == "system" else ""
        return Conversation([m for m in messages if m["role"] != "system"], system, tools or "")
    to_messages(record, spec, index)  # the same checks (and messages) as the tokenizer-template path
    turns = record.get(spec.column("messages"))
    if turns is None:
        turns = record["messages"]
    role_tag, content_tag = spec.tag("role_tag"), spec.tag("content_tag")
    tags = {key: spec.tag(key) for key in ("user_tag", "assistant_tag", "observation_tag", "function_tag", "system_tag")}
    if role_tag not in turns[0] and "role" in turns[0] and not spec.tags:  # OpenAI-style turns in a file given by path
        role_tag, content_tag = "role", "content"
        tags = {"user_tag": "user", "assistant_tag": "assistant", "observation_tag": "tool",
                "function_tag": "function_call", "system_tag": "system"}
    roles = {tags["user_tag"]: USER, tags["observation_tag"]: OBSERVATION,
             tags["assistant_tag"]: ASSISTANT, tags["function_tag"]: FUNCTION}
    system_col = spec.column("system")
    system = record.get(system_col) or "" if system_col else ""
    if turns[0][role_tag] == tags["system_tag"]:
        system, turns = turns[0][content_tag], turns[1:]
    out = []
    for i, turn in enumerate(turns):
        role = roles.get(turn[role_tag])
        if role not in ((USER, OBSERVATION), (ASSISTANT, FUNCTION))[i % 2]:
            return None
        out.append({"role": role, "content": turn[content_tag]})
    if not out or len(out) % 2:
        return None
    tools_col = spec.column("tools")
    return Conversation(out, system if isinstance(system, str) else "", record.get(tools_col) or "" if tools_col else "")


def text_columns(spec: DatasetSpec) -> tuple[str, str | None]:
    """The (document, continuation) columns pre-training reads, as LLaMA-Factory does: a
    registry entry's columns.prompt and columns.query (an entry with ``columns`` leaves the
    others unset; one without uses alpaca's instruction / input), and ``text`` in a file
    given by path. LLaMA-Factory's pt stage drops response columns, so ftui does too."""
    if not spec.explicit_format:
        return "text", None
    if spec.formatting != "alpaca":
        raise DataFormatError(
            _("dataset {name} is {formatting} (conversations); pre-training (stage: pt) reads raw text: {expected}").format(
                name=repr(spec.name), formatting=spec.formatting, expected=_(TEXT_EXPECTED))
        )
    if not spec.columns:
        return "instruction", "input"
    prompt = spec.columns.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise DataFormatError(_("dataset {name}: its columns name no prompt column; pre-training reads {expected}").format(
            name=repr(spec.name), expected=_(TEXT_EXPECTED)))
    query = spec.columns.get("query")
    return prompt, (query if isinstance(query, str) and query else None)


def data_kind(stage: str) -> str:
    """The kind of records ``stage`` reads (its description, ftui.stages); conversations for a
    name no stage has (the config's own check names it)."""
    described = find_stage(stage)
    return described.data if described is not None else CONVERSATIONS


def to_text(record: Any, spec: DatasetSpec, index: int) -> str:
    """One record's document for pre-training; raises DataFormatError showing the record.

    As LLaMA-Factory's converter: the document column, then the continuation column (if
    the entry names one and it is not empty) after a newline. An empty document is kept
    (LLaMA-Factory trains it as a lone EOS); a missing or non-text one is an error here,
    where LLaMA-Factory would fail with a KeyError or quietly train a lone EOS."""
    prompt_col, query_col = text_columns(spec)
    if not isinstance(record, dict):
        raise _fail(spec, index, record, _("a record must be a JSON object"), TEXT_EXPECTED)
    document = record.get(prompt_col)
    if not _text(document):
        raise _fail(spec, index, record, _("missing or non-text field {field}").format(field=short_repr(prompt_col)), TEXT_EXPECTED)
    query = record.get(query_col) if query_col else None
    if query is not None and not _text(query):
        raise _fail(spec, index, record, _("field {field} must be text").format(field=short_repr(query_col)), TEXT_EXPECTED)
    return "\n".join(part for part in (document, query) if part)
