"""Supervised fine-tuning (``stage: sft``): conversations rendered with the chat template, the
loss on the assistant's turns only.

Each record (alpaca or sharegpt, ``ftui.records``) becomes chat messages; the conversation is
rendered with the tokenizer's chat template (or a named built-in one) and everything but the
assistant's turns is masked from the loss. Examples longer than ``cutoff_len`` are cut, ones
left without an answer are dropped, and short ones can be packed into full rows.
"""

from __future__ import annotations

from typing import Any

from ftui.records import DataFormatError, DatasetSpec, to_messages
from ftui.runner.data import IGNORE, Example, Progress, TokenizedData, pack_examples
from ftui.runner.model import chat_template_for
from ftui.runner.stages.base import Stage


class SFTStage(Stage):
    name = "sft"

    def encode(self, loaded: list[tuple[DatasetSpec, list[dict[str, Any]]]], out: TokenizedData,
               report: Progress) -> list[Example]:
        cfg = self.cfg
        encoder = Encoder(self.tokenizer, chat_template_for(cfg, self.tokenizer))
        examples: list[Example] = []
        for spec, records in loaded:
            for i, record in enumerate(records):
                messages, tools = to_messages(record, spec, i)
                ids, labels = encoder.encode(messages, tools)
                out.records += 1
                report.tick(out.records)
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
        return examples

    def pack(self, train: list[Example]) -> list[Example]:
        return pack_examples(train, self.cfg.cutoff_len) if self.cfg.packing else train


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


