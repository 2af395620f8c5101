"""Pre-training (stage: pt) data: raw-text records (ftui.data.records) and the rows built from them
(ftui.runner.pretrain_text), checked token for token against what LLaMA-Factory 0.9.5 itself
made of the same data (tests/data/llamafactory_pt/reference.json; see its README)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from conftest import DATA, ROOT
from ftui.data.dataset_files import read_records
from ftui.data.records import DataFormatError, DatasetSpec, to_messages, to_text
from ftui.data.registry import resolve_datasets
from ftui.runner.pretrain_text import pretrain_eos, pretrain_labels, pretrain_packing, pretrain_rows

REFERENCE = json.loads((DATA / "llamafactory_pt" / "reference.json").read_text())
TOKENIZERS = {"demo": ROOT / "ftui" / "presets" / "demo" / "model", "llama": DATA / "llama_tokenizer"}
_loaded: dict[tuple[str, bool], object] = {}


def tokenizer(name: str, force_bos: bool):
    """The tokenizer as the reference case had it (force_bos: add_bos_token as transformers 4.x
    sets it from tokenizer_config.json; 5.x leaves it off for a tokenizer.json)."""
    if (name, force_bos) not in _loaded:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(TOKENIZERS[name])
        if force_bos:
            tok.add_bos_token = True
        _loaded[name, force_bos] = tok
    return _loaded[name, force_bos]


def case_id(case: dict) -> str:
    return "-".join(str(case[k]) for k in ("dataset", "tokenizer", "cutoff_len", "packing_setting")) + (
        "-bos" * case["force_bos"] + f"-{case['template'] or ''}" + f"-b{case['preprocessing_batch_size'] or ''}"
    )


def documents(case: dict, lf_data: Path, tmp_path: Path) -> list[str]:
    """The case's documents, read by ftui.data.dataset_files from the same registry entry."""
    if case["dataset"] == "edge_demo":
        (tmp_path / "edge_demo.txt").write_bytes(REFERENCE["edge_text"].encode())
        (tmp_path / "dataset_info.json").write_text(json.dumps(
            {"edge_demo": {"file_name": "edge_demo.txt", "columns": {"prompt": "text"}}}))
        data_dir = tmp_path
    else:
        data_dir = lf_data
    (spec,) = resolve_datasets(case["dataset"], str(data_dir))
    return [to_text(r, spec, i) for i, r in enumerate(read_records(spec))]


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=case_id)
def test_rows_match_llamafactory_token_for_token(case, lf_data, tmp_path):
    tok = tokenizer(case["tokenizer"], case["force_bos"])
    packing, block = pretrain_packing(case["packing_setting"], case["cutoff_len"])
    assert (packing, block) == (case["lf_packing"], case["lf_cutoff_len"])
    rows = pretrain_rows(
        documents(case, lf_data, tmp_path), tok, block, packing,
        eos_token=pretrain_eos(tok, case["template"]), batch_size=case["preprocessing_batch_size"] or 1000,
    )
    assert len(rows) == case["examples"]
    assert rows[:2] == case["first"] and rows[-1] == case["last"]
    assert sum(len(r) for r in rows) == case["lengths_sum"]
    digest = hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()
    assert digest == case["sha256"]


def test_packing_is_on_for_pt_unless_turned_off():
    assert pretrain_packing(None, 128) == (True, 128)
    assert pretrain_packing(False, 128) == (False, 128)
    assert pretrain_packing(True, 128) == (True, 127)  # LLaMA-Factory's quirk, see the docstring


def test_a_block_starts_with_bos_only_where_the_tokenizer_adds_one():
    llama = tokenizer("llama", True)
    rows = pretrain_rows(["one two three four five six"] * 4, llama, 8, packing=True)
    assert rows and all(r[0] == llama.bos_token_id for r in rows)
    (row,) = pretrain_rows(["one two"], llama, 64, packing=False)
    assert row[0] == llama.bos_token_id and row[-1] == llama.eos_token_id
    demo = tokenizer("demo", False)
    (row,) = pretrain_rows(["one two"], demo, 64, packing=False)
    assert row[-1] == demo.eos_token_id and demo.bos_token_id is None


def test_labels_ignore_the_pad_id_as_llamafactory_does():
    assert pretrain_labels([5, 2, 7, 2], pad_token_id=2) == [5, -100, 7, -100]
    assert pretrain_labels([5, 2], pad_token_id=None) == [5, 2]


def test_a_tokenizer_without_eos_is_refused_with_a_reason():
    class NoEos:
        eos_token = None

    with pytest.raises(ValueError, match="no EOS token"):
        pretrain_rows(["x"], NoEos(), 8, packing=True)


# --- raw-text records -------------------------------------------------------------------


def text_spec(tmp_path: Path, name: str, content: bytes) -> DatasetSpec:
    path = tmp_path / name
    path.write_bytes(content)
    (spec,) = resolve_datasets(str(path), str(tmp_path))
    return spec


def test_a_txt_file_is_one_document_per_line_blank_lines_kept(tmp_path):
    spec = text_spec(tmp_path, "d.txt", "a\r\n\r\nb  \n\nc\rd\u2028e\x0cf\n \nlast".encode())
    texts = [to_text(r, spec, i) for i, r in enumerate(read_records(spec))]
    assert texts == ["a", "", "b  ", "", "c", "d\u2028e\x0cf", " ", "last"]
    assert read_records(spec, limit=2) == [{"text": "a"}, {"text": ""}]


def test_a_txt_preview_reads_a_bounded_head(tmp_path, monkeypatch):
    import ftui.data.dataset_files as dataset_files

    monkeypatch.setattr(dataset_files, "TEXT_PREVIEW_BYTES", 65)
    spec = text_spec(tmp_path, "big.txt", (("é" * 40 + "\n") * 100).encode())  # 81 bytes a line
    assert read_records(spec, limit=3) == [{"text": "é" * 32}]  # cut inside one line, not inside a character
    monkeypatch.setattr(dataset_files, "TEXT_PREVIEW_BYTES", 200)
    assert read_records(spec, limit=3) == [{"text": "é" * 40}] * 2  # whole lines where the head holds some
    assert len(read_records(spec)) == 100


def test_a_txt_that_is_not_utf8_says_where(tmp_path):
    spec = text_spec(tmp_path, "latin1.txt", "fine\ncaf\xe9\n".encode("latin-1"))
    for limit in (None, 3):
        with pytest.raises(DataFormatError, match=r"latin1.txt is not UTF-8 text \(byte 8, line 2\); save it as UTF-8"):
            read_records(spec, limit=limit)


def test_an_empty_txt_is_refused(tmp_path):
    spec = text_spec(tmp_path, "empty.txt", b"")
    with pytest.raises(DataFormatError, match="empty; it needs one document per line"):
        read_records(spec)


def test_a_record_without_the_text_column_names_the_record(tmp_path):
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123"
    lines = [json.dumps({"text": "fine"}), json.dumps({"body": "no text here " + token})]
    spec = text_spec(tmp_path, "docs.jsonl", "\n".join(lines).encode())
    records = read_records(spec)
    assert to_text(records[0], spec, 0) == "fine"
    with pytest.raises(DataFormatError) as info:
        to_text(records[1], spec, 1)
    message = str(info.value)
    assert "docs.jsonl' record 1: missing or non-text field 'text'" in message
    assert "no text here" in message and token not in message and "hf_<redacted>" in message
    with pytest.raises(DataFormatError, match="record 0: missing or non-text field 'text'"):
        to_text({"text": 7}, spec, 0)


def test_registry_columns_prompt_and_query_make_the_document(lf_data):
    (c4,) = resolve_datasets("c4_demo", str(lf_data))
    first = read_records(c4, limit=1)[0]
    assert to_text(first, c4, 0) == first["text"]
    alpaca = DatasetSpec(name="a")  # an alpaca entry without columns: instruction + "\n" + input, as LLaMA-Factory
    assert to_text({"instruction": "do", "input": "this", "output": "dropped"}, alpaca, 0) == "do\nthis"
    assert to_text({"instruction": "do", "input": "", "output": "x"}, alpaca, 0) == "do"


def test_a_sharegpt_dataset_is_refused_for_pretraining(lf_data):
    (spec,) = resolve_datasets("glaive_toolcall_en_demo", str(lf_data))
    with pytest.raises(DataFormatError, match="is sharegpt .*pre-training .* reads raw text"):
        to_text(read_records(spec, limit=1)[0], spec, 0)


def test_sft_still_reads_alpaca_and_names_raw_text_as_pt(tmp_path):
    from ftui.data.records import apply_detected_format

    spec = text_spec(tmp_path, "docs.txt", b"just text\n")
    with pytest.raises(DataFormatError, match=r"raw text, a 'text' field, is for stage: pt"):
        apply_detected_format(spec, read_records(spec)[0])
    alpaca = text_spec(tmp_path, "a.json", json.dumps([{"instruction": "q", "output": "a"}]).encode())
    record = read_records(alpaca)[0]
    apply_detected_format(alpaca, record)
    assert to_messages(record, alpaca, 0)[0][-1] == {"role": "assistant", "content": "a"}
