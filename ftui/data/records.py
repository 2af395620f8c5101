"""Dataset records: LLaMA-Factory's registry, alpaca and sharegpt formats, as chat messages
(or, for pre-training, as raw document text).

Finds datasets named in a ``dataset_info.json`` registry (LLaMA-Factory's own file works),
local json / jsonl / parquet / txt files or ``datasets`` hub names, reads their records and
turns each into chat messages (``to_messages``) or a document (``to_text``), with a message
that shows the offending record when one is wrong.
No torch here: the launch form previews and checks datasets with this same code.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from ftui.safety.bounded_input import load_json, short_repr  # json.loads, a too-deep document a ValueError
from ftui.i18n import N_, _
from ftui.data.conversation import ASSISTANT, FUNCTION, OBSERVATION, USER, Conversation
from ftui.rundir.paths import DEMO_DATASET, DEMO_DATASET_FILE
from ftui.stages import CONVERSATIONS, PAIRS, RAW_TEXT, TAGGED_ANSWERS, find as find_stage

BUILTIN_REGISTRY = {DEMO_DATASET: {"file_name": str(DEMO_DATASET_FILE)}}
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
TEXT_PREVIEW_BYTES = 1 << 20  # a preview (read_records with a limit) reads at most this much of a .txt
DATA_SUFFIXES = (".json", ".jsonl", ".parquet", ".txt")


class DataFormatError(ValueError):
    """A dataset that cannot be used; the message shows the offending record."""


class DatasetPathError(DataFormatError):
    """A dataset_info.json entry whose file lies outside dataset_dir (refused before any read)."""


class DatasetRefused(DataFormatError):
    """A dataset ftui does not train on (multimodal): refused before a run starts, by name."""


MEDIA_COLUMNS = ("images", "videos", "audios")  # LLaMA-Factory's multimodal columns
MULTIMODAL_REFUSAL = N_("multimodal data (images, videos or audios) is not supported: ftui trains text-only language "
                        "models; use a text dataset, or drop the media column from the entry")


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

    def column(self, key: str) -> Any:
        defaults = ALPACA_COLUMNS if self.formatting == "alpaca" else SHAREGPT_COLUMNS
        return self.columns.get(key, defaults.get(key))

    def tag(self, key: str) -> str:
        return self.tags.get(key, SHAREGPT_TAGS[key])


def load_registry(dataset_dir: str | Path) -> dict[str, Any]:
    path = Path(dataset_dir).expanduser() / "dataset_info.json"
    if not _exists(path):
        return {}
    try:
        data = load_json(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise DataFormatError(_("{path} is not valid JSON: {error}").format(path=path, error=err)) from None
    if not isinstance(data, dict):
        raise DataFormatError(_("{path} must map dataset names to entries").format(path=path))
    return data


def unknown_dataset_message(name: str, registry: dict[str, Any], dataset_dir: str) -> str:
    """What a dataset name that is neither registered nor a file says: the registry names
    closest to it; or, when dataset_info.json is not there at all, that (with the directory
    a relative dataset_dir was read from: a run started elsewhere reads it from here)."""
    where = Path(dataset_dir).expanduser() / "dataset_info.json"
    shown = repr(_clip(name, 200))
    if name.startswith(("/", "./", "../", "~")) or Path(name).suffix.lower() in (".json", ".jsonl", ".parquet", ".txt", ".csv"):
        if Path(name).expanduser().is_absolute():
            return _("dataset {name}: no such file").format(name=shown)
        return _("dataset {name}: no such file here ({cwd}) or in dataset_dir ({dir})").format(
            name=shown, cwd=_clip(os.getcwd(), 200), dir=_clip(dataset_dir, 200))
    if not _exists(where):
        relative = "" if where.is_absolute() else " " + _("(dataset_dir {dir} is read from the current directory, {cwd})").format(
            dir=repr(_clip(dataset_dir, 200)), cwd=_clip(os.getcwd(), 200))
        return _("dataset {name} is not a file, and there is no {registry}{relative}; point dataset_dir at the folder that holds "
                 "dataset_info.json (--set dataset_dir=PATH; ftui predict / eval: --dataset-dir PATH), or give a "
                 ".json/.jsonl/.parquet/.txt path or a hub name").format(
                     name=shown, registry=_clip(str(where), 200), relative=relative)
    close = difflib.get_close_matches(name, list(registry), n=3, cutoff=0.6)
    if close:
        known = _("did you mean {names}?").format(names=", ".join(_clip(k, 40) for k in close))
    else:
        names = sorted(registry)
        known = _("known: {names}").format(names=", ".join(_clip(k, 40) for k in names[:8]) or _("none"))
        if len(names) > 8:
            known += " " + _("... {n} in all").format(n=len(names))
    return _("dataset {name} is neither in {registry} ({known}) nor a file; give a registry name, a "
             ".json/.jsonl/.parquet/.txt path or a hub name").format(name=shown, registry=_clip(str(where), 200), known=known)


def resolve_datasets(dataset: str, dataset_dir: str) -> list[DatasetSpec]:
    """The comma-separated ``dataset`` setting as specs: registry names first, then file paths."""
    registry = load_registry(dataset_dir)
    specs = []
    for name in [n.strip() for n in dataset.split(",") if n.strip()]:
        entry = registry.get(name) or BUILTIN_REGISTRY.get(name)
        if entry is not None:
            specs.append(_spec_from_entry(name, entry, dataset_dir if name in registry else None))
            continue
        path = Path(name).expanduser()
        if not path.is_absolute() and not _exists(path):
            path = Path(dataset_dir).expanduser() / name
        if _exists(path):
            specs.append(DatasetSpec(name=name, file_name=str(path), explicit_format=False))
        elif "/" in name and not name.startswith((".", "/", "~")) and len(name) < 200:
            specs.append(DatasetSpec(name=name, hf_hub_url=name, explicit_format=False))
        else:
            raise DataFormatError(unknown_dataset_message(name, registry, dataset_dir))
    return specs


def dataset_path_problem(dataset: str, dataset_dir: str, stage: str | None = None, unresolved: bool = False) -> str | None:
    """Why a registry entry of ``dataset`` is refused (it leaves dataset_dir, it is multimodal,
    or, given the ``stage``, its entry says it does not fit: a ranking set for sft, none for
    dpo), else None. Checked before a run starts (CLI, form) from the registry alone; other
    dataset problems are left to the run, which reports them with the offending record.
    ``unresolved``: also a name that is neither in the registry nor a file nor a hub name, or
    an unreadable registry (the CLI refuses those before starting a job that would fail; the
    form's preview says them in its own place)."""
    if unresolved and not [n for n in dataset.split(",") if n.strip()]:
        return _("no dataset given; name one from dataset_info.json or give a file")
    try:
        specs = resolve_datasets(dataset, dataset_dir)
    except (DatasetPathError, DatasetRefused) as err:
        return str(err)
    except DataFormatError as err:
        return str(err) if unresolved else None
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    if stage is not None:
        from ftui.data.preference_records import registry_fit_problem

        for spec in specs:
            problem = registry_fit_problem(spec, stage)
            if problem:
                return problem
    return None


TOKENIZED_MARKER = "dataset_dict.json"  # what `datasets`' save_to_disk writes (ftui's and LLaMA-Factory's tokenized_path)


def tokenized_data_problem(path_text: str) -> str | None:
    """Why ``tokenized_path`` cannot be used: it exists but is not encoded data saved by ftui
    or LLaMA-Factory (a folder with dataset_dict.json). A missing folder is fine: the run writes it."""
    path = Path(path_text).expanduser()
    if not _exists(path):
        return None
    if not path.is_dir():
        return _("this is a file; tokenized_path names a folder (written by the first run, read by later ones)")
    if not (path / TOKENIZED_MARKER).is_file() and any(path.iterdir()):
        return _("this folder holds no encoded data ({marker} is missing) and is not empty; "
                 "give a new folder (the run writes it) or one an earlier run wrote").format(marker=TOKENIZED_MARKER)
    return None


def _exists(path: Path) -> bool:
    """Path.exists, False where the name cannot even be looked up (a 100 KB paste: ENAMETOOLONG)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _spec_from_entry(name: str, entry: dict[str, Any], dataset_dir: str | None) -> DatasetSpec:
    media = [c for c in MEDIA_COLUMNS if (entry.get("columns") or {}).get(c)]
    if media:
        raise DatasetRefused(_("dataset {name} has a {column} column: {refusal}").format(
            name=repr(_clip(name, 80)), column=media[0], refusal=_(MULTIMODAL_REFUSAL)))
    file_name = entry.get("file_name")
    if file_name and dataset_dir is not None:
        file_name = registry_path(name, str(file_name), dataset_dir)
    fmt = entry.get("formatting", "alpaca")
    if fmt not in EXPECTED:
        raise DataFormatError(_("dataset {name} has formatting {formatting}; ftui reads alpaca and sharegpt").format(
            name=repr(name), formatting=short_repr(fmt)))
    return DatasetSpec(
        name=name, file_name=file_name, hf_hub_url=entry.get("hf_hub_url"), formatting=fmt,
        columns=entry.get("columns", {}) or {}, tags=entry.get("tags", {}) or {},
        split=entry.get("split", "train"), subset=entry.get("subset"), ranking=bool(entry.get("ranking")),
    )


def registry_path(name: str, file_name: str, dataset_dir: str) -> str:
    """A registry entry's file, which must stay inside dataset_dir. Checked on the path as
    written (no symlink is followed): a link the user placed inside dataset_dir is their
    choice, an absolute path or a ``..`` in the registry entry is not."""
    root = os.path.normpath(os.path.abspath(Path(dataset_dir).expanduser()))
    joined = os.path.normpath(os.path.join(root, file_name))
    if Path(file_name).is_absolute() or os.path.commonpath([root, joined]) != root:
        raise DatasetPathError(
            _("dataset {name} in {registry}: file_name {file_name} leaves dataset_dir; registry entries may only name files "
              "inside {root} (copy or link the file there, or give its path as the dataset instead)").format(
                name=repr(_clip(name, 80)), registry=_clip(str(Path(dataset_dir) / "dataset_info.json"), 200),
                file_name=repr(_clip(file_name, 200)), root=_clip(root, 200))
        )
    return joined


def read_records(spec: DatasetSpec, limit: int | None = None) -> list[dict[str, Any]]:
    """Records of one dataset as dicts (json, jsonl, parquet, or a hub dataset); ``limit``
    reads only the first few where the format allows (a preview of a huge jsonl)."""
    if spec.file_name:
        records = _read_file(Path(spec.file_name), limit)
        return records if limit is None else records[:limit]
    raise HubDataset(spec.hf_hub_url or spec.name)


class HubDataset(LookupError):
    """A hub dataset: the runner loads it with `datasets` (heavy, networked), the form does not."""


def _read_file(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    # json / jsonl are read with the standard library rather than `datasets` so that a bad
    # record can be shown with its line number, and nothing is cached under ~/.cache.
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in DATA_SUFFIXES)
        return [r for f in files for r in _read_file(f, limit)]
    if not path.exists():
        raise DataFormatError(_("dataset file {path} does not exist").format(path=path))
    suffix = path.suffix.lower()
    if suffix == ".txt":
        return _read_text_lines(path, limit)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if limit is not None and suffix == ".jsonl":
        return _read_jsonl_head(path, limit)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataFormatError(_("{path} is not UTF-8 text (byte {byte}); save it as UTF-8").format(path=path, byte=err.start)) from None
    if not text.strip():
        raise DataFormatError(_("{path} is empty; it needs a list of records").format(path=path))
    if suffix == ".jsonl" or (suffix != ".json" and not text.lstrip().startswith("[")):
        records = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(load_json(line))
                except ValueError as err:
                    raise _not_json(path, n, err, line) from None
        return records
    try:
        data = load_json(text)
    except ValueError as err:
        raise DataFormatError(_("{path} is not valid JSON: {error}").format(path=path, error=err)) from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise DataFormatError(_("{path} must hold a JSON list of records").format(path=path))
    return data


def _read_jsonl_head(path: Path, limit: int) -> list[dict[str, Any]]:
    records = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    records.append(load_json(line))
                except ValueError as err:
                    raise _not_json(path, n, err, line) from None
            if len(records) >= limit:
                break
    if not records:
        raise DataFormatError(_("{path} is empty; it needs a list of records").format(path=path))
    return records


def _not_json(path: Path, n: int, err: ValueError, line: str) -> DataFormatError:
    return DataFormatError(_("{path} line {n} is not JSON ({error}): {line}").format(path=path, n=n, error=err, line=_snippet(line)))


def _read_text_lines(path: Path, limit: int | None = None) -> list[dict[str, str]]:
    """A .txt file as LLaMA-Factory loads it (`datasets`' text loader): one ``{"text": line}``
    record per line, \\n, \\r\\n and a lone \\r all ending a line, only the line ending
    removed, blank lines kept (as empty documents: LLaMA-Factory trains them as a lone EOS).
    Other characters str.splitlines() would split on (\\u2028, \\x0c, ...) stay inside the line.
    A preview (``limit``) reads at most TEXT_PREVIEW_BYTES, so a huge file opens at once."""
    with open(path, "rb") as fh:
        data = fh.read() if limit is None else fh.read(TEXT_PREVIEW_BYTES + 1)
    clipped = limit is not None and len(data) > TEXT_PREVIEW_BYTES
    if clipped:  # whole lines only, where the first MiB holds a line ending
        data = data[:TEXT_PREVIEW_BYTES]
        data = data[: data.rfind(b"\n") + 1] or data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        if not (clipped and err.reason == "unexpected end of data"):  # not merely a character cut by the preview
            line = data.count(b"\n", 0, err.start) + 1
            raise DataFormatError(_("{path} is not UTF-8 text (byte {byte}, line {line}); save it as UTF-8").format(
                path=path, byte=err.start, line=line)) from None
        text = data[: err.start].decode("utf-8")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()  # the file's last line ending does not start another document
    if not lines:
        raise DataFormatError(_("{path} is empty; it needs one document per line").format(path=path))
    return [{"text": line} for line in (lines if limit is None else lines[:limit])]


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


def check_format(spec: DatasetSpec, first: Any, stage: str) -> str:
    """Settles how ``stage`` reads the dataset (from its first record, for a file given by
    path) and names it: raw text for pt, else alpaca or sharegpt."""
    if isinstance(first, dict) and any(first.get(c) for c in MEDIA_COLUMNS):
        raise DatasetRefused(_("dataset {name} record 0 has {column}: {refusal}").format(
            name=repr(spec.name), column=next(c for c in MEDIA_COLUMNS if first.get(c)), refusal=_(MULTIMODAL_REFUSAL)))
    kind = data_kind(stage)
    if kind == RAW_TEXT:
        if spec.ranking:
            raise DataFormatError(_("dataset {name} is a preference (ranking) dataset; it fits stage dpo or rm, not pt").format(
                name=repr(spec.name)))
        return _("raw text")
    from ftui.data.preference_records import stage_fit_problem

    if not spec.explicit_format and isinstance(first, dict) and "chosen" in first and "rejected" in first:
        spec.formatting = "sharegpt" if ("conversations" in first or "messages" in first) else "alpaca"
    else:
        apply_detected_format(spec, first)
    problem = stage_fit_problem(spec, first, stage)
    if problem:
        raise DataFormatError(problem)
    named = {PAIRS: _("{formatting} ranking format"), TAGGED_ANSWERS: _("{formatting} feedback format")}.get(kind, _("{formatting} format"))
    return named.format(formatting=spec.formatting)


def record_preview(record: Any, spec: DatasetSpec, index: int, stage: str) -> tuple[str, str]:
    """(what the model reads, what it learns) of one record, as ``stage`` reads it: the launch
    form's preview. Raises DataFormatError showing the record, as training would."""
    kind = data_kind(stage)
    if kind == RAW_TEXT:
        return to_text(record, spec, index), ""
    if kind in (PAIRS, TAGGED_ANSWERS):
        from ftui.data.preference_records import comparison_preview

        return comparison_preview(record, spec, index, stage)
    messages, _tools = to_messages(record, spec, index)
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    answer = next((m["content"] for m in messages if m["role"] == "assistant"), "")
    return user, answer


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
