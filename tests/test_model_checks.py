"""Validation that looks at the model before a run does: a folder without weights, a cutoff_len
beyond the model's positions, a hub model that is neither local nor cached. Each is said by
``ftui train`` before any run starts, and by the launch form next to its field."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Button, Label

from ftui.config.problems import ConfigError
from ftui.config.load import parse_config
from ftui.rundir.paths import DEMO_MODEL_DIR
from tests.test_tui_pilot import make_app, until

DEMO_DATA = Path(__file__).resolve().parent.parent / "ftui" / "presets" / "demo" / "dataset.json"


@pytest.fixture(autouse=True)
def _no_hub_cache(tmp_path, monkeypatch):
    """An empty hub cache and no offline switch, whatever the machine has."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def config_only(tmp_path) -> Path:
    """A model folder as a new user may have it: config.json and a tokenizer, no weights."""
    folder = tmp_path / "my-model"
    shutil.copytree(DEMO_MODEL_DIR, folder)
    return folder


def train_cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "ftui.cli.main", "train", "--preset", "demo", "--runs-root", str(tmp_path / "runs"), *args],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_a_folder_without_weights_is_refused_and_random_init_offered(config_only):
    with pytest.raises(ConfigError) as info:
        parse_config({"model_name_or_path": str(config_only), "dataset": "x", "cutoff_len": 256})
    (problem,) = info.value.problems
    assert problem.field == "model_name_or_path" and "no weights found" in problem.message
    assert "model_init: random" in problem.message
    cfg, _ = parse_config({"model_name_or_path": str(config_only), "dataset": "x", "cutoff_len": 256, "model_init": "random"})
    assert cfg.model_init == "random"  # config.json and a tokenizer are all a random model needs
    (config_only / "model.safetensors").write_bytes(b"")
    assert parse_config({"model_name_or_path": str(config_only), "dataset": "x", "cutoff_len": 256})[0]


def test_a_folder_without_config_or_tokenizer_is_refused(config_only):
    (config_only / "tokenizer.json").unlink()
    (config_only / "tokenizer_config.json").unlink()
    with pytest.raises(ConfigError, match="no tokenizer in this folder"):
        parse_config({"model_name_or_path": str(config_only), "dataset": "x", "cutoff_len": 256, "model_init": "random"})
    (config_only / "config.json").unlink()
    with pytest.raises(ConfigError, match="has no config.json"):
        parse_config({"model_name_or_path": str(config_only), "dataset": "x", "cutoff_len": 256, "model_init": "random"})


def test_ftui_train_refuses_a_folder_without_weights_before_starting(tmp_path, config_only):
    proc = train_cli(tmp_path, "--set", f"model_name_or_path={config_only}", "--set", "model_init=pretrained", "--set", "cutoff_len=256")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = " ".join(proc.stderr.split())  # Rich wraps lines
    assert "no weights found" in said and "model_init: random" in said
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no run was started


async def test_form_says_the_folder_has_no_weights(tmp_path, config_only):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 45)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.fill({"model_name_or_path": str(config_only), "model_init": "pretrained", "dataset": str(DEMO_DATA),
                     "cutoff_len": "256"})
        # the label may first show an earlier validation's problem: wait for this one's
        await until(pilot, lambda: bool(screen.query("#e-model_name_or_path"))
                    and "no weights found" in str(screen.query_one("#e-model_name_or_path", Label).render()))
        error = screen.query_one("#e-model_name_or_path", Label)
        assert "model_init: random" in str(error.render())
        assert screen.query_one("#start", Button).disabled
        screen.fill({"model_init": "random"})
        await until(pilot, lambda: not screen.query_one("#start", Button).disabled)
        assert not screen.query_one("#e-model_name_or_path", Label).display


def model_folder(tmp_path, name="long", **config) -> Path:
    """A model folder with weights and a tokenizer, and config.json holding ``config``."""
    folder = tmp_path / name
    shutil.copytree(DEMO_MODEL_DIR, folder)
    data = json.loads((folder / "config.json").read_text()) | config
    (folder / "config.json").write_text(json.dumps(data))
    (folder / "model.safetensors").write_bytes(b"")
    return folder


def absolute_positions_folder(tmp_path, positions: int) -> Path:
    """A model folder whose config.json is GPT-2-style: a table of n_positions learned
    positions, no rotary key."""
    folder = model_folder(tmp_path, "gpt2-style")
    data = json.loads((folder / "config.json").read_text())
    data = {k: v for k, v in data.items() if k not in ("max_position_embeddings", "rope_theta")} | {"model_type": "gpt2", "n_positions": positions}
    (folder / "config.json").write_text(json.dumps(data))
    return folder


def test_cutoff_len_beyond_learned_positions_is_refused_naming_both(tmp_path):
    folder = absolute_positions_folder(tmp_path, 2048)
    base = {"model_name_or_path": str(folder), "dataset": "x", "template": "default"}
    assert parse_config(base | {"cutoff_len": 2048})[0].cutoff_len == 2048
    with pytest.raises(ConfigError) as info:
        parse_config(base | {"cutoff_len": 4096})
    (problem,) = info.value.problems
    assert problem.field == "cutoff_len" and "cutoff_len 4096" in problem.message and "max_position_embeddings 2048" in problem.message
    assert "lower cutoff_len to 2048" in problem.message and "learned positions" in problem.message


def test_cutoff_len_beyond_a_rope_models_positions_is_a_warning_with_the_rope_scaling_advice(tmp_path):
    """LLaMA-Factory trains a RoPE model past max_position_embeddings (the rotation is computed for
    any position): ftui starts it too, and says what that means and how to stretch it."""
    folder = model_folder(tmp_path, max_position_embeddings=2048)
    cfg, warnings = parse_config({"model_name_or_path": str(folder), "dataset": "x", "cutoff_len": 4096})
    assert cfg.cutoff_len == 4096
    (said,) = [w for w in warnings if "cutoff_len" in w]
    assert "cutoff_len 4096" in said and "max_position_embeddings 2048" in said and "lower cutoff_len to 2048" in said
    assert '"rope_scaling": {"rope_type": "linear", "factor": 2.0}' in said


def test_rope_scaling_lets_cutoff_len_go_as_far_as_it_stretches(tmp_path):
    linear = model_folder(tmp_path, "linear", max_position_embeddings=2048, rope_scaling={"rope_type": "linear", "factor": 2.0})
    cfg, warnings = parse_config({"model_name_or_path": str(linear), "dataset": "x", "cutoff_len": 4096})
    assert cfg and not [w for w in warnings if "cutoff_len" in w]
    _cfg, warnings = parse_config({"model_name_or_path": str(linear), "dataset": "x", "cutoff_len": 8192})
    (said,) = [w for w in warnings if "cutoff_len" in w]
    assert re.search("above the 4096 positions .*linear rope_scaling, factor 2 x 2048.*raise the factor", said), said
    # Llama 3.1: max_position_embeddings already counts the stretch
    llama31 = model_folder(tmp_path, "llama31", max_position_embeddings=131072,
                           rope_scaling={"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192})
    assert parse_config({"model_name_or_path": str(llama31), "dataset": "x", "cutoff_len": 131072}) [1] == []
    dynamic = model_folder(tmp_path, "dynamic", max_position_embeddings=2048, rope_scaling={"type": "dynamic", "factor": 2.0})
    assert parse_config({"model_name_or_path": str(dynamic), "dataset": "x", "cutoff_len": 16384})[1] == []


def test_ftui_train_and_plan_refuse_a_cutoff_len_beyond_learned_positions(tmp_path):
    folder = absolute_positions_folder(tmp_path, 2048)
    sets = ["--set", f"model_name_or_path={folder}", "--set", "model_init=pretrained", "--set", "cutoff_len=4096", "--set", "template=default"]
    train = train_cli(tmp_path, *sets)
    plan = subprocess.run([sys.executable, "-m", "ftui.cli.main", "plan", "--preset", "demo", *sets], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    for proc in (train, plan):
        said = " ".join(proc.stderr.split())
        assert proc.returncode == 2 and "cutoff_len 4096 is above the model's max_position_embeddings 2048" in said, said
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # refused before any run directory


def test_ftui_plan_warns_of_a_rope_models_cutoff_len_past_its_positions(tmp_path):
    folder = model_folder(tmp_path, max_position_embeddings=2048)
    sets = ["--set", f"model_name_or_path={folder}", "--set", "model_init=pretrained", "--set", "cutoff_len=4096"]
    plan = subprocess.run([sys.executable, "-m", "ftui.cli.main", "plan", "--preset", "demo", *sets], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    said = " ".join(plan.stderr.split())
    assert plan.returncode in (0, 1) and "cutoff_len 4096 is above the model's max_position_embeddings 2048" in said, said
    assert "rope_scaling" in said


async def test_form_shows_the_cutoff_problem_under_cutoff_len(tmp_path):
    folder = absolute_positions_folder(tmp_path, 1024)
    rope = model_folder(tmp_path, max_position_embeddings=1024)
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 45)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.fill({"model_name_or_path": str(folder), "model_init": "pretrained", "dataset": str(DEMO_DATA), "cutoff_len": "4096",
                     "template": "default"})
        await until(pilot, lambda: bool(screen.query("#e-cutoff_len")))
        assert "max_position_embeddings 1024" in str(screen.query_one("#e-cutoff_len", Label).render())
        assert screen.query_one("#start", Button).disabled
        screen.fill({"model_name_or_path": str(rope)})  # a RoPE model: a warning under the field, Start stays possible
        await until(pilot, lambda: bool(screen.query("#w-cutoff_len")) and screen.query_one("#w-cutoff_len", Label).display)
        assert "rope_scaling" in str(screen.query_one("#w-cutoff_len", Label).render())
        await until(pilot, lambda: not screen.query_one("#start", Button).disabled)


def cache_snapshot(tmp_path, name, *files) -> Path:
    snap = tmp_path / "hub" / ("models--" + name.replace("/", "--")) / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    for f in files:
        (snap / f).write_text("{}")
    return snap


def test_a_hub_model_neither_local_nor_cached_gets_a_warning_not_a_refusal(tmp_path):
    from ftui.plan.model_files import download_warning

    advice = download_warning("org/absent", random_init=False)
    assert "not a local folder and not in the hub cache" in advice and str(tmp_path / "hub") in advice
    assert "HF_ENDPOINT" in advice and "HF_HUB_OFFLINE=1" in advice and "https://huggingface.co" in advice
    assert parse_config({"model_name_or_path": "org/absent", "dataset": "x"})[0]  # the run may download it
    cache_snapshot(tmp_path, "org/partly", "config.json", "tokenizer.json")  # what ftui plan's download leaves
    assert download_warning("org/partly", random_init=False) is not None  # the weights are still to download
    assert download_warning("org/partly", random_init=True) is None
    cache_snapshot(tmp_path, "org/whole", "config.json", "tokenizer.json", "model.safetensors")
    assert download_warning("org/whole", random_init=False) is None
    assert download_warning("ftui-demo", random_init=True) is None and download_warning("./local", random_init=False) is None


def test_offline_a_hub_model_not_cached_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="HF_HUB_OFFLINE is set and this hub model is not .* in the hub cache"):
        parse_config({"model_name_or_path": "org/absent", "dataset": "x"})
    cache_snapshot(tmp_path, "org/whole", "config.json", "tokenizer.json", "model.safetensors")
    assert parse_config({"model_name_or_path": "org/whole", "dataset": "x"})[0]


def test_ftui_plan_warns_about_a_hub_model_before_anything_else(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ftui.cli.main", "plan", "--preset", "demo",
                           "--set", "model_name_or_path=org/absent", "--set", "model_init=pretrained"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    said = " ".join(proc.stderr.split())
    assert "warning: org/absent is not a local folder and not in the hub cache" in said, said
    assert proc.returncode == 2 and "no config.json" in said  # the planner has nothing to read


def test_a_run_that_cannot_reach_the_hub_ends_with_that_advice(tmp_path):
    from huggingface_hub.errors import LocalEntryNotFoundError

    from ftui.runner.faults import hint_for

    cfg, _ = parse_config({"model_name_or_path": "org/absent", "dataset": "x"})
    try:
        try:
            raise LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub")
        except LocalEntryNotFoundError as inner:
            raise OSError("We couldn't connect to 'https://huggingface.co' to load the files") from inner
    except OSError as exc:
        hint = hint_for(exc, cfg)
    assert hint.startswith("org/absent is not a local folder and not in the hub cache") and "HF_ENDPOINT" in hint


async def test_form_warns_next_to_the_model_field_and_still_allows_start(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 45)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.fill({"model_name_or_path": "org/absent", "model_init": "pretrained", "dataset": str(DEMO_DATA)})
        await until(pilot, lambda: bool(screen.query("#w-model_name_or_path")))
        warning = str(screen.query_one("#w-model_name_or_path", Label).render())
        assert "not a local folder and not in the hub cache" in warning and "HF_ENDPOINT" in warning
        await until(pilot, lambda: not screen.query_one("#start", Button).disabled)  # a warning, not a refusal
        screen.fill({"model_name_or_path": "ftui-demo", "model_init": "random", "cutoff_len": "128"})
        await until(pilot, lambda: not screen.query_one("#w-model_name_or_path", Label).display)


@pytest.mark.parametrize("name", ["a\x00b", "org/a\x00b", "x" * 100_000, "/" + "x" * 5000, "~nosuchuser/m", "org/" + "x" * 5000],
                         ids=["nul", "nul-hub", "long", "long-path", "no-such-user", "long-hub"])
def test_names_no_filesystem_takes_are_answered_not_raised(name):
    from ftui.plan.model_files import download_warning
    from ftui.config.preflight import validate_config

    download_warning(name, random_init=False)  # the form calls it per keystroke: a pasted name must not crash it
    validate_config({"model_name_or_path": name, "dataset": "x"})
