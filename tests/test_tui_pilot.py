"""The app driven by Textual's pilot: validation, a real demo run, stop, runs, re-attach,
YAML load/save, and untrusted text shown literally."""

import time
from pathlib import Path

import pytest
import yaml
from textual.widgets import Button, Input, Label

from ftui.tui.app import FtuiApp
from ftui.tui.screens.dashboard import DashboardScreen
from ftui.tui.screens.launch import LaunchScreen
from ftui.tui.screens.runs import RunsScreen
from tests.fixtures_runs import T0, dpo_figures, fixed_sampler, write_run
from tests.test_config import LF_LORA_SFT


async def until(pilot, predicate, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.2)
    raise AssertionError("condition not met in time")


def text_of(widget) -> str:
    """What a Static shows, as plain text (whatever renderable it holds)."""
    from rich.console import Console

    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(widget.content)
    return console.export_text()


async def open_form(pilot, app):
    """F2, then the launch form once its first validation has enabled Start."""
    await pilot.press("f2")
    screen = app.screen
    await until(pilot, lambda: not screen.query_one("#start", Button).disabled)
    return screen


def make_app(tmp_path, **kw):
    kw.setdefault("sampler", fixed_sampler)
    kw.setdefault("offer_live", False)
    kw.setdefault("render_examples", False)  # a child process per form: its own test turns it on
    return FtuiApp(tmp_path / "runs", **kw)


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


async def test_invalid_field_shows_its_message_and_keeps_start_disabled(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("f2")
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        await until(pilot, lambda: not screen.query_one("#start", Button).disabled)
        lr = screen.query_one("#f-learning_rate", Input)
        lr.value = ""
        lr.focus()
        await pilot.press("f", "a", "s", "t")
        await until(pilot, lambda: screen.query("#e-learning_rate"))
        error = screen.query_one("#e-learning_rate", Label)
        assert error.display and "valid number" in text_of(error)
        assert screen.query_one("#start", Button).disabled
        await pilot.press("f5")  # Start refuses
        await until(pilot, lambda: any("the form has problems" in str(n.message) for n in app._notifications))
        assert isinstance(app.screen, LaunchScreen) and not (tmp_path / "runs").exists()
        lr.value = "0.003"
        await until(pilot, lambda: screen.validated and not error.display)
        assert not screen.query_one("#start", Button).disabled


async def test_the_form_is_validated_off_the_ui_thread_and_start_waits_for_it(tmp_path, monkeypatch):
    """The form's checks read files (the model's config.json, a DeepSpeed file, the hub
    cache): a worker makes them, so a model on a hung mount leaves the app responding; Start
    pressed meanwhile starts once the newest values are checked, with those values."""
    import threading

    import ftui.config.preflight
    from ftui.tui.screens import launch

    validate, release, threads = ftui.config.preflight.preflight, threading.Event(), []

    def slow_validate(data):
        threads.append(threading.current_thread() is threading.main_thread())
        if str(data.get("learning_rate")) == "0.007":
            release.wait(60)
        return validate(data)

    started = []
    monkeypatch.setattr(ftui.config.preflight, "preflight", slow_validate)
    monkeypatch.setattr(launch.LaunchScreen, "start_run", lambda self, cfg: started.append(cfg))
    app = make_app(tmp_path)
    try:
        async with app.run_test(size=(100, 40)) as pilot:
            screen = await open_form(pilot, app)
            lr = screen.query_one("#f-learning_rate", Input)
            lr.value = "0.007"
            await until(pilot, lambda: not screen.validated)
            await pilot.press("f5")
            steps = screen.query_one("#f-max_steps", Input)
            steps.value = "5"
            steps.focus()
            await pilot.press("end", "0")  # the app takes keys while the check hangs
            await until(pilot, lambda: steps.value == "50")
            assert not started
            release.set()
            await until(pilot, lambda: started)
            assert started[0].learning_rate == 0.007 and started[0].max_steps == 50
            assert len(started) == 1 and not any(threads)
    finally:
        release.set()


async def test_method_fields_show_only_when_relevant_and_qlora_is_refused(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("f2")
        screen = app.screen
        await until(pilot, lambda: not screen.query_one("#start", Button).disabled)
        method = screen.query_one("#f-method")
        method.value = "freeze"
        await until(pilot, lambda: screen.query_one("#row-freeze_trainable_layers").display
                    and not screen.query_one("#row-lora_rank").display)
        method.value = "qlora"
        await until(pilot, lambda: screen.query("#e-method"))
        assert screen.query_one("#row-lora_rank").display
        assert "QLoRA is not possible here" in text_of(screen.query_one("#e-method", Label))
        assert screen.query_one("#start", Button).disabled


@pytest.mark.dist
async def test_demo_from_the_form_runs_stops_lists_and_reattaches(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("f2")
        screen = app.screen
        await until(pilot, lambda: not screen.query_one("#start", Button).disabled)
        screen.query_one("#f-max_steps", Input).value = "5000"
        screen.query_one("#f-max_samples", Input).value = "16"
        await until(pilot, lambda: not screen.query_one("#start", Button).disabled)
        await pilot.press("f5")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.step >= 3)
        assert dash.view.status == "running" and dash.view.max_steps == 5000
        await pilot.press("s")
        await until(pilot, lambda: app.screen.__class__.__name__ == "Confirm")
        await pilot.press("y")
        await until(pilot, lambda: dash.view.status == "stopped", timeout=60)
        stopped_at = dash.view.step
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.runs)
        runs = app.screen.runs
        assert len(runs) == 1 and runs[0].status == "stopped" and runs[0].step == stopped_at
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen is not dash)
        again = app.screen
        await until(pilot, lambda: again.view is not None and again.view.step == stopped_at)
        assert again.view.status == "stopped" and len(again.view.series[0]) == stopped_at


def lf_demo_registry(folder: Path) -> None:
    """A data/ folder in ``folder`` registering the LLaMA-Factory demo datasets these YAMLs
    name (identity, alpaca_en_demo, dpo_en_demo), a few records each: the form, as ftui train,
    refuses a dataset it cannot find."""
    import json

    data = folder / "data"
    data.mkdir(exist_ok=True)
    alpaca = [{"instruction": f"say {i}", "input": "", "output": str(i)} for i in range(3)]
    ranked = [{"conversations": [{"from": "human", "value": f"say {i}"}], "chosen": {"from": "gpt", "value": str(i)},
               "rejected": {"from": "gpt", "value": "no"}} for i in range(3)]
    for name, records in (("identity", alpaca), ("alpaca_en_demo", alpaca), ("dpo_en_demo", ranked)):
        (data / f"{name}.json").write_text(json.dumps(records))
    (data / "dataset_info.json").write_text(json.dumps({
        "identity": {"file_name": "identity.json"}, "alpaca_en_demo": {"file_name": "alpaca_en_demo.json"},
        "dpo_en_demo": {"file_name": "dpo_en_demo.json", "ranking": True, "formatting": "sharegpt",
                        "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected"}}}))


async def load_in_form(pilot, app, path, text: str):
    """The launch form, once ready, told to load ``text`` written to ``path`` (F3's worker)."""
    path.write_text(text)
    screen = app.screen
    await until(pilot, lambda: screen._ready)
    screen.load_yaml(str(path))
    return screen


async def test_yaml_from_llamafactory_loads_into_the_form_and_saves_back(tmp_path):
    lf_demo_registry(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await load_in_form(pilot, app, tmp_path / "lf.yaml", LF_LORA_SFT)
        await until(pilot, lambda: screen.query_one("#f-model_name_or_path", Input).value.startswith("meta-llama"))
        assert screen.query_one("#f-learning_rate", Input).value == "0.0001"
        assert screen.query_one("#f-method").value == "lora"
        assert screen.query_one("#p-bf16").value
        await until(pilot, lambda: "family: llama" in text_of(screen.query_one("#family")))
        # valid: its validation runs in a worker (after NVML's first read), not by the time the family shows
        await until(pilot, lambda: not screen.query_one("#start", Button).disabled)
        await assert_loaded_yaml_kept(pilot, app, screen, tmp_path / "saved.yaml")


UNSUPPORTED = ("dataloader_num_workers", "ddp_timeout", "overwrite_cache", "overwrite_output_dir", "plot_loss", "preprocessing_num_workers",
               "save_only_model")  # report_to and resume_from_checkpoint are fields


async def assert_loaded_yaml_kept(pilot, app, screen, out):
    """LF_LORA_SFT in the form: every unsupported key listed readably, lora_target: all not
    replaced by the family's list, and saving writes back what was loaded."""
    listed = [n.message for n in app._notifications if "no effect on what is trained" in n.message]
    assert listed and all(k in listed[-1] for k in UNSUPPORTED)  # the whole list, not cut at the screen's edge
    kept = " ".join(text_of(screen.query_one("#kept-keys")).split())
    assert all(k in kept for k in UNSUPPORTED)  # wrapped under Output, there after the notification goes
    assert f"{len(UNSUPPORTED)} unsupported key(s) kept" in text_of(screen.query_one("#status-line"))
    assert screen.query_one("#f-lora_target", Input).value == "all"
    screen.save_yaml(str(out), screen.current_config_dict())
    await until(pilot, lambda: out.exists())
    saved = yaml.safe_load(out.read_text())
    assert saved["plot_loss"] is True and saved["bf16"] is True and saved["finetuning_type"] == "lora"
    assert saved["template"] == "llama3" and saved["dataset"] == "identity,alpaca_en_demo"
    assert saved["lora_target"] == "all" and saved["report_to"] == "none"


async def test_ftui_config_opens_the_form_with_the_yaml_as_it_is(tmp_path, monkeypatch):
    from ftui.cli.main import main

    src = tmp_path / "lf.yaml"
    src.write_text(LF_LORA_SFT)
    opened = []
    monkeypatch.setattr(FtuiApp, "run", lambda self: opened.append(self.initial_config))
    lf_demo_registry(tmp_path)
    assert main(["--config", str(src)]) == 0
    assert opened == [yaml.safe_load(LF_LORA_SFT)]  # the file's keys only, lora_target: all among them
    app = make_app(tmp_path, initial_config=opened[0])
    async with app.run_test(size=(100, 40)) as pilot:
        screen = app.screen
        await until(pilot, lambda: "family: llama" in text_of(screen.query_one("#family")))
        await until(pilot, lambda: not screen.query_one("#start", Button).disabled)
        await assert_loaded_yaml_kept(pilot, app, screen, tmp_path / "saved.yaml")


async def test_a_misspelt_key_in_a_loaded_yaml_is_an_error_naming_the_key_it_meant(tmp_path):
    """Not kept as a key without effect: the form says which key was meant and Start stays off."""
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await load_in_form(pilot, app, tmp_path / "lf.yaml", LF_LORA_SFT + "learnig_rate: 1.0e-3\n")
        await until(pilot, lambda: "learnig_rate" in text_of(screen.query_one("#form-errors")))
        assert "did you mean learning_rate?" in " ".join(text_of(screen.query_one("#form-errors")).split())
        assert screen.query_one("#start", Button).disabled and screen.config is None
        assert "learnig_rate" not in text_of(screen.query_one("#kept-keys"))
        assert f"{len(UNSUPPORTED)} unsupported key(s) kept" in text_of(screen.query_one("#status-line"))


async def test_untrusted_text_is_shown_literally(tmp_path):
    nasty = "[bold red]not markup[/] [link=file:///etc/passwd]x[/link] [/]"
    run = write_run(tmp_path / "runs", "nasty", steps=10, max_steps=100, end="failed",
                    log_lines=(nasty, "Traceback (most recent call last):"), model="org/[red]model[/]")
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 100)
    async with app.run_test(size=(120, 40)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.status == "failed")
        await until(pilot, lambda: any(nasty in s.text for s in dash.query_one("#log-tail").lines))
        header = text_of(dash.query_one("#run-header"))
        assert "org/[red]model[/]" in header
        banner = text_of(dash.query_one("#end-banner"))
        assert "CUDA out of memory" in banner and "hint" in banner


async def test_dashboard_figures_match_the_events(tmp_path):
    run = write_run(tmp_path / "runs", "mid", steps=120, max_steps=300)
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 500)
    async with app.run_test(size=(120, 40)) as pilot:
        dash = app.screen
        # the run's events and the GPU samples come from two workers: wait for both
        await until(pilot, lambda: dash.view is not None and dash.view.step == 120 and "97%" in text_of(dash.query_one("#gpu-panel")))
        figures = text_of(dash.query_one("#figures"))
        assert "120 / 300" in figures and "41.2%" in figures and "20,000" in figures
        gpu = text_of(dash.query_one("#gpu-panel"))
        assert "97%" in gpu and "r1 15.0 GiB" in gpu
        header = text_of(dash.query_one("#run-header"))
        assert "ETA 04:30" in header and "elapsed 08:20" in header
        # no extra figures (sft): no figure plot beside the loss, no key f to cycle them
        assert not dash.query_one("#figure-plots").display
        assert not dash.check_action("figure", ()) and "figure" not in {k.action for k in dash.query("FooterKey")}


def plot_text(plot) -> str:
    """The loss plot as the terminal shows it, without colours."""
    import re

    plot.plt.plotsize(plot.size.width, plot.size.height)
    return re.sub(r"\x1b\[[0-9;]*m", "", plot.plt.build())


async def test_loss_plot_of_one_step_has_whole_step_ticks_a_tight_axis_and_m_toggles_smoothing(tmp_path):
    from ftui.tui.widgets import LossPlot

    run = write_run(tmp_path / "runs", "one", steps=1, max_steps=300)  # loss 3.12 at step 1
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 60)
    async with app.run_test(size=(100, 30)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.step == 1)
        plot = dash.query_one(LossPlot)
        await pilot.pause(0.3)
        text = plot_text(plot)
        assert "raw + smoothed" in text  # both curves by default
        x_axis = text.splitlines()[-2].split()
        assert x_axis == ["0", "1", "2"]  # not 0.5 1.0 1.5
        y_labels = [line.split("┤")[0].strip() for line in text.splitlines() if "┤" in line]
        assert y_labels and all(2.9 < float(y) < 3.4 for y in y_labels), y_labels  # not 2.62..3.62
        assert len({len(y.split(".")[1]) for y in y_labels}) == 1
        await pilot.press("m")
        assert "(raw)" in plot_text(plot)


async def test_dashboard_shows_a_new_stages_figures_by_name_and_no_hostile_ones(tmp_path):
    """Numbers a step or eval event carries beyond the known fields (a DPO stage's) appear in
    the "now" panel by their names; a name with escape codes, a too long one, a bool, a NaN or
    a string do not, and a name that looks like markup is shown literally."""
    hostile = {"[red]margin[/]": 1.5, "\x1b]8;;file:///etc/passwd\x07evil": 3.0, "n" * 100: 4.0,
               "flag": True, "nan_one": float("nan"), "text": "hello", "nested": {"a": 1}}
    run = write_run(tmp_path / "runs", "dpo", steps=100, max_steps=300, step_extras={"rewards/accuracies": 0.75, **hostile},
                    eval_extras={"eval_rewards/margins": 1.2})
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 500)
    async with app.run_test(size=(120, 40)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.step == 100)
        figures = text_of(dash.query_one("#figures"))
        assert "rewards/accuracies 0.75" in " ".join(figures.split())
        assert "eval_rewards/margins 1.2" in " ".join(figures.split())
        assert "[red]margin[/]" in figures
        for absent in ("evil", "\x1b", "nnnnnnnnnn", "flag", "nan_one", "hello", "nested"):
            assert absent not in figures


async def test_a_preference_run_plots_its_figures_beside_the_loss_and_f_cycles_them(tmp_path):
    """Issue 15: rewards_margin first (its eval points too), rewards_accuracy below it where the
    terminal has the rows, f moves on to the next figures; m and w reach the figure plots."""
    from ftui.tui.widgets import FigurePlot

    run = write_run(tmp_path / "runs", "dpo", steps=120, max_steps=300, step_extras=dpo_figures,
                    eval_extras=lambda s: dpo_figures(s, "eval_"))
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 500)
    async with app.run_test(size=(80, 24)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.step == 120)
        await until(pilot, lambda: dash.query_one("#figure-plots").display)
        first, second = dash.query(FigurePlot)
        assert first.display and not second.display  # 80x24: one figure beside the loss
        assert first.metric == "rewards_margin" and first.evals == ([50, 100], [dpo_figures(s)["rewards_margin"] for s in (50, 100)])
        # the plot draws at its laid-out size: wait for the layout after it is shown (a loaded
        # machine can take a frame longer; it once read an empty, zero-sized plot here)
        await until(pilot, lambda: "rewards_margin" in plot_text(first))
        figures = " ".join(text_of(dash.query_one("#figures")).split())
        assert "rewards_margin 1.55" in figures and "rewards_accuracy 1" in figures
        await pilot.press("f")
        assert first.metric == "rewards_accuracy"
        await until(pilot, lambda: "rewards_accuracy" in plot_text(first))
        await pilot.press("m", "w")
        assert not first.smoothing and first.recent_only
        await until(pilot, lambda: "(raw) · recent" in plot_text(dash.query_one("#loss-plot")))
        await pilot.resize_terminal(120, 36)
        await until(pilot, lambda: second.display)
        assert (first.metric, second.metric) == ("rewards_accuracy", "rewards_chosen")


async def test_form_defaults_equal_runconfig_defaults():
    from ftui.config.schema import config_defaults
    from ftui.tui.screens.launch_fields import FORM_DEFAULTS

    defaults = config_defaults()
    assert {k: defaults[k] for k in FORM_DEFAULTS if k in defaults} == {k: v for k, v in FORM_DEFAULTS.items() if k in defaults}


async def test_demo_key_pressed_at_once_is_not_lost(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("f2")  # before the rest of the form has mounted
        screen = app.screen
        await until(pilot, lambda: screen._ready and not screen.query_one("#start", Button).disabled)
        assert screen.query_one("#f-model_name_or_path", Input).value == "ftui-demo"
        assert screen.query_one("#f-learning_rate", Input).value == "0.003"


async def test_live_run_is_offered_on_start(tmp_path):

    run = write_run(tmp_path / "runs", "live", steps=3, max_steps=10)
    import psutil

    me = psutil.Process()  # stands in for the run's supervisor: pid and start time both match
    (run / "launch.json").write_text('{"pid": %d, "create_time": %f, "start_time": %f}' % (me.pid, me.create_time(), T0))
    app = FtuiApp(tmp_path / "runs", sampler=fixed_sampler, render_examples=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.screen.__class__.__name__ == "Confirm")
        await pilot.press("y")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        assert app.screen.run_dir == run


async def test_enter_in_the_attach_dialog_attaches(tmp_path):
    run = write_run(tmp_path / "runs", "live", steps=3, max_steps=10)  # another host's run: counts as live
    app = FtuiApp(tmp_path / "runs", sampler=fixed_sampler, render_examples=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.screen.__class__.__name__ == "Confirm")
        dialog = app.screen
        assert "[y] Attach" in str(dialog.query_one("#yes", Button).label) and "[n] No" in str(dialog.query_one("#no", Button).label)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        assert app.screen.run_dir == run


async def test_s_then_enter_stops_the_run_and_a_second_stop_kills(tmp_path, monkeypatch):
    import ftui.jobs.launch as launch

    requests = []
    monkeypatch.setattr(launch, "stop_run", lambda run_dir, force=False: requests.append(force) or "sent")
    import psutil

    run = write_run(tmp_path / "runs", "live", steps=3, max_steps=10)
    me = psutil.Process()  # stands in for the run's supervisor: the run is live, so Stop is offered
    (run / "launch.json").write_text('{"pid": %d, "create_time": %f, "start_time": %f}' % (me.pid, me.create_time(), T0))
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 30)
    async with app.run_test(size=(100, 40)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.step == 3 and dash.view.status == "running")
        await pilot.press("s")
        await until(pilot, lambda: app.screen.__class__.__name__ == "Confirm")
        assert "Enter: Stop" in text_of(app.screen.query_one(".hint", Label))
        await pilot.press("enter")
        await until(pilot, lambda: requests == [False])
        assert app.screen is dash
        await pilot.press("s")  # asked again: the dialog now kills, and Enter means that too
        await until(pilot, lambda: app.screen.__class__.__name__ == "Confirm")
        await pilot.press("enter")
        await until(pilot, lambda: requests == [False, True])
        await pilot.press("s")
        await until(pilot, lambda: app.screen.__class__.__name__ == "Confirm")
        await pilot.press("escape")  # Esc cancels
        await until(pilot, lambda: app.screen is dash)
        await pilot.pause(0.3)
        assert requests == [False, True]


async def test_f6_shows_ftui_train_on_the_saved_yaml_and_the_launch_command_beneath(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_form(pilot, app)  # the demo
        await pilot.press("f6")
        await until(pilot, lambda: app.screen.__class__.__name__ == "ShowText")
        shown = text_of(app.screen.query_one(".code"))
        assert "save the form first (F4)" in shown and "ftui.jobs" in shown.replace("\n", "")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen)
        await pilot.press("f4")
        await until(pilot, lambda: app.screen.__class__.__name__ == "AskPath")
        app.screen.query_one(Input).value = "my.yaml"
        await pilot.press("enter")
        await until(pilot, lambda: (tmp_path / "my.yaml").exists() and screen.yaml_path == "my.yaml")
        await pilot.press("f6")
        await until(pilot, lambda: app.screen.__class__.__name__ == "ShowText")
        shown = text_of(app.screen.query_one(".code"))
        assert shown.startswith(f"ftui train {tmp_path / 'my.yaml'}") and "save the form first" not in shown
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen)
        screen.query_one("#f-learning_rate", Input).value = "0.001"  # the form no longer matches the file
        await pilot.pause()
        await pilot.press("f6")
        await until(pilot, lambda: app.screen.__class__.__name__ == "ShowText")
        assert "differs from my.yaml: save the form first (F4)" in text_of(app.screen.query_one(".code"))


async def test_an_untouched_form_says_what_is_required_in_words(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready and screen.query("#e-model_name_or_path") and screen.query("#e-dataset"))
        model = text_of(screen.query_one("#e-model_name_or_path", Label))
        dataset = text_of(screen.query_one("#e-dataset", Label))
        assert "required: a model directory or hub name" in model and "required: a dataset name or file" in dataset
        assert "String should" not in model + dataset
        screen.query_one("#f-learning_rate", Input).focus()  # the focused field's row stands out
        await pilot.pause()
        assert screen.query_one("#f-learning_rate").parent.styles.background.a > 0
        assert screen.query_one("#f-cutoff_len").parent.styles.background.a == 0


async def test_a_bad_model_path_is_flagged_while_the_dataset_is_still_empty(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.query_one("#f-model_name_or_path", Input).value = str(tmp_path / "no-such-model")
        await until(pilot, lambda: screen.query("#e-model_name_or_path")
                    and "no such model directory" in text_of(screen.query_one("#e-model_name_or_path", Label)))
        assert "required: a dataset name or file" in text_of(screen.query_one("#e-dataset", Label))
        assert screen.query_one("#start", Button).disabled


async def test_long_run_attaches_tail_first_then_splices_the_history(tmp_path, monkeypatch):
    import ftui.tui.screens.dashboard as dashboard

    monkeypatch.setattr(dashboard, "BIG_FILE", 20_000)
    monkeypatch.setattr(dashboard, "HEAD_BYTES", 2_000)
    monkeypatch.setattr(dashboard, "TAIL_BYTES", 8_000)
    monkeypatch.setattr(dashboard, "CHUNK", 16_000)
    run = write_run(tmp_path / "runs", "long", steps=500, max_steps=500, end="completed")
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 1000)
    async with app.run_test(size=(120, 40)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.loading is None and dash.view.step == 500)
        steps, losses = dash.view.series
        assert list(steps) == list(range(1, 501))
        assert dash.view.evals[0] == [50 * k for k in range(1, 11)]
        assert dash.view.model == "Qwen/Qwen2.5-0.5B" and dash.view.status == "completed"


async def test_a_live_long_runs_spliced_history_is_not_replaced_by_the_view_from_before_it(tmp_path, monkeypatch):
    """A live run polls every second: the first poll after the history was read showed the
    view from before it again (the plot without its history, 'reading history 0%' in the
    header) until the next event came."""
    import ftui.tui.screens.dashboard as dashboard

    monkeypatch.setattr(dashboard, "BIG_FILE", 20_000)
    monkeypatch.setattr(dashboard, "HEAD_BYTES", 2_000)
    monkeypatch.setattr(dashboard, "TAIL_BYTES", 8_000)
    monkeypatch.setattr(dashboard, "CHUNK", 16_000)
    run = write_run(tmp_path / "runs", "long-live", steps=500, max_steps=1000)  # another host's: counts as live
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 1000)
    async with app.run_test(size=(120, 40)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.loading is None and dash.view.series[0][:1] == [1])
        await pilot.pause(2 * dashboard.POLL_S)  # a poll or two later, no new event
        assert dash.view.status == "running" and dash.view.loading is None
        assert list(dash.view.series[0]) == list(range(1, 501))


async def test_form_shows_the_planners_verdict_before_start(tmp_path):
    import json

    big = tmp_path / "llama-2-7b"
    big.mkdir()
    (big / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
                                                 "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32}))
    (big / "model.safetensors").write_bytes(b"")  # validation wants weights and a tokenizer beside config.json
    (big / "tokenizer.json").write_text("{}")
    lf_demo_registry(tmp_path)
    app = make_app(tmp_path)  # its sampler reports two 80 GiB H100s
    async with app.run_test(size=(100, 40)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.fill({"model_name_or_path": str(big), "dataset": "alpaca_en_demo", "method": "full", "precision": "bf16",
                     "cutoff_len": "2048", "engine": "single", "nproc_per_node": "1"})
        verdict = screen.query_one("#plan-verdict")
        await until(pilot, lambda: "does NOT fit 80.0 GiB" in text_of(verdict))
        assert "try " in text_of(verdict) and "optimizer" in text_of(verdict)
        assert "CUDA context 0.8 GiB, assumed" in text_of(verdict)  # what the verdict adds, said
        assert not screen.query_one("#start", Button).disabled  # a warning, not a refusal
        screen.fill({"method": "lora", "cutoff_len": "512"})
        await until(pilot, lambda: "fits 80.0 GiB" in text_of(verdict))


async def test_form_counts_and_checks_only_the_gpus_cuda_visible_devices_leaves(tmp_path, monkeypatch):
    from textual.widgets import RadioButton, Select

    from tests.fake_nvml import FakeGpu, use_fake_nvml

    volta = FakeGpu(name="Tesla V100-SXM2-16GB", uuid="GPU-aaaa", capability=(7, 0))
    use_fake_nvml(monkeypatch, [volta] + [FakeGpu(uuid=f"GPU-{c * 4}") for c in "bcd"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")  # two A100s; the V100 is hidden
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen.query_one("#f-nproc_per_node", Input).value == "2")
        assert screen.query_one("#f-engine", Select).value == "ddp"
        await until(pilot, lambda: "2 of 4 GPUs visible" in text_of(screen.query_one("#precision-help")))
        assert not screen.query_one("#p-bf16", RadioButton).disabled


async def test_the_form_never_calls_nvml_on_the_ui_thread(tmp_path, monkeypatch):
    """The checks of bf16 and of the gpus field ask about the GPUs on every keystroke: they
    read what a worker read once, and the UI thread makes no NVML call (one can take seconds)."""
    import threading

    from tests.fake_nvml import four_gpus, use_fake_nvml

    fake = use_fake_nvml(monkeypatch, four_gpus())
    on_ui: list[str] = []
    ui_thread = threading.current_thread()
    for name in [n for n in dir(fake) if n.startswith("nvml")]:
        def counted(*args, _call=getattr(fake, name), _name=name):
            if threading.current_thread() is ui_thread:
                on_ui.append(_name)
            return _call(*args)
        monkeypatch.setattr(fake, name, counted)
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.fill({"model_name_or_path": "ftui-demo", "model_init": "random", "dataset": "ftui_demo", "method": "full",
                     "cutoff_len": "128", "precision": "bf16", "gpus": "1,2"})
        await until(pilot, lambda: screen.config is not None and screen.config.gpus == "1,2" and screen.config.bf16)
        for typed in ("0.0002", "0.00025"):  # as keystrokes change it: Input.Changed, then validation
            screen.query_one("#f-learning_rate", Input).value = typed
            await until(pilot, lambda: screen.config is not None and screen.config.learning_rate == float(typed))
        assert on_ui == []


async def test_form_picks_gpus_from_the_nvml_list_and_counts_processes_by_them(tmp_path, monkeypatch):
    """Issue 13, item 13: the gpus field offers the machine's GPUs (NVML, faked here);
    processes per node follow the GPUs picked until the user sets them; more processes
    than GPUs picked is refused naming both; the config carries gpus."""
    from textual.widgets import Select

    from tests.fake_nvml import four_gpus, use_fake_nvml

    use_fake_nvml(monkeypatch, four_gpus())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready)
        screen.fill({"model_name_or_path": "ftui-demo", "model_init": "random", "dataset": "ftui_demo", "method": "full", "cutoff_len": "128"})
        gpus, nproc = screen.query_one("#f-gpus", Input), screen.query_one("#f-nproc_per_node", Input)
        await until(pilot, lambda: gpus.placeholder == "all: 0,1,2,3")
        assert "GPUs: 0 GPU model 0, 39 of 40 GiB free · 1 GPU model 1" in text_of(screen.query_one("#engine-help"))
        await until(pilot, lambda: nproc.value == "4")
        assert screen.query_one("#f-engine", Select).value == "ddp"
        gpus.value = "1, 3"
        await until(pilot, lambda: nproc.value == "2")
        # the config of the last validation (a worker's): wait for the one that saw the new gpus
        await until(pilot, lambda: screen.config is not None and screen.config.gpus == "1,3")
        assert screen.current_config_dict()["gpus"] == "1, 3"
        assert "gpus 1,3: the run's CUDA_VISIBLE_DEVICES (2 GPU(s))" in text_of(screen.query_one("#precision-help"))
        nproc.value = "3"  # the user's own number: no longer follows the GPUs
        # the label may be there already, emptied (nproc 4 > 2 GPUs for a moment): wait for its text
        await until(pilot, lambda: screen.query("#e-nproc_per_node")
                    and "3 processes need a GPU each, but gpus picks 2 (1,3)" in text_of(screen.query_one("#e-nproc_per_node")))
        assert screen.query_one("#start", Button).disabled
        gpus.value = "0,1,2"
        await until(pilot, lambda: not screen.query_one("#start", Button).disabled)
        assert nproc.value == "3"


async def test_a_yamls_gpus_list_fills_the_field_and_is_what_the_form_checks(tmp_path, monkeypatch):
    from tests.fake_nvml import four_gpus, use_fake_nvml

    use_fake_nvml(monkeypatch, four_gpus())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    app = make_app(tmp_path, initial_config={"model_name_or_path": "ftui-demo", "model_init": "random", "dataset": "ftui_demo",
                                             "cutoff_len": 128, "engine": "ddp", "gpus": [2, 3], "nproc_per_node": 2})
    async with app.run_test(size=(100, 40)) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen._ready and screen.config is not None)
        assert screen.query_one("#f-gpus", Input).value == "2,3" and screen.config.gpus == "2,3"
        await until(pilot, lambda: "gpus 2,3: the run's CUDA_VISIBLE_DEVICES (2 GPU(s))" in text_of(screen.query_one("#precision-help")))
        assert screen.query_one("#f-nproc_per_node", Input).value == "2"


async def test_form_offers_the_pt_stage_previews_raw_text_and_leaves_packing_to_the_stage(tmp_path, lf_data):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 45)) as pilot:
        screen = await open_form(pilot, app)
        screen.fill({"stage": "pt", "dataset": "c4_demo", "dataset_dir": str(lf_data)})
        screen.preview_dataset("c4_demo", str(lf_data), "pt")
        first = (lf_data / "c4_demo.jsonl").read_text().splitlines()[0]
        import json

        await until(pilot, lambda: "c4_demo: raw text" in text_of(screen.query_one("#preview")))
        assert " ".join(json.loads(first)["text"].split())[:40] in text_of(screen.query_one("#preview"))
        cfg = screen.current_config_dict()
        assert cfg["stage"] == "pt" and "packing" not in cfg  # unset: pt packs by default
        screen.fill({"packing": "off"})
        assert screen.current_config_dict()["packing"] is False


def test_runs_table_columns_give_way_by_priority_and_the_long_ones_shrink():
    from ftui.tui.screens.runs import fit_columns, keep_ends, keep_tail

    widths = {"run": 42, "status": 9, "model": 40, "method": 6, "engine": 6, "step": 7, "loss": 6,
              "started": 16, "duration": 8}
    narrow = fit_columns(widths, 78)  # 80 columns, less the scrollbar
    assert list(narrow) == ["run", "status", "model", "method", "engine", "step", "loss"]
    assert narrow["model"] >= 9 and narrow["run"] >= 18
    wide = fit_columns(widths, 118)  # a long model path no longer pushes the others off
    assert list(wide) == ["run", "status", "model", "method", "engine", "step", "loss"]  # the times give way
    assert wide["run"] == 42 and 24 <= wide["model"] < 40
    roomy = fit_columns({**widths, "model": 17}, 140)
    assert list(roomy) == ["run", "status", "model", "method", "engine", "step", "loss", "started", "duration"]
    assert keep_tail("/data/models/meta-llama/Llama-3.2-1B", 14) == "…/Llama-3.2-1B"
    assert keep_ends("Qwen2.5-0.5B-Instruct-lora-20261123-024900", 21) == "Qwen2.5-0.…123-024900"


LONG_MODEL = "/mnt/shared/checkpoints/team/experiments/2023/meta-llama/Llama-3.2-1B-Instruct"


def write_listed_runs(root):
    """A completed run with a long id and model path, and one that failed before run_start."""
    write_run(root, "Llama-3.2-1B-Instruct-lora-20231114-221320", steps=600, max_steps=600, end="completed", model=LONG_MODEL)
    broken = write_run(root, "bad-20231114-231000", steps=0, max_steps=600)
    (broken / "events.jsonl").write_text('{"v": 1, "t": 1700000100.0, "event": "run_end", "status": "failed", "reason": "OSError: no weights"}\n')
    (broken / "config.yaml").write_text("model_name_or_path: x\nfinetuning_type: lora\nquantization_bit: 4\nengine: ddp\n")


async def open_runs(pilot, app, count):
    from textual.widgets import DataTable

    app.action_show_runs()
    await until(pilot, lambda: isinstance(app.screen, RunsScreen) and len(app.screen.runs) == count)
    await pilot.pause(0.3)
    return app.screen.query_one(DataTable)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_runs_screen_keeps_progress_method_and_engine_and_shows_start_and_duration(tmp_path, size):
    """Issue 13, item 8: at 80 columns step, loss, method and engine stay; a long model path
    or run id is cut with an ellipsis, never pushing them off; the line below the table shows
    the highlighted run's start time and duration as `ftui runs` prints them, and its model."""
    import time as _time

    root = tmp_path / "runs"
    write_listed_runs(root)
    app = make_app(tmp_path)
    async with app.run_test(size=size) as pilot:
        table = await open_runs(pilot, app, 2)
        keys = [c.key.value for c in table.ordered_columns]
        assert {"run", "status", "model", "method", "engine", "step", "loss"} <= set(keys)
        assert sum(c.get_render_width(table) for c in table.ordered_columns) <= size[0]  # nothing scrolled off
        run_id = "Llama-3.2-1B-Instruct-lora-20231114-221320"
        model = str(table.get_cell(run_id, "model"))
        assert model.startswith("…") and model.endswith("Llama-3.2-1B-Instruct"[-(len(model) - 1):])
        assert str(table.get_cell("bad-20231114-231000", "method")) == "qlora"  # from config.yaml: no run_start
        assert str(table.get_cell("bad-20231114-231000", "engine")) == "ddp"
        table.move_cursor(row=app.screen.runs.index(next(r for r in app.screen.runs if r.run_id == run_id)))
        await pilot.pause()
        detail = text_of(app.screen.query_one("#run-detail"))
        started = _time.strftime("%Y-%m-%d %H:%M", _time.localtime(T0))
        assert run_id in detail and f"started {started}" in detail and "duration 15:21" in detail
        assert f"model {LONG_MODEL}" in detail


async def test_runs_screen_deletes_a_run_after_a_yes_and_never_a_live_one(tmp_path):
    """Issue 13, item 13: d asks; Esc keeps the run, Enter deletes it (in a worker); a live run
    is refused with a message and no dialog."""
    from ftui.tui.screens.modals import Confirm

    root = tmp_path / "runs"
    write_run(root, "done-20231114-221320", steps=30, max_steps=30, end="completed")
    write_run(root, "live-20231114-231320", steps=3, max_steps=30)  # no run_end, another host's: live
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        table = await open_runs(pilot, app, 2)
        screen = app.screen
        live_row = next(i for i, r in enumerate(screen.runs) if r.run_id.startswith("live"))
        table.move_cursor(row=live_row)
        await pilot.press("d")
        await pilot.pause()
        assert not isinstance(app.screen, Confirm) and (root / "live-20231114-231320").is_dir()
        assert any("stop it first" in n.message for n in app._notifications)
        table.move_cursor(row=1 - live_row)
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, Confirm))
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen)
        await pilot.pause(0.3)
        assert (root / "done-20231114-221320").is_dir()
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, Confirm))
        await pilot.press("enter")
        await until(pilot, lambda: not (root / "done-20231114-221320").exists())
        await until(pilot, lambda: [r.run_id for r in screen.runs] == ["live-20231114-231320"])
        assert not any(p.name.startswith(".") for p in root.iterdir())


@pytest.mark.parametrize("job_lock", [True, False], ids=["job-lock", "launch-json-only"])
async def test_a_stopped_run_resumed_elsewhere_is_followed_as_running(tmp_path, job_lock):
    """Issue 13, item 3: a dashboard open on a stopped run while `ftui train --resume RUN`
    starts a new job from another shell (a new launch.json, the job lock held, a new
    run_start, then steps) shows the run running, never died. Without a lock file (a run
    from before ftui kept one) the new launch.json alone must tell the new job is alive."""
    import json
    import os
    import socket

    import psutil

    from ftui.rundir.lock import lock_run_dir

    run = write_run(tmp_path / "runs", "resumed", steps=10, max_steps=40, end="stopped")
    (run / "launch.json").write_text(json.dumps({"start_time": T0, "host": socket.gethostname()}))  # the old job: gone
    if job_lock:
        os.close(lock_run_dir(run))  # its lock file, released

    def append(*events):
        with open(run / "events.jsonl", "a") as fh:
            fh.write("".join(json.dumps(e) + "\n" for e in events))

    # The resumed job's events: a run_start that says where it resumed, then steps 11...
    resumed = [json.loads(line) for line in (write_run(tmp_path / "new", "resumed", steps=16, max_steps=40) / "events.jsonl").open()]
    resumed[0]["resumed_from_step"] = 10

    def steps(first, last):
        return [e for e in resumed if e["event"] == "step" and first <= e["step"] <= last]

    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 200)
    async with app.run_test(size=(120, 40)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.status == "stopped")
        fd = lock_run_dir(run) if job_lock else None  # the new supervisor's lock, as start_run hands it over
        try:
            me = psutil.Process()
            (run / "launch.json").write_text(json.dumps({"start_time": T0 + 90, "host": socket.gethostname(),
                                                        "pid": me.pid, "create_time": me.create_time()}))
            append(resumed[0], *steps(11, 14))
            await until(pilot, lambda: dash.view.step == 14)
            append(*steps(15, 16))  # one more round of the follower after the new job was seen
            await until(pilot, lambda: dash.view.step == 16)
            assert dash.view.status == "running"
            assert not dash.query_one("#end-banner").display
            assert "DIED" not in text_of(dash.query_one("#run-header")).upper()
        finally:
            if fd is not None:
                os.close(fd)


async def test_an_ended_run_shows_its_peaks_not_the_machines_load_and_offers_no_stop(tmp_path):
    """Issue 13, item 7: while the run lives the device panel samples the machine and the
    footer offers Stop; once it has ended the panel says so and keeps the per-rank peaks,
    the sampler stops, and Stop leaves the footer."""
    import json

    from ftui.rundir.events import make_event

    run = write_run(tmp_path / "runs", "ending", steps=20, max_steps=40)  # another host's: counts as live
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 100)

    def offered(screen) -> set[str]:
        return {b.binding.action for b in screen.active_bindings.values()}

    def sampling() -> bool:
        return any(w.group == "devices" and not w.is_finished for w in app.workers)

    async with app.run_test(size=(120, 40)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.step == 20 and "97%" in text_of(dash.query_one("#gpu-panel")))
        assert "stop" in offered(dash) and sampling()
        with open(run / "events.jsonl", "a") as fh:
            fh.write(json.dumps(make_event("run_end", t=T0 + 60, status="completed", reason="20 steps")) + "\n")
        await until(pilot, lambda: dash.view.ended)
        await until(pilot, lambda: not sampling())
        await pilot.pause(0.3)
        gpu = text_of(dash.query_one("#gpu-panel"))
        assert "the run has ended" in gpu and "r1 15.0 GiB" in gpu
        assert "97%" not in gpu
        assert "stop" not in offered(dash)


async def test_the_dashboard_samples_the_gpus_the_run_was_given(tmp_path, monkeypatch):
    """Issue 13, item 13: a run started with gpus 2,3 (launch.json's CUDA_VISIBLE_DEVICES):
    its device panel shows those two, numbered as the run numbers them, with nvidia-smi's."""
    import json

    from tests.fake_nvml import four_gpus, use_fake_nvml

    use_fake_nvml(monkeypatch, four_gpus())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    run = write_run(tmp_path / "runs", "picked", steps=20, max_steps=40)  # another host's: counts as live
    launch = json.loads((run / "launch.json").read_text())
    (run / "launch.json").write_text(json.dumps({**launch, "env": {"CUDA_VISIBLE_DEVICES": "2,3"}}))
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 100, sampler=None)
    async with app.run_test(size=(120, 40)) as pilot:
        dash = app.screen
        await until(pilot, lambda: "nvidia-smi 3" in text_of(dash.query_one("#gpu-panel")))
        gpu = text_of(dash.query_one("#gpu-panel"))
        assert "0 (nvidia-smi 2)" in gpu and "1 (nvidia-smi 3)" in gpu and "nvidia-smi 1" not in gpu


def y_labels(text: str) -> list[str]:
    """The plot's y tick labels, top to bottom."""
    return [line.split("┤")[0].strip() for line in text.splitlines() if "┤" in line]


async def test_l_puts_the_plot_on_a_log_scale_and_v_plots_the_learning_rate(tmp_path):
    """Issue 13, item 6: a loss falling over decades reads on a log scale (labels at powers of
    ten), and the learning rate the step events carry is one key away (labels sharing one
    power of ten on a linear axis)."""
    from ftui.tui.widgets import LossPlot

    # loss 0.89 .. 0.001 over 60 steps; lr 1e-4 * (1 - s / 300): 0.997e-4 .. 0.8e-4
    run = write_run(tmp_path / "runs", "decades", steps=60, max_steps=300, loss_at=lambda s: 10 ** (-s / 20))
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 200)
    async with app.run_test(size=(100, 30)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.step == 60)
        plot = dash.query_one(LossPlot)
        await pilot.press("l")
        text = plot_text(plot)
        assert "loss (raw + smoothed) · log" in text
        assert y_labels(text) == ["1", "0.1", "0.01", "0.001"]
        await pilot.press("v")
        text = plot_text(plot)
        assert "learning rate · log" in text
        assert y_labels(text) == ["1e-4", "9e-5", "8e-5"]
        await pilot.press("l")
        text = plot_text(plot)
        labels = y_labels(text)
        assert "learning rate" in text and "log" not in text
        assert len(labels) >= 3 and all(label.endswith("e-4") and 0.75e-4 < float(label) < 1.05e-4 for label in labels), labels
        await pilot.press("v")
        assert "loss (raw + smoothed)" in plot_text(plot)


async def test_a_long_field_error_wraps_under_its_field_at_80x24(tmp_path):
    """Issue 13, item 8: at 80 columns a field's error is shown whole, wrapped under the field
    (it ran off the form's edge: '... unable to pa')."""
    from textual.geometry import Region

    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_form(pilot, app)
        screen.query_one("#f-learning_rate", Input).value = "fast"
        await until(pilot, lambda: screen.query("#e-learning_rate"))
        await pilot.pause()
        error = screen.query_one("#e-learning_rate", Label)
        assert error.region.right <= error.parent.content_region.right <= 80
        shown = " ".join(strip.text for strip in error.render_lines(Region(0, 0, *error.outer_size)))
        assert "unable to parse string as a number" in " ".join(shown.split())


async def footer_keys_in_sight(pilot, screen) -> dict:
    """The footer's keys a user sees, by action, once the footer is laid out (it is composed
    again whenever the bindings change); asserts none is under the command palette's key
    (docked right, it covered Quit at 80 columns)."""

    def shown() -> dict:
        return {k.action: k for k in screen.query("FooterKey") if k.display and k.region.width}

    await until(pilot, lambda: "command_palette" in shown() and "quit" in {k.action for k in screen.query("FooterKey")})
    await pilot.pause()
    keys = shown()
    palette = keys.pop("command_palette")
    assert all(k.region.right <= palette.region.x for k in keys.values()), [(a, k.region) for a, k in keys.items()]
    return keys


async def test_the_dashboards_footer_keeps_stop_back_and_quit_at_80_columns(tmp_path):
    """Issue 13, item 8: at 80 columns the footer drops its least needed keys (they still
    work) rather than losing Quit under the command palette's key; at 120 it shows them all."""
    run = write_run(tmp_path / "runs", "narrow", steps=20, max_steps=300)
    for width in (80, 120):
        app = make_app(tmp_path, attach=run, clock=lambda: T0 + 100)
        async with app.run_test(size=(width, 24)) as pilot:
            dash = app.screen
            await until(pilot, lambda: dash.view is not None and dash.view.step == 20)
            await pilot.pause(0.3)
            keys = await footer_keys_in_sight(pilot, dash)
            assert {"stop", "back", "quit", "log_scale", "lr"} <= set(keys), sorted(keys)
            if width == 120:
                assert {"smoothing", "window", "runs", "chat"} <= set(keys)
            else:
                await pilot.press("w")  # a key left out of the footer still works
                assert dash.query_one("LossPlot").recent_only
            assert not {"evalpredict", "export"} & set(keys)  # a live run's footer offers Stop, not these


async def test_an_ended_runs_footer_offers_eval_predict_and_export_in_place_of_stop(tmp_path):
    run = write_run(tmp_path / "runs", "ended", steps=20, max_steps=20, end="completed")
    for width in (80, 120):
        app = make_app(tmp_path, attach=run, clock=lambda: T0 + 100)
        async with app.run_test(size=(width, 24)) as pilot:
            dash = app.screen
            await until(pilot, lambda: dash.view is not None and dash.view.ended)
            await pilot.pause(0.3)
            keys = await footer_keys_in_sight(pilot, dash)
            assert "stop" not in keys and {"back", "quit", "evalpredict", "export"} <= set(keys), (width, sorted(keys))
            if width == 120:
                assert {"runs", "chat", "log_scale", "lr"} <= set(keys), sorted(keys)


async def test_the_launch_forms_footer_keeps_start_and_quit_at_80_columns(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_form(pilot, app)
        await pilot.pause(0.3)
        assert {"start", "runs", "quit"} <= set(await footer_keys_in_sight(pilot, screen))


async def test_form_preview_renders_the_first_example_as_the_run_encodes_it(tmp_path):
    """The demo's first record, rendered by the runner's stage (ftui data --show 1): its token
    counts and its text, the masked prompt dimmed; a new template renders it again."""
    app = make_app(tmp_path, render_examples=True)
    async with app.run_test(size=(120, 45)) as pilot:
        screen = await open_form(pilot, app)
        preview = screen.query_one("#preview")
        await until(pilot, lambda: "with loss" in text_of(preview), timeout=240)
        shown = text_of(preview)
        assert "as the run encodes it, example 1:" in shown and "What is ftui?" in shown and "<|im_start|>assistant" in shown
        dim = "".join(screen._rendered.plain[s.start:s.end] for s in screen._rendered.spans if s.style == "dim")
        assert "What is ftui?" in dim and "terminal dashboard" not in dim
        screen.fill({"template": "llama3"})
        await until(pilot, lambda: "<|start_header_id|>" in text_of(preview), timeout=240)


async def test_the_runs_overlay_compares_an_extra_figure_across_runs(tmp_path):
    """Issue 15: o overlays the marked runs' loss; f moves the overlay on to their extra
    figures (rewards_margin first), each drawn for the runs that have it, then back to the loss."""
    from ftui.tui.widgets import LossPlot

    root = tmp_path / "runs"
    write_run(root, "dpo-a-20231114-221320", steps=60, max_steps=60, end="completed", step_extras=dpo_figures)
    write_run(root, "dpo-b-20231114-231000", steps=40, max_steps=60, end="stopped",
              step_extras=lambda s: {"rewards_margin": s / 10, "rewards_accuracy": 0.5, "kl": 0.1})
    write_run(root, "sft-20231115-090000", steps=30, max_steps=60, end="completed")
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await open_runs(pilot, app, 3)
        screen = app.screen
        assert not screen.check_action("figure", ())  # no overlay yet: nothing to cycle
        await pilot.press("space", "down", "space", "down", "space", "o")
        plot = screen.query_one("#overlay", LossPlot)
        await until(pilot, lambda: len(screen.overlaid) == 3)
        assert plot.display and [c[0] for c in plot.curves] == [r.run_id for r in screen.runs]
        await until(pilot, lambda: "loss (smoothed)" in plot_text(plot))  # drawn once laid out
        metrics = screen.overlay_metrics()
        assert metrics[:3] == ["loss", "rewards_margin", "rewards_accuracy"]
        assert sorted(metrics[3:]) == ["kl", "logps_chosen", "logps_rejected", "rewards_chosen", "rewards_rejected"]
        await pilot.press("f")
        assert sorted(c[0] for c in plot.curves) == ["dpo-a-20231114-221320", "dpo-b-20231114-231000"]
        b = dict(plot.curves)["dpo-b-20231114-231000"]
        assert b == (list(range(1, 41)), [s / 10 for s in range(1, 41)])
        assert "rewards_margin (smoothed)" in plot_text(plot)
        await pilot.press(*["f"] * (metrics.index("kl") - 1))  # from metrics[1]
        assert plot.metric == "kl" and [c[0] for c in plot.curves] == ["dpo-b-20231114-231000"]  # the one run that has it
        await pilot.press(*["f"] * (len(metrics) - metrics.index("kl")))
        assert plot.metric == "loss" and len(plot.curves) == 3


PREFERENCE_ROWS = {"dpo": {"pref_beta", "pref_loss", "dpo_label_smoothing", "simpo_gamma", "pref_ftx"},
                   "kto": {"pref_beta", "pref_ftx", "kto_chosen_weight", "kto_rejected_weight"}}


async def test_preference_fields_show_and_reach_the_config_only_for_their_stage(tmp_path):
    """Issue 15: beta, loss, ... appear for dpo, the KTO weights for kto, none for sft; each
    pref_loss is offered with a few words on what it is."""
    from ftui.config.schema import RunConfig
    from ftui.presets.choices import PREF_LOSSES
    from ftui.tui.screens.launch_fields import FIELDS

    all_rows = set().union(*PREFERENCE_ROWS.values())
    assert [v for _, v in FIELDS["pref_loss"].options] == list(PREF_LOSSES)
    assert all(label != v and label.startswith(f"{v}: ") for label, v in FIELDS["pref_loss"].options)
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await open_form(pilot, app)
        assert not any(screen.query_one(f"#row-{k}").display for k in all_rows)
        assert not all_rows & set(screen.current_config_dict())
        for stage, rows in PREFERENCE_ROWS.items():
            screen.fill({"stage": stage, "pref_beta": "0.25", "pref_ftx": "0.5", "pref_loss": "ipo", "kto_chosen_weight": "2"})
            await until(pilot, lambda: all(screen.query_one(f"#row-{k}").display == (k in rows) for k in all_rows))
            cfg = screen.current_config_dict()
            checked = RunConfig.model_validate(cfg)  # the form's demo dataset does not fit dpo or kto: the form refuses it
            assert set(cfg) & all_rows == rows and cfg["pref_beta"] == "0.25" and checked.pref_beta == 0.25
        assert checked.kto_chosen_weight == 2.0 and checked.pref_loss == "sigmoid"  # kto: no pref_loss
        screen.fill({"stage": "dpo", "dpo_label_smoothing": "0.1"})  # smoothing is the sigmoid loss's: not with ipo
        await until(pilot, lambda: screen.query("#e-dpo_label_smoothing"))
        assert "sigmoid" in text_of(screen.query_one("#e-dpo_label_smoothing", Label))
        assert screen.query_one("#start", Button).disabled


DPO_YAML = """\
model_name_or_path: Qwen/Qwen3-4B-Instruct-2507
stage: dpo
do_train: true
finetuning_type: lora
pref_beta: 0.25
pref_loss: simpo
simpo_gamma: 0.7
pref_ftx: 0.1
kto_chosen_weight: 2.0
dataset: dpo_en_demo
template: qwen3_nothink
cutoff_len: 2048
"""


async def test_a_dpo_yaml_shows_its_keys_in_the_form_and_keeps_them_saved_back(tmp_path):
    """A dpo YAML fills the preference fields; another stage's key (kto_chosen_weight) stays in
    the config; choosing sft hides the fields but keeps the YAML's values; saving writes them."""
    lf_demo_registry(tmp_path)
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await load_in_form(pilot, app, tmp_path / "dpo.yaml", DPO_YAML)
        # the values are set at once; the rows follow the stage select's Changed message
        await until(pilot, lambda: screen.query_one("#f-pref_beta", Input).value == "0.25" and screen.query_one("#row-pref_beta").display)
        assert screen.query_one("#f-pref_loss").value == "simpo" and screen.query_one("#f-simpo_gamma", Input).value == "0.7"
        assert screen.query_one("#row-pref_beta").display and not screen.query_one("#row-kto_chosen_weight").display
        expected = {"stage": "dpo", "pref_beta": 0.25, "pref_loss": "simpo", "simpo_gamma": 0.7, "pref_ftx": 0.1, "kto_chosen_weight": 2.0}
        await until(pilot, lambda: screen.config is not None)
        assert {k: getattr(screen.config, k) for k in expected} == expected
        screen.fill({"pref_beta": "0.3"})
        await until(pilot, lambda: screen.validated)
        assert screen.config.pref_beta == 0.3  # the field, shown, is what counts
        screen.fill({"stage": "sft"})
        await until(pilot, lambda: not screen.query_one("#row-pref_beta").display)
        cfg = screen.current_config_dict()
        assert (cfg["stage"], cfg["pref_loss"], cfg["simpo_gamma"], cfg["kto_chosen_weight"]) == ("sft", "simpo", 0.7, 2.0)
        screen.fill({"stage": "dpo"})  # (under sft its ranking dataset is refused, as ftui train refuses it)
        await until(pilot, lambda: screen.validated and screen.config is not None)
        out = tmp_path / "saved.yaml"
        screen.save_yaml(str(out), screen.current_config_dict())
        await until(pilot, lambda: out.exists())
        saved = yaml.safe_load(out.read_text())
        assert {k: saved.get(k) for k in expected} == expected | {"pref_beta": 0.3}


async def test_the_dataset_field_says_when_a_dataset_does_not_fit_the_stage(tmp_path, lf_data):
    """Issue 15: a ranking set for sft, a plain set for dpo, a set without kto_tag for kto: the
    dataset field's problem (Start stays off) and the preview say so; a ranking set for dpo
    previews its chosen and rejected answers."""
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 45)) as pilot:
        screen = await open_form(pilot, app)
        preview = screen.query_one("#preview")
        cases = [("sft", "dpo_en_demo", "is a preference (ranking) dataset"), ("dpo", "alpaca_en_demo", "has no chosen/rejected answers"),
                 ("kto", "dpo_en_demo", "fits stage dpo or rm, not kto"), ("kto", "alpaca_en_demo", "kto_tag")]  # (the registry's word first, as ftui train says it)
        for stage, dataset, message in cases:
            screen.fill({"stage": stage, "dataset": dataset, "dataset_dir": str(lf_data)})
            screen.preview_dataset(dataset, str(lf_data), stage)
            await until(pilot, lambda: screen.query("#e-dataset") and message in " ".join(text_of(screen.query_one("#e-dataset", Label)).split()))
            await until(pilot, lambda: message in " ".join(text_of(preview).split()))  # the preview's own worker, maybe later
            assert screen.query_one("#start", Button).disabled and screen.config is None
        screen.fill({"stage": "dpo", "dataset": "dpo_en_demo"})
        screen.preview_dataset("dpo_en_demo", str(lf_data), "dpo")
        await until(pilot, lambda: "dpo_en_demo: sharegpt ranking format" in text_of(preview))
        lines = text_of(preview).splitlines()
        first = next(i for i, line in enumerate(lines) if line.lstrip().startswith("1. "))
        assert "→ chosen: " in lines[first] and lines[first + 1].lstrip().startswith("rejected: ")
        await until(pilot, lambda: not screen.query_one("#e-dataset", Label).display)
        await until(pilot, lambda: screen.config is not None and screen.config.stage == "dpo")
        screen.fill({"stage": "kto", "dataset": "kto_en_demo"})
        screen.preview_dataset("kto_en_demo", str(lf_data), "kto")
        await until(pilot, lambda: "kto_en_demo: sharegpt feedback format" in text_of(preview))
        assert "[desirable]" in text_of(preview) or "[undesirable]" in text_of(preview)
        await until(pilot, lambda: screen.config is not None and screen.config.stage == "kto")


async def test_a_loaded_flash_attn_shows_as_it_is_and_fa3_is_refused_beside_it(tmp_path):
    """LLaMA-Factory's flash_attn is a field: a loaded value stays (fa3 with validation's reason
    and Start off, never silently replaced by the form's default) and is saved back."""
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = await load_in_form(pilot, app, tmp_path / "lf.yaml", LF_LORA_SFT + "flash_attn: fa3\n")
        await until(pilot, lambda: screen.query("#e-flash_attn") and "FlashAttention-3" in text_of(screen.query_one("#e-flash_attn")))
        assert screen.query_one("#f-flash_attn").value == "fa3" and screen.query_one("#start", Button).disabled
        screen.save_yaml(str(tmp_path / "saved.yaml"), screen.current_config_dict())
        await until(pilot, lambda: (tmp_path / "saved.yaml").exists())
        assert yaml.safe_load((tmp_path / "saved.yaml").read_text())["flash_attn"] == "fa3"
