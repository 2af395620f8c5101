"""The launch form and the config's messages in Chinese (issue 19): the language switch keeps
what the form holds, `ftui train bad.yaml` says its problems in Chinese, and the form's
layout in zh at 80x24 and 120x40 (SVG snapshots)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Button, Input, Label, RadioButton, Select, Switch

from ftui.i18n import set_language
from ftui.tui.app import FtuiApp
from ftui.tui.screens.launch import LaunchScreen
from tests.fixtures_runs import fixed_sampler
from tests.test_tui_pilot import make_app, text_of, until

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def zh():
    set_language("zh", export=False)
    try:
        yield
    finally:
        set_language("en", export=False)


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def label_of(screen, key: str) -> str:
    return str(screen.query_one(f"#row-{key}").query_one(Label).render())


async def switch_language(app, lang: str) -> None:
    """What the app's language switch does: the language, then every screen recomposed."""
    set_language(lang, export=False)
    await app.screen.recompose()


async def test_switching_language_keeps_the_form_and_translates_it(tmp_path):
    app = make_app(tmp_path)
    try:
        async with app.run_test(size=(100, 40)) as pilot:
            screen = app.screen
            assert isinstance(screen, LaunchScreen)
            await until(pilot, lambda: screen._ready)
            screen.query_one("#f-model_name_or_path", Input).value = str(tmp_path / "my-model")
            screen.query_one("#f-dataset", Input).value = "alpaca_en_demo"
            screen.query_one("#f-learning_rate", Input).value = "fast"  # invalid: its error shows
            screen.query_one("#f-seed", Input).value = "7"
            screen.query_one("#f-method", Select).value = "freeze"
            screen.query_one("#f-stage", Select).value = "dpo"
            screen.query_one("#f-gradient_checkpointing", Switch).value = True
            screen.query_one("#p-bf16", RadioButton).value = True
            await until(pilot, lambda: screen.query("#e-learning_rate"))
            before = screen.values()
            assert before["method"] == "freeze" and before["precision"] == "bf16" and before["seed"] == "7"

            await switch_language(app, "zh")
            await until(pilot, lambda: screen._ready and screen.query("#e-learning_rate") and screen.values() == before)
            assert label_of(screen, "learning_rate") == "学习率" and label_of(screen, "seed") == "随机种子"
            assert screen.query_one("#group-model").border_title == "模型"
            assert str(screen.query_one("#start", Button).label) == "启动"
            assert "输入应为有效数字" in text_of(screen.query_one("#e-learning_rate", Label))
            await until(pilot, lambda: "有 " in text_of(screen.query_one("#status-line")))
            stage_labels = {value: str(label) for label, value in screen.query_one("#f-stage", Select)._options}
            assert stage_labels["dpo"] == "dpo: 偏好训练（DPO 及变体）"

            await switch_language(app, "en")
            await until(pilot, lambda: screen._ready and screen.query("#e-learning_rate") and screen.values() == before)
            assert label_of(screen, "learning_rate") == "learning rate"
            assert "valid number" in text_of(screen.query_one("#e-learning_rate", Label))
            await until(pilot, lambda: "problem(s) to fix" in text_of(screen.query_one("#status-line")))
    finally:
        set_language("en", export=False)


async def test_switching_language_in_the_first_moment_builds_the_whole_form(tmp_path):
    """A switch before the later groups were mounted: they are mounted once, and filled."""
    app = make_app(tmp_path)
    try:
        async with app.run_test(size=(100, 40)) as pilot:
            screen = app.screen
            await switch_language(app, "zh")
            await until(pilot, lambda: screen._ready)
            assert len(screen.query("#row-seed")) == 1 and screen.query_one("#f-seed", Input).value == "42"
            assert label_of(screen, "seed") == "随机种子"
    finally:
        set_language("en", export=False)


def test_ftui_train_prints_validation_problems_in_chinese(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_name_or_path: m\ndataset: d\nlearning_rate: -1\nlora_rank: zero\nbf16: true\nfp16: true\n",
                   encoding="utf-8")
    env = {**os.environ, "FTUI_LANG": "zh", "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "ftui.cli.main", "train", str(bad)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "项无效设置" in out  # "... has N invalid setting(s)"
    assert "learning_rate = -1: 输入应大于 0" in out
    assert "lora_rank = 'zero': 输入应为有效整数" in out
    assert "bf16 和 fp16 同时开启" in out
    assert "Input should" not in out


async def _form_with_demo(pilot):
    screen = pilot.app.screen
    await until(pilot, lambda: screen._ready)
    await pilot.press("f2")
    await until(pilot, lambda: "放得下" in str(screen.query_one("#plan-verdict").render()))  # the planner's verdict, from a worker
    screen.set_focus(None)  # a blinking cursor would make the picture flaky
    pilot.app.clear_notifications()  # "demo preset loaded" would cover the launch bar
    await pilot.pause(1.0)
    await pilot.wait_for_scheduled_animations()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_launch_form_in_chinese(snap_compare, tmp_path, zh, size):
    app = FtuiApp("runs", sampler=fixed_sampler, offer_live=False, render_examples=False)
    assert snap_compare(app, terminal_size=size, run_before=_form_with_demo)


def test_preset_texts_marked_for_the_catalog_are_the_files_own():
    from ftui.presets.engine_presets import PRESET_NAMES, PRESET_TEXTS, _read, preset_path

    assert set(PRESET_TEXTS) == set(PRESET_NAMES)
    for name in PRESET_NAMES:
        meta = _read(str(preset_path(name)))["ftui"]
        assert PRESET_TEXTS[name] == (meta["description"], meta["when"])


def test_config_problems_presets_and_dataset_errors_in_chinese(zh, tmp_path):
    from ftui.config.preflight import validate_config
    from ftui.presets.choices import engine_description
    from ftui.data.records import DataFormatError, DatasetSpec, to_messages

    _cfg, problems = validate_config({"model_name_or_path": "m", "dataset": "d", "stage": "ppo", "use_galore": True,
                                      "lora_rank": 0, "max_steps": 0})
    text = "\n".join(str(p) for p in problems)
    assert "reward_model = '': stage ppo 需要奖励模型" in text  # a stage's own rule
    assert "use_galore = True: 不支持：ftui 未实现该训练方法" in text  # a refused LLaMA-Factory key
    assert "lora_rank = 0: 输入应大于或等于 1" in text
    assert engine_description("ddp").startswith("DistributedDataParallel：每块 GPU") and "适用于：" in engine_description("ddp")
    with pytest.raises(DataFormatError) as err:
        to_messages({"instruction": "hi"}, DatasetSpec(name="mine"), 3)
    assert "数据集 'mine' 第 3 条记录：缺少文本字段 'output' 或它为空" in str(err.value)
    assert "应为（alpaca）：instruction（文本）" in str(err.value)
