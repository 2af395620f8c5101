"""Data: LLaMA-Factory formats and registry, prompt masking, cutoff, packing, token counts."""

import json
from pathlib import Path

import pytest
import torch

from ftui.runner.data import IGNORE, Collator, DataFormatError, Example, pack_examples
from ftui.runner.stages import build_datasets
from tests.conftest import tiny_config


def answer_text(tok, ex: Example) -> str:
    return tok.decode([t for t in ex.labels if t != IGNORE])


def test_alpaca_from_llamafactory_registry_masks_the_prompt(tmp_path, lf_data, demo_tokenizer):
    cfg = tiny_config(tmp_path, dataset="alpaca_en_demo,identity", dataset_dir=str(lf_data), template="chatml", max_samples=20).model_copy(update={"cutoff_len": 4096})  # past the demo model's 512 positions: only tokenized here
    data = build_datasets(cfg, demo_tokenizer)
    assert data.records == 40 and len(data.train) == 40
    first = json.loads((lf_data / "alpaca_en_demo.json").read_text())[0]
    ex = data.train[0]
    assert answer_text(demo_tokenizer, ex) == first["output"] + "<|im_end|>\n"
    full = demo_tokenizer.decode(ex.input_ids)
    assert first["instruction"] in full and full.startswith("<|im_start|>")


def test_sharegpt_with_tools_trains_calls_but_not_observations(tmp_path, lf_data, demo_tokenizer):
    cfg = tiny_config(tmp_path, dataset="glaive_toolcall_en_demo", dataset_dir=str(lf_data), template="qwen", max_samples=10).model_copy(update={"cutoff_len": 8192})  # past the demo model's 512 positions: only tokenized here
    data = build_datasets(cfg, demo_tokenizer)
    record = json.loads((lf_data / "glaive_toolcall_en_demo.json").read_text())[0]
    trained = answer_text(demo_tokenizer, data.train[0])
    full = demo_tokenizer.decode(data.train[0].input_ids)
    for turn in record["conversations"]:
        if turn["from"] == "gpt":
            assert turn["value"] in trained
        elif turn["from"] == "function_call":  # qwen's call syntax, learnt
            call = json.loads(turn["value"])
            assert f'<tool_call>\n{{"name": "{call["name"]}"' in trained
        else:
            assert turn["value"] not in trained and turn["value"] in full
    assert "<tools>" in full and "<tool_response>" in full  # the tools column in the system turn; observations


def test_malformed_record_message_shows_the_record_and_expected_fields(tmp_path, demo_tokenizer):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"instruction": "q", "output": "a"}, {"instruction": "q2", "answer": "SECRET-MARKER"}]))
    cfg = tiny_config(tmp_path, dataset=str(path))
    with pytest.raises(DataFormatError) as info:
        build_datasets(cfg, demo_tokenizer)
    msg = str(info.value)
    assert "record 1" in msg and "SECRET-MARKER" in msg and "'output'" in msg
    assert "instruction (text), input (optional text), output (text)" in msg


def test_unknown_format_bad_json_lines_empty_and_non_utf8(tmp_path, demo_tokenizer):
    cases = {
        "weird.json": (json.dumps([{"question": "q", "reply": "a"}]), "neither alpaca"),
        "lines.jsonl": ('{"instruction": "q", "output": "a"}\n{not json\n', "line 2 is not JSON"),
        "empty.json": ("", "is empty"),
    }
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(DataFormatError, match=expected):
            build_datasets(tiny_config(tmp_path, dataset=str(tmp_path / name)), demo_tokenizer)
    (tmp_path / "latin1.json").write_bytes('[{"instruction": "caf\xe9", "output": "x"}]'.encode("latin-1"))
    with pytest.raises(DataFormatError, match="not UTF-8"):
        build_datasets(tiny_config(tmp_path, dataset=str(tmp_path / "latin1.json")), demo_tokenizer)
    with pytest.raises(DataFormatError, match="there is no data/dataset_info.json"):
        build_datasets(tiny_config(tmp_path, dataset="no_such_dataset"), demo_tokenizer)


def test_an_unknown_dataset_name_offers_the_closest_registered_names(tmp_path):
    from ftui.data.registry import resolve_datasets

    names = ["alpaca_en_demo", "alpaca_zh_demo", "identity"] + [f"set{i:02d}" for i in range(20)]
    (tmp_path / "dataset_info.json").write_text(json.dumps({n: {"file_name": f"{n}.json"} for n in names}))
    with pytest.raises(DataFormatError, match="did you mean alpaca_en_demo, alpaca_zh_demo"):
        resolve_datasets("alpaca_en_dem", str(tmp_path))
    with pytest.raises(DataFormatError, match=r"known: alpaca_en_demo, .* set04 \.\.\. 23 in all"):
        resolve_datasets("qqqq", str(tmp_path))
    with pytest.raises(DataFormatError, match="dataset '/nowhere/mine.json': no such file$"):  # a path: said as one
        resolve_datasets("/nowhere/mine.json", str(tmp_path))
    with pytest.raises(DataFormatError, match=r"dataset 'mine.jsonl': no such file here \(.*\) or in dataset_dir"):
        resolve_datasets("mine.jsonl", str(tmp_path))


def test_sharegpt_jsonl_and_parquet_files_are_detected(tmp_path, demo_tokenizer):
    import pyarrow as pa
    import pyarrow.parquet as pq

    conv = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello there"}]}
    (tmp_path / "c.jsonl").write_text(json.dumps(conv) + "\n")
    data = build_datasets(tiny_config(tmp_path, dataset=str(tmp_path / "c.jsonl")), demo_tokenizer)
    assert answer_text(demo_tokenizer, data.train[0]).startswith("hello there")
    pq.write_table(pa.Table.from_pylist([{"instruction": "q", "input": "", "output": "parquet answer"}]), tmp_path / "a.parquet")
    data = build_datasets(tiny_config(tmp_path, dataset=str(tmp_path / "a.parquet")), demo_tokenizer)
    assert answer_text(demo_tokenizer, data.train[0]).startswith("parquet answer")


def test_cutoff_len_shares_each_turn_between_prompt_and_answer_and_keeps_the_example(tmp_path, demo_tokenizer):
    # LLaMA-Factory's infer_seqlen: a short answer stays whole and the prompt is cut (the
    # example is kept); else both shrink in proportion.
    path = tmp_path / "long.json"
    path.write_text(json.dumps([
        {"instruction": "short", "output": "ok"},
        {"instruction": "word " * 10, "output": "answer " * 200},
        {"instruction": "prompt " * 200, "output": "kept"},
    ]))
    data = build_datasets(tiny_config(tmp_path, dataset=str(path), cutoff_len=64), demo_tokenizer)
    assert max(len(e.input_ids) for e in data.train) == 64
    assert data.truncated == 2 and data.dropped == 0 and len(data.train) == 3
    assert answer_text(demo_tokenizer, data.train[2]).startswith("kept")
    assert answer_text(demo_tokenizer, data.train[1]).startswith("answer answer")  # both shrank
    assert any("cutoff_len=64" in w for w in data.warnings)


def test_collator_counts_only_real_tokens_and_loss_bearing_ones():
    a = Example([5, 6, 7, 8, 9], [IGNORE, IGNORE, 7, 8, 9])
    b = Example([5, 6], [IGNORE, 6])
    batch = Collator(pad_id=0)([a, b])
    assert batch.input_ids.shape == (2, 5)
    assert batch.real_tokens == 7  # 3 padding tokens are not counted
    assert batch.trainable_tokens == 4  # labels after the shift by one: 7,8,9 and 6
    assert batch.attention_mask.sum().item() == 7
    assert (batch.labels[1, 2:] == IGNORE).all()


def test_packed_examples_do_not_see_each_other(demo_tokenizer):
    from ftui.config.load import demo_config
    from ftui.runner.model import load_model

    model = load_model(demo_config(), torch.device("cpu")).eval()
    exs = [Example(list(range(3, 3 + n)), list(range(3, 3 + n))) for n in (7, 5, 9)]
    (row,) = pack_examples(exs, row_len=32)
    batch = Collator(pad_id=0)([row])
    assert batch.attention_mask is None and batch.position_ids[0, :9].tolist() == list(range(9))
    with torch.no_grad():
        packed = model(**batch.model_inputs(), use_cache=False).logits[0]  # as the loop calls it
        offset = 0
        for ex in sorted(exs, key=lambda e: -len(e.input_ids)):
            alone = model(input_ids=torch.tensor([ex.input_ids])).logits[0]
            n = len(ex.input_ids)
            torch.testing.assert_close(packed[offset : offset + n], alone, atol=1e-4, rtol=1e-4)
            offset += n
    assert batch.real_tokens == 21 and batch.trainable_tokens == 21 - 3  # no label across examples


def test_data_seed_orders_the_data_apart_from_seed_and_drop_last_drops_the_short_batch():
    """LLaMA-Factory's (transformers') data_seed and dataloader_drop_last change what is
    trained: both are implemented, not listed as without effect."""
    from ftui.runner.data import run_sampler

    def order(**over):
        sampler = run_sampler(tiny_config(Path("/tmp"), **over), n=10, rank=0, world=1)
        return [i for b in sampler.batches(epoch=0) for i in b], sampler.batches_per_epoch

    plain, batches = order(per_device_train_batch_size=4)
    assert batches == 3 and sorted(plain) == list(range(10))  # 4 + 4 + 2
    assert order(per_device_train_batch_size=4, data_seed=42) == (plain, 3)  # data_seed defaults to seed
    reseeded, _ = order(per_device_train_batch_size=4, data_seed=7)
    assert reseeded != plain and order(per_device_train_batch_size=4, seed=7, data_seed=42)[0] == plain
    dropped, batches = order(per_device_train_batch_size=4, dataloader_drop_last=True)
    assert batches == 2 and dropped == plain[:8]
    halves = [run_sampler(tiny_config(Path("/tmp"), per_device_train_batch_size=4, dataloader_drop_last=True), 10, r, 2)
              for r in (0, 1)]
    assert [s.batches_per_epoch for s in halves] == [1, 1]  # 5 rows per rank: one batch of 4 each
