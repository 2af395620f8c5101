"""Pre-training (``stage: pt``): raw text, every token carries loss.

Documents come from raw-text datasets (``ftui.records.to_text``: a dataset_info entry with
``columns: {prompt: text}``, a ``.txt`` file with one document per line, json / jsonl /
parquet with a text column). They are tokenized and turned into rows as LLaMA-Factory's
pre-training processor does (``ftui.runner.pretrain_text``): EOS after every document, BOS
where the tokenizer adds one; with packing the documents are joined and cut into
``cutoff_len`` blocks, without it each document is its own row, cut at ``cutoff_len``.
"""

from __future__ import annotations

from typing import Any

from ftui.records import DataFormatError, DatasetSpec, to_text
from ftui.runner.data import Example, Progress, TokenizedData
from ftui.runner.pretrain_text import pretrain_rows
from ftui.runner.stages.base import Stage


class PretrainStage(Stage):
    name = "pt"

    def encode(self, loaded: list[tuple[DatasetSpec, list[dict[str, Any]]]], out: TokenizedData,
               report: Progress) -> list[Example]:
        texts: list[str] = []
        for spec, records in loaded:
            for i, record in enumerate(records):
                texts.append(to_text(record, spec, i))
                out.records += 1
                report.tick(out.records)
        rows = pretrain_rows(texts, self.tokenizer, self.cfg.cutoff_len, packing=self.cfg.packing,
                             eos_token=self.eos_token())
        if not rows:
            raise DataFormatError(
                f"{out.records} documents make no row of cutoff_len={self.cfg.cutoff_len} tokens"
                + (" (packing drops the last partial block); lower cutoff_len or add text" if self.cfg.packing else "")
            )
        return [Example(ids, list(ids), real_tokens=len(ids)) for ids in rows]

    def eos_token(self) -> str | None:
        """Llama 3's documents end with <|end_of_text|>, not its chat EOS (as LLaMA-Factory does)."""
        return "<|end_of_text|>" if self.cfg.template == "llama3" else None
