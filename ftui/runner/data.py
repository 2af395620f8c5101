"""Training data: LLaMA-Factory's alpaca and sharegpt formats, tokenized with prompt masking.

Reads datasets named in a ``dataset_info.json`` registry (LLaMA-Factory's own file works),
local json / jsonl / parquet files, or ``datasets`` hub names; turns every record into
chat messages; renders them with the tokenizer's chat template (or a named built-in one);
masks everything but the assistant's turns from the loss; cuts at ``cutoff_len``; and
optionally packs several examples into one row. The collator counts real (non-padding) and
loss-bearing tokens on the host, so the training loop needs no device sync to know them.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch

from ftui.presets.config import DEMO_DATASET, RunConfig
from ftui.presets.templates import TEMPLATES

IGNORE = -100
DEMO_DIR = Path(__file__).resolve().parent.parent / "presets" / "demo"
BUILTIN_REGISTRY = {DEMO_DATASET: {"file_name": str(DEMO_DIR / "dataset.json")}}
ALPACA_COLUMNS = {"prompt": "instruction", "query": "input", "response": "output", "history": None, "system": None, "tools": None}
SHAREGPT_COLUMNS = {"messages": "conversations", "system": None, "tools": None}
SHAREGPT_TAGS = {
    "role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
    "observation_tag": "observation", "function_tag": "function_call", "system_tag": "system",
}
EXPECTED = {
    "alpaca": "instruction (text), input (optional text), output (text); optional system, history [[q, a], ...]",
    "sharegpt": "conversations: a list of {from: human|gpt|system|function_call|observation, value: text} turns",
}


class DataFormatError(ValueError):
    """A dataset that cannot be used; the message shows the offending record."""


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


@dataclass
class Example:
    input_ids: list[int]
    labels: list[int]
    position_ids: list[int] | None = None  # set for packed rows: restarts at each example
    real_tokens: int = 0


def load_registry(dataset_dir: str | Path) -> dict[str, Any]:
    path = Path(dataset_dir).expanduser() / "dataset_info.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise DataFormatError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise DataFormatError(f"{path} must map dataset names to entries")
    return data


def resolve_datasets(cfg: RunConfig) -> list[DatasetSpec]:
    """The comma-separated ``dataset`` setting as specs: registry names first, then file paths."""
    registry = load_registry(cfg.dataset_dir)
    specs = []
    for name in [n.strip() for n in cfg.dataset.split(",") if n.strip()]:
        entry = registry.get(name) or BUILTIN_REGISTRY.get(name)
        if entry is not None:
            specs.append(_spec_from_entry(name, entry, cfg.dataset_dir if name in registry else None))
            continue
        path = Path(name).expanduser()
        if not path.is_absolute() and not path.exists():
            path = Path(cfg.dataset_dir).expanduser() / name
        if path.exists():
            specs.append(DatasetSpec(name=name, file_name=str(path), explicit_format=False))
        elif "/" in name and not name.startswith((".", "/", "~")):
            specs.append(DatasetSpec(name=name, hf_hub_url=name, explicit_format=False))
        else:
            known = ", ".join(sorted(registry)[:8]) or "none"
            raise DataFormatError(
                f"dataset {name!r} is neither in {Path(cfg.dataset_dir) / 'dataset_info.json'} "
                f"(known: {known}) nor a file; give a registry name, a .json/.jsonl/.parquet path or a hub name"
            )
    return specs


def _spec_from_entry(name: str, entry: dict[str, Any], dataset_dir: str | None) -> DatasetSpec:
    if entry.get("ranking"):
        raise DataFormatError(f"dataset {name!r} is a preference (ranking) dataset; ftui trains SFT only")
    file_name = entry.get("file_name")
    if file_name and dataset_dir is not None:
        file_name = str(Path(dataset_dir).expanduser() / file_name)
    fmt = entry.get("formatting", "alpaca")
    if fmt not in EXPECTED:
        raise DataFormatError(f"dataset {name!r} has formatting {fmt!r}; ftui reads alpaca and sharegpt")
    return DatasetSpec(
        name=name, file_name=file_name, hf_hub_url=entry.get("hf_hub_url"), formatting=fmt,
        columns=entry.get("columns", {}) or {}, tags=entry.get("tags", {}) or {},
        split=entry.get("split", "train"), subset=entry.get("subset"),
    )


def read_records(spec: DatasetSpec) -> list[dict[str, Any]]:
    """All records of one dataset as dicts (json, jsonl, parquet, or a hub dataset)."""
    if spec.file_name:
        return _read_file(Path(spec.file_name))
    import datasets  # heavy; only for hub names

    ds = datasets.load_dataset(spec.hf_hub_url, spec.subset, split=spec.split)
    return [dict(r) for r in ds]


def _read_file(path: Path) -> list[dict[str, Any]]:
    # json / jsonl are read with the standard library rather than `datasets` so that a bad
    # record can be shown with its line number, and nothing is cached under ~/.cache.
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl", ".parquet"))
        return [r for f in files for r in _read_file(f)]
    if not path.exists():
        raise DataFormatError(f"dataset file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataFormatError(f"{path} is not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    if not text.strip():
        raise DataFormatError(f"{path} is empty; it needs a list of records")
    if suffix == ".jsonl" or (suffix != ".json" and not text.lstrip().startswith("[")):
        records = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError as err:
                    raise DataFormatError(f"{path} line {n} is not JSON ({err}): {_snippet(line)}") from None
        return records
    try:
        data = json.loads(text)
    except ValueError as err:
        raise DataFormatError(f"{path} is not valid JSON: {err}") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise DataFormatError(f"{path} must hold a JSON list of records")
    return data


def _snippet(record: Any, limit: int = 300) -> str:
    text = record if isinstance(record, str) else json.dumps(record, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def detect_format(record: Any) -> str | None:
    """alpaca or sharegpt from a record's keys (None if it is neither)."""
    if not isinstance(record, dict):
        return None
    if "conversations" in record or "messages" in record:
        return "sharegpt"
    if "instruction" in record and "output" in record:
        return "alpaca"
    return None


def _fail(spec: DatasetSpec, index: int, record: Any, problem: str) -> DataFormatError:
    return DataFormatError(
        f"dataset {spec.name!r} record {index}: {problem}\n"
        f"  record:   {_snippet(record)}\n"
        f"  expected ({spec.formatting}): {EXPECTED[spec.formatting]}"
    )


def to_messages(record: Any, spec: DatasetSpec, index: int) -> tuple[list[dict[str, str]], Any]:
    """One record as (chat messages, tools); raises DataFormatError showing the record."""
    if not isinstance(record, dict):
        raise _fail(spec, index, record, "a record must be a JSON object")
    if spec.formatting == "alpaca":
        return _alpaca(record, spec, index)
    return _sharegpt(record, spec, index)


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _alpaca(record: dict[str, Any], spec: DatasetSpec, index: int) -> tuple[list[dict[str, str]], Any]:
    prompt_col, query_col, resp_col = spec.column("prompt"), spec.column("query"), spec.column("response")
    prompt, response = record.get(prompt_col), record.get(resp_col)
    if not _text(prompt):
        raise _fail(spec, index, record, f"missing or non-text field {prompt_col!r}")
    if not _text(response) or not response:
        raise _fail(spec, index, record, f"missing or empty text field {resp_col!r}")
    query = record.get(query_col) if query_col else None
    if query is not None and not _text(query):
        raise _fail(spec, index, record, f"field {query_col!r} must be text")
    messages: list[dict[str, str]] = []
    system_col = spec.column("system")
    if system_col and _text(record.get(system_col)) and record[system_col]:
        messages.append({"role": "system", "content": record[system_col]})
    history_col = spec.column("history")
    for turn in (record.get(history_col) or []) if history_col else []:
        if not (isinstance(turn, (list, tuple)) and len(turn) == 2 and all(_text(t) for t in turn)):
            raise _fail(spec, index, record, f"{history_col!r} must be a list of [question, answer] pairs")
        messages += [{"role": "user", "content": turn[0]}, {"role": "assistant", "content": turn[1]}]
    messages.append({"role": "user", "content": prompt + ("\n" + query if query else "")})
    messages.append({"role": "assistant", "content": response})
    tools_col = spec.column("tools")
    return messages, (record.get(tools_col) if tools_col else None)


def _sharegpt(record: dict[str, Any], spec: DatasetSpec, index: int) -> tuple[list[dict[str, str]], Any]:
    col = spec.column("messages")
    turns = record.get(col)
    if turns is None and not spec.columns.get("messages") and "messages" in record:
        turns = record["messages"]
    if not isinstance(turns, list) or not turns:
        raise _fail(spec, index, record, f"missing or empty list {col!r}")
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
            raise _fail(spec, index, record, f"each turn needs {role_tag!r} (one of {', '.join(sorted(set(roles)))}) and text {content_tag!r}")
        messages.append({"role": roles[turn[role_tag]], "content": turn[content_tag]})
    if not any(m["role"] == "assistant" for m in messages):
        raise _fail(spec, index, record, "the conversation has no assistant turn to learn from")
    tools_col = spec.column("tools")
    tools = record.get(tools_col) if tools_col else None
    if isinstance(tools, str) and tools.strip():
        try:
            tools = json.loads(tools)
        except ValueError:
            tools = [tools]
    return messages, (tools or None)


def chat_template_for(cfg: RunConfig, tokenizer: Any) -> str:
    if cfg.template:
        return TEMPLATES[cfg.template]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.chat_template
    return TEMPLATES["default"]


class Encoder:
    """Renders messages with a chat template and labels only the assistant's tokens."""

    def __init__(self, tokenizer: Any, template: str):
        self.tokenizer = tokenizer
        self.template = template

    def render(self, messages: list[dict[str, str]], tools: Any = None, generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools, chat_template=self.template, tokenize=False,
            add_generation_prompt=generation_prompt,
        )

    def encode(self, messages: list[dict[str, str]], tools: Any = None) -> tuple[list[int], list[int]]:
        full = self.render(messages, tools)
        spans = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            prefix = self.render(messages[:i], tools, generation_prompt=True)
            upto = self.render(messages[: i + 1], tools)
            if not (upto.startswith(prefix) and full.startswith(upto)):
                raise DataFormatError(
                    "the chat template does not render conversations prefix by prefix, so prompt "
                    "tokens cannot be masked; choose a built-in template (template: chatml, llama3, ...)"
                )
            spans.append((len(prefix), len(upto)))
        enc = self.tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
        ids = enc["input_ids"]
        labels = [IGNORE] * len(ids)
        s = 0
        for k, (start, _end) in enumerate(enc["offset_mapping"]):
            while s < len(spans) and start >= spans[s][1]:
                s += 1
            if s < len(spans) and spans[s][0] <= start < spans[s][1]:
                labels[k] = ids[k]
        return ids, labels


@dataclass
class TokenizedData:
    train: list[Example]
    eval: list[Example]
    records: int = 0
    truncated: int = 0
    dropped: int = 0
    warnings: list[str] = field(default_factory=list)


def build_datasets(cfg: RunConfig, tokenizer: Any) -> TokenizedData:
    """Reads, checks, tokenizes, splits and (optionally) packs every dataset of the config."""
    encoder = Encoder(tokenizer, chat_template_for(cfg, tokenizer))
    examples: list[Example] = []
    out = TokenizedData(train=[], eval=[])
    for spec in resolve_datasets(cfg):
        records = read_records(spec)
        if cfg.max_samples:
            records = records[: cfg.max_samples]
        if not records:
            raise DataFormatError(f"dataset {spec.name!r} has no records")
        if not spec.explicit_format:
            fmt = detect_format(records[0])
            if fmt is None:
                spec.formatting = "alpaca"
                raise _fail(spec, 0, records[0], "neither alpaca (instruction/output) nor sharegpt (conversations)")
            spec.formatting = fmt
        for i, record in enumerate(records):
            messages, tools = to_messages(record, spec, i)
            ids, labels = encoder.encode(messages, tools)
            out.records += 1
            if len(ids) > cfg.cutoff_len:
                out.truncated += 1
                ids, labels = ids[: cfg.cutoff_len], labels[: cfg.cutoff_len]
            if all(label == IGNORE for label in labels[1:]):
                out.dropped += 1
                continue
            examples.append(Example(ids, labels, real_tokens=len(ids)))
    if out.truncated:
        out.warnings.append(f"{out.truncated} of {out.records} examples were longer than cutoff_len={cfg.cutoff_len} and were cut")
    if out.dropped:
        out.warnings.append(f"{out.dropped} examples had no answer tokens left within cutoff_len and were dropped")
    if not examples:
        raise DataFormatError(f"no usable examples: all {out.records} lost their answer to cutoff_len={cfg.cutoff_len}; raise cutoff_len")
    rng = random.Random(cfg.seed)
    order = list(range(len(examples)))
    rng.shuffle(order)
    n_eval = int(round(len(examples) * cfg.val_size)) if cfg.val_size else 0
    out.eval = [examples[i] for i in order[:n_eval]]
    train = [examples[i] for i in sorted(order[n_eval:])]
    out.train = pack_examples(train, cfg.cutoff_len) if cfg.packing else train
    return out


def pack_examples(examples: list[Example], row_len: int) -> list[Example]:
    """First-fit-decreasing packing into rows of at most ``row_len`` tokens.

    Each example keeps its own position ids (restarting at 0), which transformers turns
    into a block-diagonal causal mask, so packed examples never attend to each other.
    """
    rows: list[list[Example]] = []
    space: list[int] = []
    for ex in sorted(examples, key=lambda e: len(e.input_ids), reverse=True):
        n = len(ex.input_ids)
        for r, free in enumerate(space):
            if n <= free:
                rows[r].append(ex)
                space[r] -= n
                break
        else:
            rows.append([ex])
            space.append(row_len - n)
    packed = []
    for row in rows:
        ids, labels, pos = [], [], []
        for ex in row:
            ids += ex.input_ids
            # The first token of each example must not be predicted from the previous one.
            labels += [IGNORE] + ex.labels[1:]
            pos += list(range(len(ex.input_ids)))
        packed.append(Example(ids, labels, pos, real_tokens=len(ids)))
    return packed


@dataclass
class Batch:
    input_ids: torch.Tensor
    labels: torch.Tensor
    attention_mask: torch.Tensor | None
    position_ids: torch.Tensor | None
    real_tokens: int  # non-padding tokens
    trainable_tokens: int  # tokens that carry loss (after the shift by one)

    def to(self, device: torch.device) -> "Batch":
        nb = device.type == "cuda"

        def mv(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=nb)

        return Batch(mv(self.input_ids), mv(self.labels), mv(self.attention_mask), mv(self.position_ids), self.real_tokens, self.trainable_tokens)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        out = {"input_ids": self.input_ids}
        if self.attention_mask is not None:
            out["attention_mask"] = self.attention_mask
        if self.position_ids is not None:
            out["position_ids"] = self.position_ids
        return out


class Collator:
    """Pads a list of examples to the longest (rounded up to ``pad_to_multiple``)."""

    def __init__(self, pad_id: int, pad_to_multiple: int = 1, pin_memory: bool = False):
        self.pad_id = pad_id
        self.multiple = pad_to_multiple
        self.pin = pin_memory

    def __call__(self, examples: list[Example]) -> Batch:
        longest = max(len(e.input_ids) for e in examples)
        width = -(-longest // self.multiple) * self.multiple
        packed = examples[0].position_ids is not None
        ids = torch.full((len(examples), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
        mask = torch.zeros((len(examples), width), dtype=torch.long)
        pos = torch.zeros((len(examples), width), dtype=torch.long)
        real = trainable = 0
        for r, ex in enumerate(examples):
            n = len(ex.input_ids)
            ids[r, :n] = torch.tensor(ex.input_ids)
            labels[r, :n] = torch.tensor(ex.labels)
            mask[r, :n] = 1
            pos[r, :n] = torch.tensor(ex.position_ids) if packed else torch.arange(n)
            # Padding after a packed row is one more "example" of its own, so it is masked out.
            if packed and n < width:
                pos[r, n:] = torch.arange(width - n)
            real += n
            trainable += sum(1 for x in ex.labels[1:] if x != IGNORE)
        tensors = [ids, labels, mask, pos]
        if self.pin:
            tensors = [t.pin_memory() for t in tensors]
        ids, labels, mask, pos = tensors
        if packed:
            return Batch(ids, labels, None, pos, real, trainable)
        return Batch(ids, labels, mask, None, real, trainable)


class EpochSampler:
    """This rank's share of a seeded permutation per epoch (as DistributedSampler, resumable).

    Kept by hand instead of torch's DistributedSampler because resuming needs to start in
    the middle of an epoch at an exact micro-batch, which that sampler cannot do.
    """

    def __init__(self, n: int, batch_size: int, rank: int, world: int, seed: int):
        self.n, self.bs, self.rank, self.world, self.seed = n, batch_size, rank, world, seed
        self.per_rank = -(-n // world)
        self.batches_per_epoch = -(-self.per_rank // batch_size)

    def batches(self, epoch: int, start: int = 0) -> Iterator[list[int]]:
        g = torch.Generator().manual_seed(self.seed + epoch)
        order = torch.randperm(self.n, generator=g).tolist()
        order += order[: self.per_rank * self.world - self.n]  # pad so every rank has as many
        mine = order[self.rank :: self.world]
        for b in range(start, self.batches_per_epoch):
            yield mine[b * self.bs : (b + 1) * self.bs]
