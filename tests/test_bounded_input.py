"""Issue 39, findings 5 and 11: a YAML alias bomb and too-deep JSON / YAML are refused in one
line with exit 2 by every command that reads configs or datasets; values quoted in messages
are capped. The bombs here are real ones; the commands that meet them run in a child whose
address space is capped (RLIMIT_AS), so a regression fails the test instead of the machine."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from ftui.safety.bounded_input import ALIAS_EXPANSION_LIMIT, JSONTooDeep, YAMLRefused, load_json, load_yaml, short_repr

# nine levels of nine aliases: 387,420,489 strings once written out, 560 bytes on disk
BOMB = "".join(
    [
        "model_name_or_path: ftui-demo\ndataset: ftui_demo\n",
        'l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *[f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9)],
    ]
)
DEPTH = 100_000
ADDRESS_SPACE = 3 << 30  # enough for Python, pydantic and Rich; far below what writing out the bomb takes


def capped_ftui(*args: str, cwd: Path = ROOT, timeout: int = 120) -> subprocess.CompletedProcess:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    return subprocess.run([sys.executable, "-m", "ftui.cli.main", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, preexec_fn=cap)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The command's whole stderr, which must be one error line (Rich may wrap it: unwrapped here)."""
    text = " ".join(proc.stderr.split())
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert text.startswith("error:") and text.count("error:") == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return text


def test_the_bomb_is_refused_before_anything_writes_it_out():
    with pytest.raises(YAMLRefused, match="more than 10,000 values"):
        load_yaml(BOMB)
    assert yaml.safe_load(BOMB)["l8"][0][0][0][0][0][0][0][0][0] == "lol"  # a real bomb: PyYAML reads it as shared lists


def test_a_value_that_contains_itself_and_too_deep_yaml_are_refused():
    with pytest.raises(YAMLRefused, match="contains it"):
        load_yaml("a: &a [1, *a]\n")
    with pytest.raises(YAMLRefused, match="nested deeper"):
        load_yaml("[" * DEPTH + "]" * DEPTH)


def test_ordinary_reuse_of_anchors_still_loads():
    """LLaMA-Factory-style reuse: a block used a few times, merge keys; up to the bound."""
    data = load_yaml("base: &b {lora_rank: 8, lora_alpha: 16}\nrun: {<<: *b, lora_rank: 16}\nlist: &l [a, b]\nboth: [*l, *l]\n")
    assert data["run"] == {"lora_rank": 16, "lora_alpha": 16} and data["both"] == [["a", "b"], ["a", "b"]]
    per = 100
    uses = ALIAS_EXPANSION_LIMIT // per
    at_bound = f"a: &a [{','.join(['1'] * (per - 1))}]\nb: [{','.join(['*a'] * uses)}]\n"  # adds exactly the bound
    assert len(load_yaml(at_bound)["b"]) == uses
    with pytest.raises(YAMLRefused):
        load_yaml(at_bound.replace("b: [", "b: [*a,"))
    big = yaml.safe_dump({"k": list(range(50_000))})  # no aliases: size is never refused here
    assert len(load_yaml(big)["k"]) == 50_000


@pytest.mark.parametrize("command", ["plan", "train", "data"])
def test_plan_train_and_data_refuse_the_bomb_in_one_line(tmp_path, command):
    config = tmp_path / "bomb.yaml"
    config.write_text(BOMB + f"output_dir: {tmp_path / 'runs'}\n")
    extra = ["--show", "1"] if command == "data" else []
    text = one_error_line(capped_ftui(command, str(config), *extra))
    assert "refused" in text and "aliases" in text and str(config) in text
    assert not (tmp_path / "runs").exists()


def test_ftui_config_refuses_the_bomb_before_the_app_starts(tmp_path):
    config = tmp_path / "bomb.yaml"
    config.write_text(BOMB)
    text = one_error_line(capped_ftui("--config", str(config)))
    assert "refused" in text


def test_a_set_value_that_is_a_bomb_is_refused(capsys):
    from ftui.cli.options import parse_set as _parse_set

    value = "[" + ", ".join(  # the anchors as one flow value
line.split(": ", 1)[1] for line in BOMB.splitlines()[2:]) + "]"
    with pytest.raises(SystemExit) as exit_:
        _parse_set([f"x={value}"])
    assert exit_.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--set x:" in err and "refused" in err and len(err) < 600  # the value is quoted capped


def test_too_deep_yaml_config_is_one_line_exit_2(tmp_path):
    config = tmp_path / "deep.yaml"
    config.write_text("model_name_or_path: ftui-demo\ndataset: ftui_demo\nx: " + "[" * DEPTH + "]" * DEPTH + "\n")
    assert "nested deeper" in one_error_line(capped_ftui("plan", str(config)))


def test_a_huge_value_is_quoted_capped_in_the_unknown_key_message(tmp_path):
    from ftui.config.problems import ConfigError
    from ftui.config.load import load_config

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"model_name_or_path": "ftui-demo", "dataset": "ftui_demo", "strange_key": ["x" * 1000] * 1000}))
    with pytest.raises(ConfigError) as err:
        load_config(config)
    line = next(line for line in str(err.value).splitlines() if "strange_key" in line)
    assert len(line) < 500  # was the whole million characters


def test_short_repr_walks_only_what_it_shows():
    shared: list = ["lol"] * 9
    for _ in range(12):  # 9**13 items written out
        shared = [shared] * 9
    assert len(short_repr(shared)) <= 200
    assert len(short_repr("x" * 10**6)) <= 200 and short_repr(10**5000) == "<a number of 5001 digits>"


def test_a_number_too_long_to_read_is_refused_in_one_line(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("model_name_or_path: ftui-demo\ndataset: ftui_demo\nx: " + "1" * 5000 + "\n")
    assert "a value cannot be read" in one_error_line(capped_ftui("plan", str(config)))


# --- JSON datasets (finding 11)


def deep_dataset(tmp_path: Path) -> Path:
    """A registry whose dataset is a JSON list nested 100,000 levels deep."""
    (tmp_path / "deep.json").write_text("[" * DEPTH + "]" * DEPTH)
    (tmp_path / "dataset_info.json").write_text(json.dumps({"deep": {"file_name": "deep.json"}}))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(dict(model_name_or_path="ftui-demo", model_init="random", finetuning_type="full", dataset="deep",
                                          dataset_dir=str(tmp_path), cutoff_len=128, device="cpu", output_dir=str(tmp_path / "runs"))))
    return config


def test_load_json_says_too_deep_as_a_value_error():
    with pytest.raises(JSONTooDeep, match="nested deeper"):
        load_json("[" * DEPTH + "]" * DEPTH)
    assert issubclass(JSONTooDeep, ValueError)


def test_reading_a_too_deep_dataset_is_a_data_format_error(tmp_path):
    from ftui.data.dataset_files import read_records
    from ftui.data.records import DataFormatError, DatasetSpec

    deep_dataset(tmp_path)
    with pytest.raises(DataFormatError, match="nested deeper"):
        read_records(DatasetSpec(name="deep", file_name=str(tmp_path / "deep.json")))
    (tmp_path / "deep.jsonl").write_text("[" * DEPTH + "]" * DEPTH + "\n")
    with pytest.raises(DataFormatError, match="line 1"):
        read_records(DatasetSpec(name="deep", file_name=str(tmp_path / "deep.jsonl")), limit=3)


def test_the_forms_preview_of_a_too_deep_dataset_says_why(tmp_path):
    """The launch form's preview worker: before, RecursionError escaped it (and took the app down)."""
    from ftui.tui.screens.launch_preview import records_preview

    deep_dataset(tmp_path)
    text, _fit = records_preview("deep", str(tmp_path))
    assert "nested deeper" in text.plain


def test_a_too_deep_registry_is_one_line_exit_2_for_plan(tmp_path):
    config = deep_dataset(tmp_path)
    (tmp_path / "dataset_info.json").write_text('{"deep": ' + "[" * DEPTH + "]" * DEPTH + "}")
    text = one_error_line(capped_ftui("plan", str(config)))
    assert "dataset_info.json is not valid JSON" in text and "nested deeper" in text


def test_ftui_data_on_a_too_deep_dataset_is_one_line_exit_2(tmp_path):
    config = deep_dataset(tmp_path)
    text = one_error_line(capped_ftui("data", str(config), "--show", "1", timeout=300))
    assert "deep.json is not valid JSON" in text and "nested deeper" in text


def test_a_child_that_fails_with_a_traceback_is_one_line_in_the_parent(tmp_path, capsys, monkeypatch):
    """Whatever the encoding child dies of, ftui data prints its last line, not the traceback."""
    from ftui.cli.main import main
    from ftui.jobs.examples import EncodedExamples

    crash = "def f(n): return f(n + 1)\nf(0)\n"
    monkeypatch.setattr(EncodedExamples, "command", lambda self, config: [sys.executable, "-c", crash])
    assert main(["data", "--preset", "demo", "--show", "1"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "RecursionError" in err and "Traceback" not in err


async def test_the_forms_load_refuses_the_bomb_and_stays_up(tmp_path, monkeypatch):
    """F3 (Load) reads the YAML in a worker: the bomb is one notification, the form keeps going."""
    from tests.test_tui_pilot import load_in_form, make_app, until

    monkeypatch.chdir(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        await load_in_form(pilot, app, tmp_path / "bomb.yaml", BOMB)
        await until(pilot, lambda: any("cannot load" in str(n.message) for n in app._notifications))
        said = next(str(n.message) for n in app._notifications if "cannot load" in str(n.message))
        assert "aliases" in said and "\n" not in said
        assert app.screen.yaml_path != str(tmp_path / "bomb.yaml")


def test_ftui_config_with_an_unreadable_file_is_exit_2_and_invalid_settings_still_open_the_form(tmp_path, monkeypatch, capsys):
    from ftui.cli.main import main
    from ftui.tui.app import FtuiApp

    opened = []
    monkeypatch.setattr(FtuiApp, "run", lambda self: opened.append(self.initial_config))
    assert main(["--config", str(tmp_path / "absent.yaml")]) == 2
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    assert main(["--config", str(tmp_path / "list.yaml")]) == 2
    assert opened == [] and capsys.readouterr().err.count("error:") == 2
    (tmp_path / "bad.yaml").write_text("model_name_or_path: ftui-demo\nlearning_rate: -1\n")
    assert main(["--config", str(tmp_path / "bad.yaml")]) == 0
    assert opened == [{"model_name_or_path": "ftui-demo", "learning_rate": -1}] and "warning:" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["predict", "eval"])
def test_predict_and_eval_on_a_too_deep_registry_are_one_line_exit_2(tmp_path, command):
    import shutil

    from ftui.rundir.paths import DEMO_MODEL_DIR

    model = tmp_path / "model"
    shutil.copytree(DEMO_MODEL_DIR, model)
    (model / "model.safetensors").touch()  # the checks read file names only; nothing is loaded before the refusal
    (tmp_path / "dataset_info.json").write_text('{"deep": ' + "[" * DEPTH + "]" * DEPTH + "}")
    proc = capped_ftui(command, "--model", str(model), "--dataset", "deep", "--dataset-dir", str(tmp_path), "--root", str(tmp_path / "runs"))
    assert "nested deeper" in one_error_line(proc)
    assert not (tmp_path / "runs").exists()
