"""Dataset files and text are untrusted: a registry entry cannot reach outside dataset_dir,
a bad record is shown only as a short, escaped preview with tokens blanked (never copied
into train.log or events.jsonl), emoji codes stay literal, and a pasted 100 KB name gives a
readable message."""

import json
import os
import subprocess
import sys

import pytest
from textual.widgets import Button, Input, Label

from conftest import tiny_config, train_sync
from ftui.rundir.paths import EVENTS_FILE
from ftui.data.dataset_files import read_records
from ftui.data.records import DatasetPathError
from ftui.data.registry import resolve_datasets
from tests.test_tui_pilot import make_app, open_form, text_of, until

FTUI = [sys.executable, "-m", "ftui.cli.main"]
TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123"  # a fake token, shaped like a real one
RECORD = {"instruction": "hi", "output": "hello"}


def registry(tmp_path, file_name: str):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "dataset_info.json").write_text(json.dumps({"mine": {"file_name": file_name}}))
    return data


@pytest.mark.parametrize("file_name", ["../secret.jsonl", "../../etc/passwd", "/etc/passwd", "sub/../../secret.jsonl"])
def test_a_registry_entry_that_leaves_dataset_dir_is_refused(tmp_path, file_name):
    (tmp_path / "secret.jsonl").write_text(TOKEN + "\n")
    data = registry(tmp_path, file_name)
    with pytest.raises(DatasetPathError) as info:
        resolve_datasets("mine", str(data))
    assert "leaves dataset_dir" in str(info.value) and TOKEN not in str(info.value)


def test_a_link_the_user_placed_inside_dataset_dir_is_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps([RECORD]))
    data = registry(tmp_path, "linked.json")
    (data / "linked.json").symlink_to(elsewhere)
    (spec,) = resolve_datasets("mine", str(data))
    assert read_records(spec) == [RECORD]


def test_the_cli_refuses_an_escaping_registry_entry_before_starting(tmp_path):
    (tmp_path / "secret.jsonl").write_text(TOKEN + "\n")
    data = registry(tmp_path, "../secret.jsonl")
    conf = tmp_path / "run.yaml"
    tiny_config(tmp_path, dataset="mine", dataset_dir=str(data)).save(conf)
    out = subprocess.run([*FTUI, "train", str(conf)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "leaves dataset_dir" in out.stderr and TOKEN not in out.stderr + out.stdout
    assert not (tmp_path / "runs").exists()


async def test_the_form_marks_an_escaping_registry_entry_and_shortens_a_100kb_name(tmp_path):
    data = registry(tmp_path, "../secret.jsonl")
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await open_form(pilot, app)
        screen.query_one("#f-dataset", Input).value = "x" * 100_000  # pasted by mistake: File name too long
        await until(pilot, lambda: "characters" in text_of(screen.query_one("#preview")))
        assert len(text_of(screen.query_one("#preview"))) < 2000
        screen.query_one("#f-dataset_dir", Input).value = str(data)
        screen.query_one("#f-dataset", Input).value = "mine"
        await until(pilot, lambda: screen.query("#e-dataset") and screen.query_one("#e-dataset", Label).display)
        assert "leaves dataset_dir" in text_of(screen.query_one("#e-dataset", Label))
        assert screen.query_one("#start", Button).disabled


@pytest.mark.dist
def test_a_bad_record_holding_a_token_is_not_copied_into_the_logs(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(RECORD) + "\n" + TOKEN + " a token file mistaken for data\n")
    run, events, proc = train_sync(tiny_config(tmp_path, dataset=str(bad), max_steps=2))
    assert proc.returncode != 0
    end = events[-1]
    assert end["event"] == "run_end" and end["status"] == "failed" and "line 2 is not JSON" in end["reason"]
    assert "hf_<redacted>" in end["error_message"]
    for name in (EVENTS_FILE, "train.log"):
        assert TOKEN not in (run / name).read_text(), name


def test_a_record_preview_is_short_escaped_and_redacted(tmp_path):
    from ftui.data.records import DataFormatError, DatasetSpec, to_messages

    record = {"note": TOKEN, "instruction": "x\x1b[31m" + "y" * 5000, "output": 7}
    with pytest.raises(DataFormatError) as info:
        to_messages(record, DatasetSpec(name="d"), 0)
    message = str(info.value)
    assert "\x1b" not in message and "\\u001b" in message  # control characters show as escapes
    assert TOKEN not in message and len(message) < 600


def test_emoji_codes_in_dataset_text_print_literally(tmp_path):
    """`ftui train` prints the dataset's problem with its record: `:x:` stays `:x:`."""
    data = registry(tmp_path, "../:x: :thumbs_up:.json")
    conf = tmp_path / "run.yaml"
    tiny_config(tmp_path, dataset="mine", dataset_dir=str(data)).save(conf)
    out = subprocess.run([*FTUI, "train", str(conf)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "COLUMNS": "400"})
    assert out.returncode == 2
    assert ":x: :thumbs_up:" in out.stderr and "❌" not in out.stderr and "👍" not in out.stderr
