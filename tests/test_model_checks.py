"""Validation that looks at the model before a run does: a folder without weights, a cutoff_len
beyond the model's positions, a hub model that is neither local nor cached. Each is said by
``ftui train`` before any run starts, and by the launch form next to its field."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Button, Label

from ftui.config import ConfigError, parse_config
from ftui.paths import DEMO_MODEL_DIR
from tests.test_tui_pilot import make_app, until

DEMO_DATA = Path(__file__).resolve().parent.parent / "ftui" / "presets" / "demo" / "dataset.json"


@pytest.fixture(autouse=True)
def _no_hub_cache(tmp_path, monkeypatch):
    """An empty hub cache and no offline switch, whatever the machine has."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("FTUI_HOME", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def config_only(tmp_path) -> Path:
    """A model folder as a new user may have it: config.json and a tokenizer, no weights."""
    folder = tmp_path / "my-model"
    shutil.copytree(DEMO_MODEL_DIR, folder)
    return folder


def train_cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "ftui.cli", "train", "--preset", "demo", "--runs-root", str(tmp_path / "runs"), *args],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_a_folder_without_weights_is_refused_and_random_init_offered(config_only):
    with pytest.raises(ConfigError) as info:
        parse_config({"model_name_or_path": str(config_only), "dataset": "x"})
    (problem,) = info.value.problems
    assert problem.field == "model_name_or_path" and "no weights found" in problem.message
    assert "model_init: random" in problem.message
    cfg, _ = parse_config({"model_name_or_path": str(config_only), "dataset": "x", "model_init": "random"})
    assert cfg.model_init == "random"  # config.json and a tokenizer are all a random model needs
    (config_only / "model.safetensors").write_bytes(b"")
    assert parse_config({"model_name_or_path": str(config_only), "dataset": "x"})[0]


def test_a_folder_without_config_or_tokenizer_is_refused(config_only):
    (config_only / "tokenizer.json").unlink()
    (config_only / "tokenizer_config.json").unlink()
    with pytest.raises(ConfigError, match="no tokenizer in this folder"):
        parse_config({"model_name_or_path": str(config_only), "dataset": "x", "model_init": "random"})
    (config_only / "config.json").unlink()
    with pytest.raises(ConfigError, match="has no config.json"):
        parse_config({"model_name_or_path": str(config_only), "dataset": "x", "model_init": "random"})


def test_ftui_train_refuses_a_folder_without_weights_before_starting(tmp_path, config_only):
    proc = train_cli(tmp_path, "--set", f"model_name_or_path={config_only}", "--set", "model_init=pretrained")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = " ".join(proc.stderr.split())  # Rich wraps lines
    assert "no weights found" in said and "model_init: random" in said
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no run was started


async def test_form_says_the_folder_has_no_weights(tmp_path, config_only):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 45)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.fill({"model_name_or_path": str(config_only), "model_init": "pretrained", "dataset": str(DEMO_DATA)})
        await until(pilot, lambda: bool(screen.query("#e-model_name_or_path")))
        error = screen.query_one("#e-model_name_or_path", Label)
        assert "no weights found" in str(error.render()) and "model_init: random" in str(error.render())
        assert screen.query_one("#start", Button).disabled
        screen.fill({"model_init": "random"})
        await until(pilot, lambda: not screen.query_one("#start", Button).disabled)
        assert not screen.query_one("#e-model_name_or_path", Label).display
