"""Pre-training (``stage: pt``): raw text, every token carries loss.

Documents come from raw-text datasets (``ftui.data.records.to_text``: a dataset_info entry with
``columns: {prompt: text}``, a ``.txt`` file with one document per line, json / jsonl /
parquet with a text column). They are tokenized and turned into rows as LLaMA-Factory's
pre-training processor does (``ftui.runner.pretrain_text``, checked token for token against
it): EOS after every document, BOS where the tokenizer adds one; with packing (the default
for pt) the documents are joined and cut into ``cutoff_len`` blocks, without it each document
is its own row, cut at ``cutoff_len``. Every token is a label, except the pad token, which
LLaMA-Factory's collator masks (so a tokenizer whose pad is its EOS does not learn the EOS
between documents, there as here).
"""

from __future__ import annotations

from typing import Any

from ftui.i18n import _
from ftui.data.records import DataFormatError, DatasetSpec, to_text
from ftui.runner.data import Example, Progress, TokenizedData
from ftui.runner.pretrain_text import pretrain_eos, pretrain_labels, pretrain_packing, pretrain_rows
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
        packing, length = pretrain_packing(self.cfg.packing, self.cfg.cutoff_len)
        rows = pretrain_rows(texts, self.tokenizer, length, packing=packing,
                             eos_token=pretrain_eos(self.tokenizer, self.cfg.template))
        if packing and not rows:
            raise DataFormatError(_("{n} documents hold fewer tokens than one block of cutoff_len={cutoff_len}: packing drops "
                                    "the last partial block; lower cutoff_len, add text, or set packing: false").format(
                n=out.records, cutoff_len=length))
        pad = self.tokenizer.pad_token_id
        return [Example(ids, pretrain_labels(ids, pad), real_tokens=len(ids)) for ids in rows]
