"""Pre-training rows (``stage: pt``) from raw documents, token for token as LLaMA-Factory 0.9.5.

LLaMA-Factory's ``PretrainDatasetProcessor`` (data/processor/pretrain.py) appends the EOS
token's *text* to every document and tokenizes with ``add_special_tokens=False``; then:

- packing on (the default for pt): the documents of one map batch (1000 documents,
  ``preprocessing_batch_size``) are concatenated and cut into ``cutoff_len`` blocks, the
  batch's remainder shorter than a block is dropped, and where the tokenizer's
  ``add_bos_token`` is true the first token of every block is *overwritten* with BOS;
- packing off: each document (with its BOS text in front where ``add_bos_token`` is true)
  is tokenized on its own and truncated to ``cutoff_len``, so a long one loses its EOS.

Every token is a label, except that LLaMA-Factory's collator (transformers'
DataCollatorForLanguageModeling) masks every token equal to the pad id: see ``pretrain_labels``.
This module does exactly the same string and tokenizer calls rather than re-deriving them,
so a tokenizer's quirks (a Metaspace prefix that ``<s>`` in front suppresses, a
``truncation_side``) come out the same. Checked against LLaMA-Factory's own output in
tests/test_pretrain_text.py (tests/data/llamafactory_pt/).
"""

from __future__ import annotations

from typing import Any

from ftui.i18n import _
from ftui.presets.templates import TEMPLATES
from ftui.runner.data import IGNORE

LF_BATCH = 1000  # LLaMA-Factory's preprocessing_batch_size default: packing restarts every batch
# The EOS text LLaMA-Factory puts between documents for a named template: llama3 is
# special-cased in its pt processor; the others that replace EOS use their first stop word
# (Template.fix_special_tokens, replace_eos). Any other template, or none, uses the
# tokenizer's own eos_token.
TEMPLATE_EOS = {name: t.stop_words[0] for name, t in TEMPLATES.items() if t.replace_eos} | {"llama3": "<|end_of_text|>"}


def pretrain_eos(tokenizer: Any, template: str | None = None) -> str:
    """The text LLaMA-Factory appends to each document for this tokenizer and ``template``."""
    eos = TEMPLATE_EOS.get(template or "") or tokenizer.eos_token
    if not eos:
        raise ValueError(_("the tokenizer has no EOS token to end pre-training documents with; set eos_token in the model's "
                           "tokenizer_config.json"))
    return eos


def pretrain_packing(packing: bool | None, cutoff_len: int) -> tuple[bool, int]:
    """(packing, block length) as LLaMA-Factory's argument parser leaves them for pt.

    ``packing`` unset means on, at ``cutoff_len``. Written ``packing: true``, the
    DataArguments check (which runs before the pt default is filled in) subtracts one, so
    blocks are ``cutoff_len - 1`` tokens. ``packing: false`` keeps ``cutoff_len``."""
    if packing is None:
        return True, cutoff_len
    return packing, cutoff_len - 1 if packing else cutoff_len


def pretrain_rows(
    texts: list[str],
    tokenizer: Any,
    cutoff_len: int,
    packing: bool,
    eos_token: str | None = None,
    batch_size: int = LF_BATCH,
) -> list[list[int]]:
    """Input ids of the training rows LLaMA-Factory makes from ``texts`` (documents, in order).

    ``eos_token``: the text ending each document (default the tokenizer's; see
    ``pretrain_eos``). ``batch_size``: LLaMA-Factory packs each map batch on its own."""
    if cutoff_len < 1:
        raise ValueError(f"cutoff_len must be at least 1, not {cutoff_len}")
    eos = pretrain_eos(tokenizer) if eos_token is None else eos_token
    add_bos = bool(getattr(tokenizer, "add_bos_token", False))
    if add_bos and tokenizer.bos_token is None:
        raise ValueError(_("the tokenizer sets add_bos_token but has no bos_token"))
    rows: list[list[int]] = []
    for start in range(0, len(texts), batch_size):
        documents = [text + eos for text in texts[start : start + batch_size]]
        if packing:
            rows += _packed(documents, tokenizer, cutoff_len, add_bos)
        else:
            rows += _truncated(documents, tokenizer, cutoff_len, add_bos)
    return rows


def _packed(documents: list[str], tokenizer: Any, block: int, add_bos: bool) -> list[list[int]]:
    ids = [t for doc in tokenizer(documents, add_special_tokens=False, verbose=False)["input_ids"] for t in doc]
    rows = [ids[i : i + block] for i in range(0, len(ids) // block * block, block)]
    if add_bos:
        for row in rows:
            row[0] = tokenizer.bos_token_id
    return rows


def _truncated(documents: list[str], tokenizer: Any, cutoff_len: int, add_bos: bool) -> list[list[int]]:
    if add_bos:
        documents = [tokenizer.bos_token + doc for doc in documents]
    encoded = tokenizer(documents, add_special_tokens=False, truncation=True, max_length=cutoff_len, verbose=False)
    return [list(ids) for ids in encoded["input_ids"]]


def pretrain_labels(row: list[int], pad_token_id: int | None) -> list[int]:
    """Labels as LLaMA-Factory's pt collator makes them: the input ids, with every token equal
    to the pad id ignored. Where the tokenizer has no pad token LLaMA-Factory sets pad = EOS,
    so the EOS between documents is then not learned."""
    return [IGNORE if pad_token_id is not None and t == pad_token_id else t for t in row]
