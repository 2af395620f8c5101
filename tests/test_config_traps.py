"""Traps found on the way (issue 40, item 6): the demo's random weights and run name kept under
another model, `ftui --config MISSING.yaml`, and what an export with GGUF needs refused before
its job (the gguf package)."""

import importlib.util
import shutil

from textual.widgets import Input, Select

from ftui.cli.main import main
from ftui.rundir.paths import DEMO_MODEL_DIR
from tests.test_tui_pilot import make_app, until


async def test_a_model_typed_over_the_demo_resets_its_random_weights_and_run_name(tmp_path):
    model = tmp_path / "my-model"
    shutil.copytree(DEMO_MODEL_DIR, model)
    (model / "model.safetensors").write_bytes(b"")
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 45)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.action_demo()
        await until(pilot, lambda: screen.query_one("#f-run_name", Input).value == "demo")
        assert screen.query_one("#f-model_init", Select).value == "random"
        screen.query_one("#f-model_name_or_path", Input).value = str(model)
        await until(pilot, lambda: screen.query_one("#f-model_init", Select).value == "pretrained")
        await until(pilot, lambda: screen.query_one("#f-run_name", Input).value == "")
        assert any("the model changed" in n.message for n in app._notifications)


async def test_the_demo_itself_keeps_its_settings_until_the_model_changes(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 45)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.action_demo()
        await until(pilot, lambda: screen.query_one("#f-run_name", Input).value == "demo")
        screen.query_one("#f-learning_rate", Input).value = "0.001"  # another field: the demo stays the demo
        await pilot.pause(0.5)
        assert screen.query_one("#f-model_init", Select).value == "random" and screen.query_one("#f-run_name", Input).value == "demo"


def test_ftui_config_missing_is_refused_at_start(tmp_path, capsys, monkeypatch):
    import ftui.tui.app

    monkeypatch.setattr(ftui.tui.app.FtuiApp, "run", lambda self: (_ for _ in ()).throw(AssertionError("the form opened")))
    assert main(["--config", str(tmp_path / "MISSING.yaml")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "MISSING.yaml" in err and "no such file" in err


def test_a_gguf_export_without_the_gguf_package_is_refused_before_its_job(tmp_path, monkeypatch):
    """ftui export --gguf and the Export screen both size the export with export_needs: without
    the gguf package it says how to install it, instead of a job that fails after the merge."""
    from ftui.jobs.export import ExportError, export_needs
    from ftui.config.load import demo_config

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    run = tmp_path / "run"
    run.mkdir()
    try:
        export_needs(run, demo_config(), None, "bf16", "q8_0")
    except ExportError as err:
        assert "pip install 'ftui[gguf]'" in str(err)
    else:
        raise AssertionError("not refused")
    monkeypatch.setattr(importlib.util, "find_spec", real)
    assert export_needs(run, demo_config(), None, "bf16", "q8_0").params > 0
