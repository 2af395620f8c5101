"""Issue 39, finding 6: a model config.json whose sizes are not positive whole numbers
(hidden_size 1e999, num_attention_heads 0, num_hidden_layers -1) is refused by name in the
form's validation, ftui plan and ftui train, exit 2, instead of an OverflowError, a
ZeroDivisionError, or a run of a model with no layers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from ftui.cli.main import main
from ftui.config.preflight import validate_config
from ftui.plan.model_sizes import MOST_SIZE, size_problems
from ftui.rundir.paths import DEMO_MODEL_DIR
from ftui.plan.model_shape import ModelShape, UnknownModel

ABSURD = [("hidden_size", "1e999", "inf"), ("num_attention_heads", "0", "0"), ("num_hidden_layers", "-1", "-1")]


def model_with(tmp_path: Path, key: str, raw: str) -> Path:
    """The demo model's folder with one config.json value written as ``raw`` JSON text."""
    folder = tmp_path / f"model-{key}"
    shutil.copytree(DEMO_MODEL_DIR, folder)
    config = json.loads((folder / "config.json").read_text())
    config[key] = "@@"
    (folder / "config.json").write_text(json.dumps(config).replace('"@@"', raw))
    return folder


def config_for(tmp_path: Path, model: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(dict(model_name_or_path=str(model), model_init="random", finetuning_type="full", dataset="ftui_demo",
                                        cutoff_len=128, device="cpu", max_steps=2, output_dir=str(tmp_path / "runs"))))
    return path


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan"), True, 128.0, "128", [128], MOST_SIZE + 1])
def test_sizes_that_are_not_positive_whole_numbers_are_named(value):
    problems = size_problems({"hidden_size": 128, "num_attention_heads": value})
    assert len(problems) == 1 and problems[0].startswith("config.json: num_attention_heads must be a positive whole number")


def test_a_sound_config_and_absent_or_null_sizes_pass():
    demo = json.loads((DEMO_MODEL_DIR / "config.json").read_text())
    assert size_problems(demo) == []
    assert size_problems({**demo, "head_dim": None, "num_key_value_heads": None}) == []
    assert size_problems({"text_config": {"hidden_size": 0}}) == ["config.json: hidden_size must be a positive whole number, got 0"]


@pytest.mark.parametrize("key,raw,shown", ABSURD)
def test_the_planner_refuses_them_by_name(tmp_path, key, raw, shown):
    """Was OverflowError (1e999), ZeroDivisionError (0) and a plan of a layer-less model (-1)."""
    config = json.loads((model_with(tmp_path, key, raw) / "config.json").read_text())
    with pytest.raises(UnknownModel, match=f"{key} must be a positive whole number, got {shown}"):
        ModelShape.from_config(config)


@pytest.mark.parametrize("key,raw,shown", ABSURD)
def test_the_forms_validation_names_the_key(tmp_path, key, raw, shown):
    model = model_with(tmp_path, key, raw)
    cfg, problems = validate_config(dict(model_name_or_path=str(model), model_init="random", finetuning_type="full", dataset="ftui_demo",
                                         cutoff_len=128, device="cpu"))
    assert cfg is None
    assert [(p.field, p.message) for p in problems] == [
        ("model_name_or_path", f"config.json: {key} must be a positive whole number, got {shown}")]


@pytest.mark.parametrize("command", ["plan", "train"])
@pytest.mark.parametrize("key,raw,shown", ABSURD)
def test_plan_and_train_refuse_them_with_exit_2(tmp_path, capsys, command, key, raw, shown):
    config = config_for(tmp_path, model_with(tmp_path, key, raw))
    assert main([command, str(config)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"config.json: {key} must be a positive whole number, got {shown}" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # nothing started


def test_plan_for_another_machine_refuses_them_too(tmp_path, capsys):
    config = config_for(tmp_path, model_with(tmp_path, "num_hidden_layers", "-1"))
    assert main(["plan", str(config), "--gpu-memory", "80"]) == 2
    assert "num_hidden_layers must be a positive whole number" in capsys.readouterr().err


def test_an_infinite_rope_factor_sets_no_limit_instead_of_crashing(tmp_path):
    from ftui.config.model_checks import position_limit

    assert position_limit({"max_position_embeddings": 512, "rope_scaling": {"rope_type": "linear", "factor": float("inf")}}) is None
    assert position_limit({"max_position_embeddings": 512, "rope_scaling": {"rope_type": "linear", "factor": 2.0}})[0] == 1024
