"""The app's screens in Chinese (issue 19): SVG snapshots of a dashboard, the runs screen and
chat in zh at 80x24 and 120x40 (recorded runs, fixed clocks and GPU sample, a fake chat
worker: deterministic), and switching the language inside the app (ctrl+t) on each kind of
screen: its words change at once, what it holds stays, and switching back gives English.

After a deliberate layout change: pytest tests/test_i18n_screens.py --snapshot-update, then
look at the new SVGs before committing them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftui.i18n import current_language, set_language
from ftui.tui.app import FtuiApp
from tests.fixtures_runs import T0, fixed_sampler, write_run
from tests.test_chat import FakeWorker, fake_run
from tests.test_tui_pilot import text_of, until

SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.delenv("FTUI_LANG", raising=False)  # a switch inside the app exports it: the test's own env
    __import__("time").tzset()
    yield
    set_language("en", export=False)


@pytest.fixture
def zh():
    set_language("zh", export=False)
    yield
    set_language("en", export=False)


async def settle(pilot):
    """Lets what is on screen render; callers first wait for their workers' results (no fixed pause)."""
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()


def gpu_panel_shown(screen) -> bool:
    return "612 W" in text_of(screen.query_one("#gpu-panel"))  # fixed_sampler's GPUs, sampled by a thread worker


async def dashboard_shown(pilot, step: int, log_lines: int) -> None:
    """Until the dashboard's workers have shown the run (its step and log tail) and a device sample."""
    from ftui.tui.screens.dashboard import DashboardScreen

    def shown() -> bool:
        screen = pilot.app.screen
        return (isinstance(screen, DashboardScreen) and screen.view is not None and screen.view.step == step
                and len(screen.query_one("#log-tail").lines) == log_lines and gpu_panel_shown(screen))

    await until(pilot, shown)


def footer_text(screen) -> str:
    return " ".join(str(key.render()) for key in screen.query("FooterKey") if key.display)


class ChatApp(FtuiApp):
    """The app with a chat screen on a run, its model a fake worker answering in Chinese."""

    def __init__(self, run: Path, workers: list, answer=("你好", "，我是 ftui 的演示模型。")):
        super().__init__(run.parent, offer_live=False)
        self.chat_run, self.chat_workers, self.answer = run, workers, answer

    def on_mount(self, event) -> None:
        from ftui.tui.screens.chat import ChatScreen

        event.prevent_default()  # not FtuiApp's (the launch form)

        def factory():
            self.chat_workers.append(FakeWorker(self.answer))
            return self.chat_workers[-1]

        self.push_screen(ChatScreen(self.chat_run, worker_factory=factory))


def runs_root() -> Path:
    root = Path("runs")  # relative: the title shows it as given
    write_run(root, "qwen-lora-20231114-221320", steps=600, max_steps=600, end="completed")
    write_run(root, "llama-full-20231114-231000", steps=80, max_steps=600, end="failed", model="meta-llama/Llama-3.2-1B")
    write_run(root, "demo-20231115-090000", steps=30, max_steps=390, end="stopped", model="ftui-demo")
    return root


async def ask(pilot, text: str) -> None:
    screen = pilot.app.screen
    prompt = screen.query_one("#chat-prompt")
    await until(pilot, lambda: "main" in screen.workers_by_pane)
    prompt.value = text
    prompt.focus()
    await pilot.press("enter")
    await until(pilot, lambda: not screen.busy and screen.conversations.get("main") and screen.conversations["main"].messages)


# --- snapshots in Chinese

@SIZES
def test_dashboard_in_chinese(snap_compare, tmp_path, zh, size):
    run = write_run(tmp_path / "runs", "qwen-lora-20231114-221320", steps=240, max_steps=600,
                    log_lines=("[rank0] step 240 done", "[rank1] step 240 done"))
    app = FtuiApp(tmp_path / "runs", attach=run, clock=lambda: T0 + 400, sampler=fixed_sampler, offer_live=False)

    async def before(pilot):
        await dashboard_shown(pilot, step=240, log_lines=2)
        await settle(pilot)

    assert snap_compare(app, terminal_size=size, run_before=before)


@SIZES
def test_runs_screen_in_chinese(snap_compare, zh, size):
    app = FtuiApp(runs_root(), sampler=fixed_sampler, offer_live=False, render_examples=False)  # the form under it renders no example (a child process)

    async def before(pilot):
        pilot.app.action_show_runs()
        screen = pilot.app.screen
        await until(pilot, lambda: len(screen.runs) == 3)  # listed by a thread worker
        await settle(pilot)
        await pilot.press("space", "down", "space", "o")
        await until(pilot, lambda: len(screen.overlaid) == 2)  # the two marked runs' curves, read by a thread worker
        await settle(pilot)

    assert snap_compare(app, terminal_size=size, run_before=before)


@SIZES
def test_chat_in_chinese(snap_compare, tmp_path, zh, size):
    async def before(pilot):
        await ask(pilot, "ftui 是什么？")
        pilot.app.screen.query_one("#chat-prompt").cursor_blink = False  # a blinking cursor makes the picture flaky
        await settle(pilot)

    assert snap_compare(ChatApp(fake_run(tmp_path), []), terminal_size=size, run_before=before)


# --- switching the language inside the app

async def test_switch_on_a_dashboard_keeps_the_run_and_its_plot_settings(tmp_path):
    from ftui.tui.screens.dashboard import DashboardScreen
    from ftui.tui.widgets import LossPlot, RunHeader

    run = write_run(tmp_path / "runs", "qwen-lora-20231114-221320", steps=240, max_steps=600, log_lines=("[rank0] step 240 done",))
    app = FtuiApp(tmp_path / "runs", attach=run, clock=lambda: T0 + 400, sampler=fixed_sampler, offer_live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        await until(pilot, lambda: screen.view is not None and screen.view.step == 240)
        await pilot.press("m")  # smoothing off: a setting the switch must keep
        assert "elapsed" in text_of(screen.query_one(RunHeader)) and "Stop" in footer_text(screen)
        await pilot.press("ctrl+t")
        await until(pilot, lambda: "已用" in text_of(screen.query_one(RunHeader)) and "停止" in footer_text(screen))
        assert current_language() == "zh"
        assert app.screen is screen and screen.view.step == 240  # the same dashboard, on the same run
        header = text_of(screen.query_one(RunHeader))
        assert "已用" in header and "运行中" in header
        assert "停止" in footer_text(screen) and "Stop" not in footer_text(screen)
        assert screen.query_one("#gpu-panel").border_title == "设备"
        assert screen.query_one(LossPlot).smoothing is False
        assert "step 240 done" in "".join(str(line.text) for line in screen.query_one("#log-tail").lines)
        await pilot.press("ctrl+t")
        await until(pilot, lambda: "elapsed" in text_of(screen.query_one(RunHeader)) and "Stop" in footer_text(screen))
        assert current_language() == "en" and "elapsed" in text_of(screen.query_one(RunHeader))
        assert "Stop" in footer_text(screen)


async def test_switch_on_the_runs_screen_keeps_selection_and_marks():
    from textual.widgets import DataTable

    from ftui.tui.screens.dashboard import DashboardScreen
    from ftui.tui.screens.runs import RunsScreen

    root = runs_root()  # over a dashboard (the launch form is area A's: its switch is tested there)
    app = FtuiApp(root, attach=root / "demo-20231115-090000", sampler=fixed_sampler, offer_live=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        app.action_show_runs()
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        await until(pilot, lambda: len(screen.runs) == 3)
        await pilot.press("down", "space", "down")
        table = screen.query_one(DataTable)
        selected, marked = table.cursor_row, set(screen.marked)
        assert selected == 2 and len(marked) == 1
        await pilot.press("ctrl+t")
        await until(pilot, lambda: "状态" in [str(column.label) for column in table.columns.values()])
        headings = [str(column.label) for column in table.columns.values()]
        assert "状态" in headings and "status" not in headings
        assert "中的运行" in text_of(screen.query_one("#runs-title"))
        assert table.cursor_row == selected and screen.marked == marked
        await pilot.press("ctrl+t")
        await until(pilot, lambda: "status" in [str(column.label) for column in table.columns.values()])
        assert "status" in [str(column.label) for column in table.columns.values()]
        assert table.cursor_row == selected and screen.marked == marked


async def test_switch_in_chat_keeps_the_conversation_and_the_model(tmp_path):
    from textual.widgets import Input

    from ftui.tui.screens.chat_pane import ChatPane

    workers: list = []
    app = ChatApp(fake_run(tmp_path), workers)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await ask(pilot, "hello")
        pane = screen.query_one("#pane-main", ChatPane)
        turns = len(pane.children)
        screen.query_one("#chat-system", Input).value = "be brief"
        screen.query_one("#chat-prompt", Input).value = "half typed"
        await pilot.press("ctrl+t")
        await until(pilot, lambda: screen.query_one("#chat-prompt", Input).placeholder.startswith("输入问题")
                    and "清空" in footer_text(screen))
        assert screen.query_one("#chat-prompt", Input).placeholder.startswith("输入问题")
        assert screen.query_one("#chat-label-temperature").render().plain == "温度"
        assert screen.query_one("#pane-main", ChatPane) is pane and len(pane.children) == turns  # the conversation stays
        assert screen.query_one("#chat-prompt", Input).value == "half typed"
        assert screen.query_one("#chat-system", Input).value == "be brief"
        assert len(workers) == 1 and screen.workers_by_pane["main"] is workers[0]  # no reload: the same model
        assert str(screen.query_one("#chat-source").value) == "final"
        assert "清空" in footer_text(screen)
        await pilot.press("ctrl+t")
        await until(pilot, lambda: screen.query_one("#chat-prompt", Input).placeholder.startswith("ask something"))
        assert screen.query_one("#chat-prompt", Input).placeholder.startswith("ask something")
        assert len(workers) == 1 and len(pane.children) == turns


async def test_the_palette_offers_the_switch_and_a_confirm_dialog_follows_it(tmp_path):
    from textual.command import CommandList, CommandPalette

    from ftui.tui.screens.dashboard import DashboardScreen
    from ftui.tui.screens.modals import Confirm

    run = write_run(tmp_path / "runs", "qwen-lora-20231114-221320", steps=20, max_steps=600)
    app = FtuiApp(tmp_path / "runs", attach=run, clock=lambda: T0 + 400, sampler=fixed_sampler, offer_live=False)
    async with app.run_test(size=(100, 30)) as pilot:
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert "Language: English / 中文" in titles
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"Language: English")

        def highlighted() -> str:  # the palette's highlighted hit (its search runs in an async worker)
            hits = app.screen.query(CommandList)
            if not hits or hits.first().highlighted is None:
                return ""
            return str(hits.first().get_option_at_index(hits.first().highlighted).prompt)

        await until(pilot, lambda: "Language: English" in highlighted())
        await pilot.press("enter")
        await until(pilot, lambda: current_language() == "zh")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.query_one("#gpu-panel").border_title == "设备")
        assert "设备" == app.screen.query_one("#gpu-panel").border_title
        await pilot.press("ctrl+t")
        await until(pilot, lambda: current_language() == "en")
        await pilot.press("s")  # Stop asks first
        await until(pilot, lambda: isinstance(app.screen, Confirm))
        await pilot.press("ctrl+t")

        def relabelled() -> bool:  # the dialog composed again in Chinese, its yes button focused again
            dialog = app.screen
            return (isinstance(dialog, Confirm) and any("[n] 否" in str(button.label) for button in dialog.query("#no"))
                    and any(button is dialog.focused for button in dialog.query("#yes")))

        await until(pilot, relabelled)
        dialog = app.screen
        assert isinstance(dialog, Confirm) and "[n] 否" in str(dialog.query_one("#no").label)
        assert dialog.focused is dialog.query_one("#yes")  # Enter still answers what the button says
        set_language("en", export=False)


async def test_switch_on_job_screens_keeps_their_forms_and_the_job(tmp_path):
    from textual.widgets import Button, Checkbox, DataTable, Input, Select

    from ftui.tui.screens.dashboard import DashboardScreen
    from ftui.tui.screens.evalpredict import EvalPredictScreen
    from ftui.tui.screens.export import ExportScreen
    from tests.test_tui_evalpredict import write_job

    run = write_run(tmp_path / "runs", "demo-20231115-090000", steps=30, max_steps=30, end="completed", model="ftui-demo")
    (run / "final").mkdir()
    (run / "checkpoints" / "step-20").mkdir(parents=True)
    (run / "checkpoints" / "step-20" / "trainer_state.json").write_text('{"global_step": 20}')
    job = write_job(run, "20231115-100000", [{"prompt": "1+1=", "predict": "2", "label": "2"}])
    app = FtuiApp(tmp_path / "runs", attach=run, sampler=fixed_sampler, offer_live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, EvalPredictScreen) and app.screen.found is not None)
        screen = app.screen
        table = screen.query_one("#ep-jobs", DataTable)
        await until(pilot, lambda: table.row_count == 1)
        screen.open_job(job)
        screen.query_one("#ep-dataset", Input).value = "my_data"
        await pilot.press("ctrl+t")
        await until(pilot, lambda: str(screen.query_one("#ep-start", Button).label) == "启动"
                    and screen.query_one("#ep-form").border_title == "新任务" and "评估与预测" in text_of(screen.query_one("#ep-title")))
        assert str(screen.query_one("#ep-start", Button).label) == "启动"
        assert screen.query_one("#ep-form").border_title == "新任务"
        assert "评估与预测" in text_of(screen.query_one("#ep-title"))
        await until(pilot, lambda: table.row_count == 1)
        assert "状态" in [str(column.label) for column in table.columns.values()]
        assert screen.query_one("#ep-dataset", Input).value == "my_data" and screen.job_dir == job
        await until(pilot, lambda: "已完成" in text_of(screen.query_one("#ep-job")))
        await pilot.press("escape")
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ExportScreen) and app.screen.found is not None)
        export = app.screen
        out = export.query_one("#xp-out", Input)
        export.query_one("#xp-source", Select).value = "step-20"  # the out dir follows it: RUN-step-20
        await until(pilot, lambda: out.value.endswith("step-20"))
        await pilot.press("ctrl+t")
        await until(pilot, lambda: export.query_one("#xp-form").border_title == "new export"  # and the source's Changed handled
                    and str(export.query_one("#xp-force", Checkbox).label) == "old ftui export"
                    and export.query_one("#xp-source", Select).value == "step-20" and out.value.endswith("step-20"))
        assert export.query_one("#xp-form").border_title == "new export"
        assert str(export.query_one("#xp-force", Checkbox).label) == "old ftui export"
        assert export.query_one("#xp-source", Select).value == "step-20" and out.value.endswith("step-20")
        out.value = str(tmp_path / "my-export")
        await pilot.press("ctrl+t")
        await until(pilot, lambda: str(export.query_one("#xp-force", Checkbox).label) == "旧的 ftui 导出"
                    and export.query_one("#xp-source", Select).value == "step-20" and out.value == str(tmp_path / "my-export"))
        assert str(export.query_one("#xp-force", Checkbox).label) == "旧的 ftui 导出"
        assert export.query_one("#xp-source", Select).value == "step-20" and out.value == str(tmp_path / "my-export")
