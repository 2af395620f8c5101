"""`ftui data`: the training examples exactly as the runner's stage encodes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from ftui.cli.main import main
from ftui.config.load import load_config
from ftui.data.examples import example_text

MARKUP = "[bold red]not markup[/bold red] :x:"


def write_config(tmp_path: Path, **overrides) -> Path:
    data = dict(model_name_or_path="ftui-demo", model_init="random", finetuning_type="full", dataset="ftui_demo",
                cutoff_len=128, max_samples=16, device="cpu", output_dir=str(tmp_path / "runs"))
    data.update(overrides)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def ftui_data(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ftui.cli.main", "data", *args], capture_output=True, text=True, timeout=600, cwd=ROOT)


def stage_examples(config: Path) -> list[dict]:
    """What a run's stage builds from the config, before shuffling and packing."""
    from ftui.runner.model import load_tokenizer
    from ftui.runner.stages import make_stage

    cfg, _ = load_config(config)
    data = make_stage(cfg, load_tokenizer(cfg)).build_data(pack=False)
    return [{"input_ids": e.input_ids, "labels": e.labels} for e in data.train]


def said(capsys) -> str:
    """stderr with Rich's line wrapping undone."""
    return " ".join(capsys.readouterr().err.split())


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_dump_is_what_the_sft_stage_trains_on(tmp_path, capsys):
    config = write_config(tmp_path, val_size=0.25, packing=True)
    out = tmp_path / "out.jsonl"
    proc = ftui_data(str(config), "--dump", str(out))
    assert proc.returncode == 0, proc.stderr
    dumped = read_jsonl(out)
    assert dumped == stage_examples(config)
    assert len(dumped) == 12  # 16 records, 4 held out for eval
    assert all(set(row) == {"input_ids", "labels"} and -100 in row["labels"] for row in dumped)
    assert "4 examples held out for eval" in proc.stderr and "wrote 12 examples" in proc.stderr
    assert not (tmp_path / "out.jsonl.part").exists()
    # an existing file is replaced only with --force; a directory or a device never
    from ftui.cli.main import main

    out.write_text("the user's own file\n")
    assert main(["data", str(config), "--dump", str(out)]) == 2
    assert out.read_text() == "the user's own file\n" and "--force" in said(capsys)
    assert main(["data", str(config), "--dump", "/dev/null", "--force"]) == 2 and "not a regular file" in said(capsys)
    assert main(["data", str(config), "--dump", str(out), "--force"]) == 0 and read_jsonl(out) == dumped


@pytest.mark.slow  # CI time: --dump of sft in the test above, pt's blocks in test_stage_pt.py
def test_dump_of_a_pretraining_config(tmp_path, lf_data):
    config = write_config(tmp_path, stage="pt", dataset="wiki_demo", dataset_dir=str(lf_data), cutoff_len=64, max_samples=20)
    out = tmp_path / "pt.jsonl"
    proc = ftui_data(str(config), "--dump", str(out))
    assert proc.returncode == 0, proc.stderr
    dumped = read_jsonl(out)
    assert dumped == stage_examples(config) and all(len(row["input_ids"]) == 64 for row in dumped)


def test_show_prints_the_examples_with_counts_and_dataset_text_as_text(tmp_path):
    data = tmp_path / "set.json"
    data.write_text(json.dumps([{"instruction": f"{MARKUP} {i}", "input": "", "output": f"answer {i} [/]"} for i in range(3)]))
    config = write_config(tmp_path, dataset=str(data), template="chatml")
    proc = ftui_data(str(config), "--show", "2")
    assert proc.returncode == 0, proc.stderr
    assert f"{MARKUP} 0" in proc.stdout and "answer 1 [/]" in proc.stdout and "answer 2" not in proc.stdout
    rows = stage_examples(config)[:2]
    for i, row in enumerate(rows, 1):
        labelled = sum(1 for x in row["labels"] if x != -100)
        assert f"example {i}: {len(row['input_ids'])} tokens, {labelled} with loss" in proc.stdout


def test_example_text_dims_the_masked_part_only():
    row = {"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4],
           "segments": [["<user>[b]hi[/b]\x1b[31m", True], ["answer", False]]}
    text = example_text(1, row)
    assert text.plain.startswith("example 1: 4 tokens, 2 with loss")
    assert "[b]hi[/b]" in text.plain and "\x1b" not in text.plain  # markup kept as text, control codes escaped
    dim = "".join(text.plain[s.start:s.end] for s in text.spans if s.style == "dim")
    assert dim == "<user>[b]hi[/b]\\x1b[31m" and "answer" not in dim


@pytest.mark.parametrize("args, wording", [
    ([], "give --show N"),
    (["--show", "1", "--dump", "x.jsonl"], "give --show N"),
    (["--show", "0"], "1 or more"),
    (["--dump", "/nonexistent-dir/x.jsonl"], "is not a directory"),
])
def test_usage_errors_exit_2(tmp_path, capsys, args, wording):
    assert main(["data", str(write_config(tmp_path)), *args]) == 2
    assert wording in said(capsys)


def test_config_errors_exit_2(tmp_path, capsys):
    assert main(["data", str(tmp_path / "nosuch.yaml"), "--show", "1"]) == 2
    assert "no such file" in said(capsys)
    assert main(["data", str(write_config(tmp_path, cutoff_len=2)), "--show", "1"]) == 2
    assert "cutoff_len" in said(capsys)


def test_a_dataset_the_stage_refuses_exits_2_with_its_message(tmp_path):
    data = tmp_path / "bad.json"
    data.write_text(json.dumps([{"question": "no alpaca columns"}]))
    out = tmp_path / "out.jsonl"
    proc = ftui_data(str(write_config(tmp_path, dataset=str(data))), "--dump", str(out))
    assert proc.returncode == 2, proc.stderr
    assert "bad.json" in proc.stderr and not out.exists() and not (tmp_path / "out.jsonl.part").exists()


def test_a_hub_that_cannot_be_reached_fails_at_once_with_the_hint(tmp_path):
    import os

    config = write_config(tmp_path, model_name_or_path="someorg/somemodel")
    env = dict(os.environ, HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_CACHE=str(tmp_path / "empty-cache"))  # nothing listens there
    env.pop("HF_HUB_OFFLINE", None)
    proc = subprocess.run([sys.executable, "-m", "ftui.cli.main", "data", str(config), "--show", "1"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, env=env)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 1, proc.stderr
    assert "could not be reached and someorg/somemodel is not in the hub cache" in said and "HF_ENDPOINT to a mirror" in said


def test_showing_examples_never_writes_tokenized_path_but_reads_it_once_written(tmp_path):
    """ftui data and the form's preview encode in a child; a tokenized_path not written yet is
    left to the first training run (a preview saved ids that later runs with another template
    or cutoff_len read instead of their data)."""
    from conftest import tiny_config
    from ftui.jobs.examples import EncodedExamples

    enc = tmp_path / "enc"
    cfg = tiny_config(tmp_path, tokenized_path=str(enc))
    assert EncodedExamples(cfg).readonly_config().tokenized_path is None
    enc.mkdir()
    (enc / "dataset_dict.json").write_text('{"splits": ["train"]}')
    assert EncodedExamples(cfg).readonly_config().tokenized_path == str(enc)
